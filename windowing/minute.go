package windowing

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// NoWatermark is the watermark before any has been received.
const NoWatermark = math.MinInt64

// HourMs is one hour in milliseconds.
const HourMs = 3_600_000

// Row is an output row of the window operator: a closed minute, or the hour
// roll-up of an ad (the sum of that hour's closed minutes so far).
type Row struct {
	Ad          string
	StartMs     int64 // start of the minute or the hour
	Hour        bool
	Valid       int64
	SpendMicros int64
	// RunValid and RunSpend are the running total for dashboards at the
	// moment of the row: the same as Valid and SpendMicros for a minute;
	// closed plus open minutes for an hour (equal to the row once the hour
	// is complete). Rows from Advance carry them so that an hour's final
	// running total is written in the same epoch as its last row.
	RunValid, RunSpend int64
}

// Running is a running total for dashboards: an open or closed minute, or
// an hour's fast total (closed minutes plus the open minutes' running
// counts).
type Running = Row

type acc struct {
	count, spend int64
}

type minuteKey struct {
	ad    string
	start int64
}

type hourKey struct {
	ad    string
	start int64
}

type hourAcc struct {
	closed acc // sum of the closed minutes
	open   acc // sum of the open minutes' running counts
	nOpen  int // number of open minutes in this hour
}

// Stats counts what a Minutes operator did.
type Stats struct {
	PartialsIn, MinutesFired, HourRows, ClosedPartials int64
}

// Minutes is the minute-window operator of one subtask: tumbling windows of
// WindowMs per ad, fired by event-time timers at end − 1 ms, with allowed
// lateness 0, and the hour roll-up from closed minutes. Not safe for
// concurrent use.
type Minutes struct {
	windowMs int64
	wm       int64
	open     map[int64]map[string]*acc // window start → ad → running count
	starts   []int64                   // sorted open window starts: the event-time timers
	hours    map[hourKey]*hourAcc
	dirtyMin map[minuteKey]struct{}
	dirtyHr  map[hourKey]struct{}
	stats    Stats
}

// NewMinutes returns a window operator with windows of windowMs (which must
// divide an hour).
func NewMinutes(windowMs int64) (*Minutes, error) {
	if windowMs <= 0 || HourMs%windowMs != 0 {
		return nil, fmt.Errorf("windowing: window %d ms must be positive and divide an hour", windowMs)
	}
	return &Minutes{
		windowMs: windowMs,
		wm:       NoWatermark,
		open:     make(map[int64]map[string]*acc),
		hours:    make(map[hourKey]*hourAcc),
		dirtyMin: make(map[minuteKey]struct{}),
		dirtyHr:  make(map[hourKey]struct{}),
	}, nil
}

// Stats returns the counters so far.
func (m *Minutes) Stats() Stats { return m.stats }

// Watermark returns the operator's current watermark.
func (m *Minutes) Watermark() int64 { return m.wm }

// OpenWindows returns the number of open (ad, window) pairs.
func (m *Minutes) OpenWindows() int {
	n := 0
	for _, ads := range m.open {
		n += len(ads)
	}
	return n
}

// Add adds a partial sum (count and spend) for ad to the window starting at
// windowStart. It returns false, and changes nothing, if that window has
// already fired: the pre-aggregator's ordering (partials before
// watermarks) makes that impossible, so the caller treats it as a late
// click batch rather than lose it.
func (m *Minutes) Add(ad string, windowStart, count, spend int64) bool {
	if m.wm != NoWatermark && windowStart+m.windowMs-1 <= m.wm {
		m.stats.ClosedPartials++
		return false
	}
	m.stats.PartialsIn++
	ads, ok := m.open[windowStart]
	if !ok {
		ads = make(map[string]*acc)
		m.open[windowStart] = ads
		i, _ := slices.BinarySearch(m.starts, windowStart)
		m.starts = slices.Insert(m.starts, i, windowStart)
	}
	a, ok := ads[ad]
	if !ok {
		a = &acc{}
		ads[ad] = a
	}
	a.count += count
	a.spend += spend
	hk := hourKey{ad, hourStart(windowStart)}
	h := m.hour(hk)
	if !ok {
		h.nOpen++
	}
	h.open.count += count
	h.open.spend += spend
	m.dirtyMin[minuteKey{ad, windowStart}] = struct{}{}
	m.dirtyHr[hk] = struct{}{}
	return true
}

func (m *Minutes) hour(hk hourKey) *hourAcc {
	h, ok := m.hours[hk]
	if !ok {
		h = &hourAcc{}
		m.hours[hk] = h
	}
	return h
}

// Advance moves the operator's watermark to wm (never back) and fires every
// window whose last millisecond (end − 1) is ≤ wm, in order of window start
// and then ad. For each fired minute it emits the minute row, and for each
// hour that received closed minutes it then emits the hour's roll-up row
// once. Hours that can no longer change (wm past their last millisecond and
// no open minute left) are forgotten after their last row.
func (m *Minutes) Advance(wm int64, emit func(Row)) {
	if wm <= m.wm {
		return
	}
	m.wm = wm
	var touched []hourKey
	seen := make(map[hourKey]struct{})
	for len(m.starts) > 0 && m.starts[0]+m.windowMs-1 <= wm {
		start := m.starts[0]
		m.starts = m.starts[1:]
		ads := m.open[start]
		delete(m.open, start)
		names := make([]string, 0, len(ads))
		for ad := range ads {
			names = append(names, ad)
		}
		slices.Sort(names)
		for _, ad := range names {
			a := ads[ad]
			emit(Row{Ad: ad, StartMs: start, Valid: a.count, SpendMicros: a.spend, RunValid: a.count, RunSpend: a.spend})
			m.stats.MinutesFired++
			hk := hourKey{ad, hourStart(start)}
			h := m.hour(hk)
			h.open.count -= a.count
			h.open.spend -= a.spend
			h.nOpen--
			h.closed.count += a.count
			h.closed.spend += a.spend
			if _, ok := seen[hk]; !ok {
				seen[hk] = struct{}{}
				touched = append(touched, hk)
			}
			m.dirtyMin[minuteKey{ad, start}] = struct{}{}
		}
	}
	for _, hk := range touched {
		h := m.hours[hk]
		emit(Row{Ad: hk.ad, StartMs: hk.start, Hour: true, Valid: h.closed.count, SpendMicros: h.closed.spend,
			RunValid: h.closed.count + h.open.count, RunSpend: h.closed.spend + h.open.spend})
		m.stats.HourRows++
	}
	for hk, h := range m.hours {
		if h.nOpen == 0 && hk.start+HourMs-1 <= wm {
			delete(m.hours, hk)
		}
	}
}

// Early emits the running totals that changed since the last call: per
// (ad, minute) the minute's count so far (or its final count if it closed
// since), and per (ad, hour) the hour's fast total so far (closed plus open
// minutes). It is the 1 s processing-time trigger for dashboards; rows for
// billing never come from it.
func (m *Minutes) Early(emit func(Running)) {
	for k := range m.dirtyMin {
		if ads, ok := m.open[k.start]; ok {
			if a, ok := ads[k.ad]; ok {
				emit(Running{Ad: k.ad, StartMs: k.start, Valid: a.count, SpendMicros: a.spend})
			}
		}
		delete(m.dirtyMin, k)
	}
	for k := range m.dirtyHr {
		if h, ok := m.hours[k]; ok {
			emit(Running{Ad: k.ad, StartMs: k.start, Hour: true,
				Valid: h.closed.count + h.open.count, SpendMicros: h.closed.spend + h.open.spend})
		}
		delete(m.dirtyHr, k)
	}
}

// Totals calls fn for every running total the operator's state implies:
// each open minute and each hour it still holds. The flush uses it to
// rewrite the dashboards from restored state.
func (m *Minutes) Totals(fn func(Running)) {
	for start, ads := range m.open {
		for ad, a := range ads {
			fn(Running{Ad: ad, StartMs: start, Valid: a.count, SpendMicros: a.spend})
		}
	}
	for k, h := range m.hours {
		fn(Running{Ad: k.ad, StartMs: k.start, Hour: true,
			Valid: h.closed.count + h.open.count, SpendMicros: h.closed.spend + h.open.spend})
	}
}

// HasTotal reports whether state implies a running total for (ad, start,
// hour).
func (m *Minutes) HasTotal(ad string, start int64, hour bool) bool {
	if hour {
		_, ok := m.hours[hourKey{ad, start}]
		return ok
	}
	_, ok := m.open[start][ad]
	return ok
}

// Snapshot serialises the operator's state grouped by key group of the ad,
// calling fn once per non-empty key group, in key-group order.
func (m *Minutes) Snapshot(fn func(kg int, data []byte) error) error {
	type ent struct {
		ad    string
		start int64
		hour  bool
		a, b  acc
		n     int
	}
	groups := make(map[int][]ent)
	for start, ads := range m.open {
		for ad, a := range ads {
			kg := KeyGroup(ad)
			groups[kg] = append(groups[kg], ent{ad: ad, start: start, a: *a})
		}
	}
	for k, h := range m.hours {
		kg := KeyGroup(k.ad)
		groups[kg] = append(groups[kg], ent{ad: k.ad, start: k.start, hour: true, a: h.closed, b: h.open, n: h.nOpen})
	}
	kgs := make([]int, 0, len(groups))
	for kg := range groups {
		kgs = append(kgs, kg)
	}
	slices.Sort(kgs)
	for _, kg := range kgs {
		es := groups[kg]
		slices.SortFunc(es, func(x, y ent) int {
			if x.hour != y.hour {
				if x.hour {
					return 1
				}
				return -1
			}
			if x.ad != y.ad {
				if x.ad < y.ad {
					return -1
				}
				return 1
			}
			return cmp.Compare(x.start, y.start)
		})
		var b []byte
		for _, e := range es {
			if e.hour {
				b = append(b, 'h')
			} else {
				b = append(b, 'm')
			}
			b = binary.AppendUvarint(b, uint64(len(e.ad)))
			b = append(b, e.ad...)
			b = binary.AppendVarint(b, e.start)
			b = binary.AppendVarint(b, e.a.count)
			b = binary.AppendVarint(b, e.a.spend)
			if e.hour {
				b = binary.AppendVarint(b, e.b.count)
				b = binary.AppendVarint(b, e.b.spend)
				b = binary.AppendVarint(b, int64(e.n))
			}
		}
		if err := fn(kg, b); err != nil {
			return err
		}
	}
	return nil
}

var errCorrupt = errors.New("windowing: corrupt snapshot")

// Restore adds the state of one key group, as produced by Snapshot.
func (m *Minutes) Restore(data []byte) error {
	r := reader{b: data}
	for len(r.b) > 0 {
		kind := r.b[0]
		r.b = r.b[1:]
		n := r.uvarint()
		if r.err != nil || uint64(len(r.b)) < n {
			return errCorrupt
		}
		ad := string(r.b[:n])
		r.b = r.b[n:]
		start, c, s := r.varint(), r.varint(), r.varint()
		switch kind {
		case 'm':
			if r.err != nil {
				return errCorrupt
			}
			ads, ok := m.open[start]
			if !ok {
				ads = make(map[string]*acc)
				m.open[start] = ads
				i, _ := slices.BinarySearch(m.starts, start)
				m.starts = slices.Insert(m.starts, i, start)
			}
			ads[ad] = &acc{count: c, spend: s}
		case 'h':
			oc, os, no := r.varint(), r.varint(), r.varint()
			if r.err != nil {
				return errCorrupt
			}
			m.hours[hourKey{ad, start}] = &hourAcc{closed: acc{c, s}, open: acc{oc, os}, nOpen: int(no)}
		default:
			return errCorrupt
		}
	}
	return nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func hourStart(t int64) int64 {
	q := t / HourMs
	if t%HourMs != 0 && t < 0 {
		q--
	}
	return q * HourMs
}

// HourStart returns the start of the hour holding t (Unix ms).
func HourStart(t int64) int64 { return hourStart(t) }

// HourRows emits the roll-up row of every hour the operator holds that has
// closed minutes (a rewrite of the rows from state, after the blue/green
// sweep removed another generation's values).
func (m *Minutes) HourRows(emit func(Row)) {
	keys := make([]hourKey, 0, len(m.hours))
	for k, h := range m.hours {
		if h.closed.count > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b hourKey) int {
		if a.ad != b.ad {
			if a.ad < b.ad {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.start, b.start)
	})
	for _, k := range keys {
		h := m.hours[k]
		emit(Row{Ad: k.ad, StartMs: k.start, Hour: true, Valid: h.closed.count, SpendMicros: h.closed.spend,
			RunValid: h.closed.count + h.open.count, RunSpend: h.closed.spend + h.open.spend})
	}
}
