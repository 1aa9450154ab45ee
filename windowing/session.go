package windowing

import (
	"container/heap"
	"sort"
)

// Sessions assigns elements to gap-based session windows per key and merges
// them, following the exact model of seed 004: each element at t opens
// [t, t+gap); windows of the same key that overlap merge into one session;
// windows that only touch (one's End equals the other's Start) do not. So two
// consecutive elements of a key share a session exactly when they are less
// than gap ms apart, and a late element can bridge two sessions into one.
//
// Sessions does not judge lateness: an element whose session would already
// have fired must be dropped or sent to the late path by the caller before
// Add (Fire forgets what it emits, so such an element would open a fresh
// session). Times are Unix ms; an End past math.MaxInt64 saturates.
//
// A Sessions is not safe for concurrent use; it belongs to one subtask.
type Sessions struct {
	gap    int64
	keys   map[string][]session // per key: disjoint sessions sorted by Start
	timers endHeap              // one entry per session bound change; stale entries are skipped
	live   int                  // number of sessions held
}

type session struct {
	w     Window
	count int64
}

// NewSessions returns an empty session assigner with the inactivity gap
// gapMs (ms). A gap below 1 ms is treated as 1 ms: every element then opens
// [t, t+1), and only elements with the same timestamp share a session.
func NewSessions(gapMs int64) *Sessions {
	if gapMs < 1 {
		gapMs = 1
	}
	return &Sessions{gap: gapMs, keys: make(map[string][]session)}
}

// Gap returns the inactivity gap in ms.
func (s *Sessions) Gap() int64 { return s.gap }

// Len returns the number of sessions currently held, over all keys.
func (s *Sessions) Len() int { return s.live }

// Add assigns the element (key, t), t in Unix ms, and returns the session it
// now belongs to. absorbed lists, ordered by Start, the sessions of the key
// that ceased to exist because they were merged into merged (their bounds as
// they were before this call): nil when the element opened a new session or
// fell inside an existing one without moving its bounds, one window when it
// extended a session, two or more when it bridged sessions. A sink that
// already published an absorbed session must replace or retract it.
func (s *Sessions) Add(key string, t int64) (merged Window, absorbed []Window) {
	nw := Window{Start: t, End: satAdd(t, s.gap)}
	list := s.keys[key]
	// Sessions of one key are disjoint and sorted by Start, so their Ends
	// are sorted too. The ones overlapping nw form the run [lo, hi):
	// the first with End > nw.Start up to the first with Start >= nw.End.
	lo := sort.Search(len(list), func(i int) bool { return list[i].w.End > nw.Start })
	hi := lo + sort.Search(len(list)-lo, func(i int) bool { return list[lo+i].w.Start >= nw.End })

	if lo == hi {
		list = append(list, session{})
		copy(list[lo+1:], list[lo:])
		list[lo] = session{w: nw, count: 1}
		s.keys[key] = list
		s.live++
		heap.Push(&s.timers, timer{end: nw.End, key: key, start: nw.Start})
		return nw, nil
	}

	merged = Window{Start: min(nw.Start, list[lo].w.Start), End: max(nw.End, list[hi-1].w.End)}
	count := int64(1)
	for _, x := range list[lo:hi] {
		count += x.count
	}
	if hi-lo == 1 && list[lo].w == merged {
		list[lo].count = count // inside an existing session: bounds unchanged
		return merged, nil
	}
	absorbed = make([]Window, 0, hi-lo)
	for _, x := range list[lo:hi] {
		absorbed = append(absorbed, x.w)
	}
	list[lo] = session{w: merged, count: count}
	list = append(list[:lo+1], list[hi:]...)
	s.keys[key] = list
	s.live -= hi - lo - 1
	heap.Push(&s.timers, timer{end: merged.End, key: key, start: merged.Start})
	s.maybeCompact()
	return merged, absorbed
}

// Fire emits and forgets every session whose last millisecond, End − 1, is
// at or before the watermark wm (Unix ms), calling fn in (key, Start) order
// with the session and its element count. fn must not call back into s.
func (s *Sessions) Fire(wm int64, fn func(key string, w Window, count int64)) {
	type ripe struct {
		key string
		s   session
	}
	var out []ripe
	for len(s.timers) > 0 && s.timers[0].end-1 <= wm {
		tm := heap.Pop(&s.timers).(timer)
		list := s.keys[tm.key]
		i := sort.Search(len(list), func(i int) bool { return list[i].w.Start >= tm.start })
		if i == len(list) || list[i].w != (Window{Start: tm.start, End: tm.end}) {
			continue // stale: the session merged into a later one, or already fired
		}
		out = append(out, ripe{key: tm.key, s: list[i]})
		list = append(list[:i], list[i+1:]...)
		if len(list) == 0 {
			delete(s.keys, tm.key)
		} else {
			s.keys[tm.key] = list
		}
		s.live--
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key != out[j].key {
			return out[i].key < out[j].key
		}
		return out[i].s.w.Start < out[j].s.w.Start
	})
	for _, r := range out {
		fn(r.key, r.s.w, r.s.count)
	}
}

// maybeCompact rebuilds the timer heap from the live sessions when stale
// entries (left by merges) outnumber live ones, so memory stays
// proportional to the sessions held even if the watermark stalls.
func (s *Sessions) maybeCompact() {
	if len(s.timers) <= 2*s.live+64 {
		return
	}
	s.timers = s.timers[:0]
	for key, list := range s.keys {
		for _, x := range list {
			s.timers = append(s.timers, timer{end: x.w.End, key: key, start: x.w.Start})
		}
	}
	heap.Init(&s.timers)
}

// timer is an event-time timer at a session's End, naming the session by
// (key, Start, End) so that stale timers can be recognised.
type timer struct {
	end   int64
	key   string
	start int64
}

// endHeap is a min-heap of timers by end.
type endHeap []timer

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *endHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}
