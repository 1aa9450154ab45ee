package lease

import (
	"cmp"
	"hash/fnv"
	"slices"
	"time"
)

// Watcher turns successive reads of a job's lease table into Snapshots. It
// remembers, for every item, when (on the worker's own clock) it first saw
// the item's current owner and counter, and its current handoff request.
// That is the taker's watch of the Kinesis Client Library: a holder is dead
// once its counter has not moved for a lease duration of the watcher's
// clock, and a handoff request has lapsed once it has stood for the handoff
// timeout; no two machines' clocks are ever compared. A watch starts at the
// time given with the read, which must be taken after the read's answer
// arrived (TableScan.At): starting it before could count a renewal applied
// while the read was in flight as older than it is.
//
// A Watcher does no I/O and reads no clock. It is not safe for concurrent
// use.
type Watcher struct {
	watches map[string]watch
	items   map[string]Item
	rmap    *RangesMap
}

type watch struct {
	owner        string
	counter      int64
	handoff      string
	since        time.Duration
	handoffSince time.Duration
}

// NewWatcher returns a Watcher that has seen nothing: every holder it
// first sees is watched from then on, so a worker that starts takes no
// lease over before it has watched it for a lease duration.
func NewWatcher() *Watcher {
	return &Watcher{watches: map[string]watch{}, items: map[string]Item{}}
}

// Observe records a scan of the whole table (items absent from it are
// forgotten) and returns the snapshot.
func (w *Watcher) Observe(s TableScan) Snapshot {
	keep := make(map[string]bool, len(s.Items))
	for _, it := range s.Items {
		keep[it.Key] = true
		w.observe(it, s.At)
	}
	for k := range w.items {
		if !keep[k] {
			delete(w.items, k)
			delete(w.watches, k)
		}
	}
	w.rmap = s.Map
	return w.Snapshot()
}

// ObserveItem records one item read at time at (Worker.Read) and returns
// the snapshot.
func (w *Watcher) ObserveItem(it Item, at time.Duration) Snapshot {
	w.observe(it, at)
	return w.Snapshot()
}

func (w *Watcher) observe(it Item, at time.Duration) {
	prev, ok := w.watches[it.Key]
	next := prev
	if !ok || prev.owner != it.Owner || prev.counter != it.Counter {
		next.owner, next.counter, next.since = it.Owner, it.Counter, at
	}
	if !ok || prev.handoff != it.HandoffTo {
		next.handoff, next.handoffSince = it.HandoffTo, at
	}
	w.watches[it.Key] = next
	w.items[it.Key] = it
}

// Snapshot returns what the watcher has seen, by key.
func (w *Watcher) Snapshot() Snapshot {
	s := Snapshot{Map: w.rmap, Leases: make([]Watched, 0, len(w.items))}
	for k, it := range w.items {
		wt := w.watches[k]
		s.Leases = append(s.Leases, Watched{Item: it, Since: wt.since, HandoffSince: wt.handoffSince})
	}
	slices.SortFunc(s.Leases, func(a, b Watched) int { return cmp.Compare(a.Key, b.Key) })
	return s
}

// Snapshot is a worker's view of its job's lease table: every item, with
// how long the worker has watched it unchanged.
type Snapshot struct {
	Map    *RangesMap // nil before setup
	Leases []Watched  // by key
}

// Watched is an item with its watch.
type Watched struct {
	Item
	// Since is when, on the watcher's clock, the item's current owner and
	// counter were first seen.
	Since time.Duration
	// HandoffSince is when its current handoff request (or the absence of
	// one) was first seen.
	HandoffSince time.Duration
}

// Expired reports whether the item is held by a holder the watcher has
// found dead: its counter has not moved for d (or the holder's own lease
// duration, if longer) until now. A free item is not expired: it can be
// taken without watching.
func (l Watched) Expired(now, d time.Duration) bool {
	return l.Owner != "" && now-l.Since >= max(d, l.Duration)
}

// Live reports whether the item is held by a holder that is not expired.
func (l Watched) Live(now, d time.Duration) bool { return l.Owner != "" && !l.Expired(now, d) }

// BalanceOptions are the times Balance decides by.
type BalanceOptions struct {
	// Duration is the lease duration D: a holder whose counter has not
	// moved for D (or its own duration, if longer) is dead. Default
	// DefaultDuration.
	Duration time.Duration
	// HandoffTimeout is how long a handoff request may stand unanswered
	// before it lapses: the asker then removes it, and a range released to
	// an asker that has not taken it becomes free to all. Default 2D.
	HandoffTimeout time.Duration
}

func (o BalanceOptions) withDefaults() BalanceOptions {
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.HandoffTimeout <= 0 {
		o.HandoffTimeout = 2 * o.Duration
	}
	return o
}

// Plan is what Balance tells one worker to do this round. Each action is
// a conditional write on the item as the snapshot showed it, so acting on
// a stale plan is safe: the write is refused (ErrChanged) and the next
// round decides again.
type Plan struct {
	Workers int // live workers, this one included
	Target  int // ceil(active ranges / Workers)
	Held    int // active ranges this worker holds (live in the snapshot)

	// Take lists the ranges to take (Worker.Take), in order: first those
	// released to this worker by a handoff it asked for (always taken,
	// whatever the target), then up to Target − Held − that many of the
	// free ranges, the expired ones (holder watched dead) and those
	// reserved for an asker whose handoff lapsed, in that order.
	Take []Item
	// Ask is the range to ask its holder to hand off (Worker.AskHandoff),
	// or nil: KCL's steal, at most one at a time, only when nothing could
	// be taken.
	Ask *Item
	// HandOff lists ranges this worker holds that a live worker asked
	// for: take a final checkpoint, commit it, and Release.
	HandOff []Item
	// Cancel lists handoff requests to remove (Worker.CancelHandoff): this
	// worker's own that lapsed unanswered, and those asked of it by a
	// worker no longer live.
	Cancel []Item
	// Activate lists pending ranges whose every origin is retired, with no
	// active or other such pending range overlapping them: a split or
	// merge that stopped after retiring its origins, which any worker may
	// finish (Worker.Activate, and the ranges map).
	Activate []Range
}

// Balance decides one round of the Kinesis Client Library's lease taker
// for worker me, from its snapshot s at time now (its clock). It is a
// pure function: no I/O, no clock, no goroutine, and the same arguments
// always give the same plan.
//
// The rules, KCL's with our ranges for shards (scale-out note §6.4):
//   - Live workers are the owners of slots and active ranges not expired,
//     and me. Target = ceil(active ranges / live workers).
//   - A range released to me (a handoff I asked for) is taken at once.
//   - While I hold fewer than Target, I take free ranges first, then
//     expired ones (a holder watched dead for a lease duration), then
//     ranges reserved for an asker whose handoff lapsed; the order within
//     each group is a hash of my id and the key, so that workers starting
//     together prefer different ranges.
//   - Only if there is nothing to take, no request of mine is pending and
//     I still need ranges, I ask the most loaded other worker (the most
//     live ranges; ties to the lowest id) for one of its ranges that has
//     no request on it, if it holds more than Target, or exactly Target
//     while I need more than one. The second case is KCL's
//     (chooseLeasesToSteal): without it 4 ranges on 3 workers would stay
//     2/2/0. At most one ask is pending per worker, as KCL's
//     maxLeasesToStealAtOneTime = 1. Asks never loop back: an asker ends
//     at most at Target, its holder at least at Target − 1.
//   - A range free for HandoffTimeout (watched free that long) is taken
//     whatever the target: nobody below the target is left to take it,
//     or it fails on the one that is. The fleet rebalances by asks.
//   - Only ranges the ranges map lists count: any other range item of
//     the job (a single process's lease) is never taken.
//   - A request on a range I hold is honoured (HandOff) when its asker is
//     live, else removed (Cancel). My own request lapses after
//     HandoffTimeout (Cancel; a new one waits for the next round). A live
//     holder's lease is never taken.
//
// A worker never releases a range only because it holds more than Target:
// ranges move to whoever asks, one at a time, so a balanced fleet (every
// worker within one of the others) is left alone.
func Balance(s Snapshot, me string, now time.Duration, o BalanceOptions) Plan {
	o = o.withDefaults()
	var p Plan
	live := map[string]bool{me: true}
	count := map[string]int{}
	var active []Watched
	for _, l := range s.Leases {
		switch l.Kind {
		case KindSlot:
			if l.Live(now, o.Duration) {
				live[l.Worker] = true
			}
		case KindRange:
			if l.State != StateActive {
				continue
			}
			if s.Map != nil && !slices.Contains(s.Map.Ranges, l.Range) {
				// Not one of the job's ranges (such as a single process's
				// job lease 0-128 beside ranges set up later): taking it
				// would count its ads twice.
				continue
			}
			active = append(active, l)
			if l.Live(now, o.Duration) {
				live[l.Worker] = true
				count[l.Worker]++
			}
		}
	}
	p.Activate = activatable(s)
	p.Workers, p.Held = len(live), count[me]
	if len(active) == 0 {
		return p
	}
	p.Target = (len(active) + p.Workers - 1) / p.Workers

	var reserved, free, expired, lapsed, strays []Item
	pendingAsk := false
	for _, l := range active {
		switch {
		case l.Live(now, o.Duration) && l.Worker == me:
			switch {
			case l.HandoffTo == "":
			case l.HandoffTo != me && live[l.HandoffTo]:
				p.HandOff = append(p.HandOff, l.Item)
			default:
				p.Cancel = append(p.Cancel, l.Item)
			}
		case l.Live(now, o.Duration):
			if l.HandoffTo == me {
				// Pending, or lapsed: removed this round, and a new request
				// waits for the next.
				pendingAsk = true
				if now-l.HandoffSince >= o.HandoffTimeout {
					p.Cancel = append(p.Cancel, l.Item)
				}
			}
		case l.Owner != "":
			expired = append(expired, l.Item)
		case l.HandoffTo == "":
			free = append(free, l.Item)
			if now-l.Since >= o.HandoffTimeout {
				strays = append(strays, l.Item)
			}
		case l.HandoffTo == me:
			reserved = append(reserved, l.Item)
		case now-max(l.Since, l.HandoffSince) >= o.HandoffTimeout:
			lapsed = append(lapsed, l.Item)
		}
	}
	prefer(me, reserved)
	p.Take = reserved
	needed := p.Target - p.Held - len(reserved)
	var cands []Item
	for _, group := range [][]Item{free, expired, lapsed} {
		prefer(me, group)
		cands = append(cands, group...)
	}
	switch {
	case needed <= 0:
	case len(cands) > 0:
		p.Take = append(p.Take, cands[:min(needed, len(cands))]...)
	case !pendingAsk && len(reserved) == 0:
		p.Ask = chooseAsk(active, count, me, now, needed, p.Target, o)
	}
	// A range left free for a handoff timeout is taken whatever the
	// target: the workers below it may all be gone, or the one that would
	// take it may be the one it fails on.
	prefer(me, strays)
	for _, it := range strays {
		if !slices.ContainsFunc(p.Take, func(t Item) bool { return t.Key == it.Key }) {
			p.Take = append(p.Take, it)
		}
	}
	return p
}

// chooseAsk picks the range to ask for: KCL's chooseLeasesToSteal, one
// range.
func chooseAsk(active []Watched, count map[string]int, me string, now time.Duration, needed, target int, o BalanceOptions) *Item {
	most, mostN := "", 0
	for owner, n := range count {
		if owner != me && (n > mostN || n == mostN && owner < most) {
			most, mostN = owner, n
		}
	}
	if most == "" || !(mostN > target || mostN == target && needed > 1) {
		return nil
	}
	var cands []Item
	for _, l := range active {
		if l.Worker == most && l.Live(now, o.Duration) && l.HandoffTo == "" {
			cands = append(cands, l.Item)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	prefer(me, cands)
	return &cands[0]
}

// prefer orders items by a hash of me and their key (then by key).
func prefer(me string, its []Item) {
	h := func(key string) uint64 {
		f := fnv.New64a()
		f.Write([]byte(me))
		f.Write([]byte{0})
		f.Write([]byte(key))
		return f.Sum64()
	}
	slices.SortFunc(its, func(a, b Item) int {
		return cmp.Or(cmp.Compare(h(a.Key), h(b.Key)), cmp.Compare(a.Key, b.Key))
	})
}

// activatable returns the pending ranges a split or merge left to be
// activated: every origin is retired, and no active range, nor another
// such pending one, overlaps it (two sets of children of one origin are
// left to the operator).
func activatable(s Snapshot) []Range {
	byRange := map[Range]Watched{}
	for _, l := range s.Leases {
		if l.Kind == KindRange {
			byRange[l.Range] = l
		}
	}
	var ready []Range
	for _, l := range s.Leases {
		if l.Kind != KindRange || l.State != StatePending || len(l.Origins) == 0 {
			continue
		}
		ok := true
		for _, o := range l.Origins {
			if it, found := byRange[o.Range]; !found || it.State != StateRetired {
				ok = false
			}
		}
		for _, a := range s.Leases {
			if a.Kind == KindRange && a.State == StateActive && overlaps(a.Range, l.Range) {
				ok = false
			}
		}
		if ok {
			ready = append(ready, l.Range)
		}
	}
	slices.SortFunc(ready, func(a, b Range) int { return cmp.Compare(a.From, b.From) })
	var out []Range
	for i, r := range ready {
		alone := true
		for j, q := range ready {
			if i != j && overlaps(r, q) {
				alone = false
			}
		}
		if alone {
			out = append(out, r)
		}
	}
	return out
}

// ChooseSlot returns the slot a worker of job should take (Worker.Take):
// the lowest k < slots whose item is missing, free, or expired (its holder
// watched dead for a lease duration, after which a replacement reuses the
// slot and its EFO consumer). ok is false when every slot is held by a
// live worker.
func ChooseSlot(s Snapshot, job string, now time.Duration, slots int, o BalanceOptions) (it Item, ok bool) {
	o = o.withDefaults()
	byKey := map[string]Watched{}
	for _, l := range s.Leases {
		if l.Kind == KindSlot {
			byKey[l.Key] = l
		}
	}
	for k := range slots {
		key := SlotKey(job, k)
		l, found := byKey[key]
		switch {
		case !found:
			return Item{Key: key, Kind: KindSlot, Slot: k}, true
		case !l.Live(now, o.Duration):
			return l.Item, true
		}
	}
	return Item{}, false
}
