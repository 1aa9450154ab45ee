package windowing

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"math"
	"slices"
	"strings"
)

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

// minSlot is an open minute of one ad.
type minSlot struct {
	start int64
	acc
	dirty bool // changed since the last Early
}

// hourSlot is an hour of one ad that still has open minutes or may still
// receive some.
type hourSlot struct {
	start  int64
	closed acc // sum of the closed minutes
	open   acc // sum of the open minutes' running counts
	nOpen  int // number of open minutes in this hour
	dirty  bool
	// fired is the Advance call that last emitted this hour's row, so that
	// an Advance closing several of its minutes emits it once.
	fired uint64
}

// adState is everything the operator holds for one ad: a few open minutes
// and hours, found by a scan of short slices. One map lookup by ad per
// partial replaces a lookup per (ad, minute), (ad, hour) and dirty set.
type adState struct {
	ad    string
	mins  []minSlot
	hours []hourSlot
	// drained holds the starts of minutes that Drain fired ahead of the
	// watermark: they stay closed (a later partial for one is refused, and
	// the caller counts it late) until the watermark passes them.
	drained []int64
	dirty   bool // listed in Minutes.dirty
}

func (a *adState) empty() bool { return len(a.mins) == 0 && len(a.hours) == 0 && len(a.drained) == 0 }

func (a *adState) minute(start int64) int {
	for i := range a.mins {
		if a.mins[i].start == start {
			return i
		}
	}
	return -1
}

func (a *adState) hourIdx(start int64) int {
	for i := range a.hours {
		if a.hours[i].start == start {
			return i
		}
	}
	return -1
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
	ads      map[string]*adState
	open     map[int64][]*adState // window start → ads with that minute open
	starts   []int64              // sorted open window starts: the event-time timers
	nOpen    int                  // open (ad, window) pairs
	dirty    []*adState           // ads with a minute or hour changed since the last Early
	advances uint64
	stats    Stats
	// oldestHour is a lower bound of the hour starts held (valid when
	// oldestOK): Advance looks for hours to forget only once the watermark
	// has passed the end of that hour.
	oldestHour int64
	oldestOK   bool
	// nDrained counts the drained minutes held; oldestDrained is a lower
	// bound of their starts (valid when nDrained > 0).
	nDrained      int
	oldestDrained int64
}

// NewMinutes returns a window operator with windows of windowMs (which must
// divide an hour).
func NewMinutes(windowMs int64) (*Minutes, error) {
	if windowMs <= 0 || eventtime.HourMs%windowMs != 0 {
		return nil, fmt.Errorf("windowing: window %d ms must be positive and divide an hour", windowMs)
	}
	return &Minutes{
		windowMs: windowMs,
		wm:       eventtime.NoWatermark,
		ads:      make(map[string]*adState),
		open:     make(map[int64][]*adState),
	}, nil
}

// Stats returns the counters so far.
func (m *Minutes) Stats() Stats { return m.stats }

// Watermark returns the operator's current watermark.
func (m *Minutes) Watermark() int64 { return m.wm }

// OpenWindows returns the number of open (ad, window) pairs.
func (m *Minutes) OpenWindows() int { return m.nOpen }

func (m *Minutes) adState(ad string) *adState {
	a := m.ads[ad]
	if a == nil {
		// The ad is kept beyond the partial: copy it, so that the
		// operator does not pin the buffer it was decoded into.
		a = &adState{ad: strings.Clone(ad)}
		m.ads[a.ad] = a
	}
	return a
}

// openMinute adds an empty open minute to a and to the timers.
func (m *Minutes) openMinute(a *adState, start int64) int {
	a.mins = append(a.mins, minSlot{start: start})
	list, ok := m.open[start]
	if !ok {
		i, _ := slices.BinarySearch(m.starts, start)
		m.starts = slices.Insert(m.starts, i, start)
	}
	m.open[start] = append(list, a)
	m.nOpen++
	return len(a.mins) - 1
}

// hour returns the index of a's hour starting at start, adding it if
// needed.
func (m *Minutes) hour(a *adState, start int64) int {
	if i := a.hourIdx(start); i >= 0 {
		return i
	}
	a.hours = append(a.hours, hourSlot{start: start})
	m.noteHour(start)
	return len(a.hours) - 1
}

func (m *Minutes) markDirty(a *adState) {
	if !a.dirty {
		a.dirty = true
		m.dirty = append(m.dirty, a)
	}
}

// Add adds a partial sum (count and spend) for ad to the window starting at
// windowStart. It returns false, and changes nothing, if that window has
// already fired: the pre-aggregator's ordering (partials before
// watermarks) makes that impossible, so the caller treats it as a late
// click batch rather than lose it.
//
// A window that Drain fired is closed too, until the watermark passes it.
func (m *Minutes) Add(ad string, windowStart, count, spend int64) bool {
	if eventtime.Closed(windowStart, m.windowMs, m.wm) {
		m.stats.ClosedPartials++
		return false
	}
	if m.nDrained > 0 {
		if a := m.ads[ad]; a != nil && slices.Contains(a.drained, windowStart) {
			m.stats.ClosedPartials++
			return false
		}
	}
	m.stats.PartialsIn++
	a := m.adState(ad)
	i := a.minute(windowStart)
	newMinute := i < 0
	if newMinute {
		i = m.openMinute(a, windowStart)
	}
	ms := &a.mins[i]
	ms.count += count
	ms.spend += spend
	ms.dirty = true
	h := &a.hours[m.hour(a, hourStart(windowStart))]
	if newMinute {
		h.nOpen++
	}
	h.open.count += count
	h.open.spend += spend
	h.dirty = true
	m.markDirty(a)
	return true
}

func (m *Minutes) noteHour(start int64) {
	if !m.oldestOK || start < m.oldestHour {
		m.oldestHour, m.oldestOK = start, true
	}
}

type hourRef struct {
	a     *adState
	start int64
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
	m.fire(wm, false, emit)
	if m.nDrained > 0 && eventtime.Closed(m.oldestDrained, m.windowMs, wm) {
		m.expireDrained(wm)
	}
	if !m.oldestOK || !eventtime.Closed(m.oldestHour, eventtime.HourMs, wm) {
		return
	}
	m.oldestOK = false
	for ad, a := range m.ads {
		a.hours = slices.DeleteFunc(a.hours, func(h hourSlot) bool { return h.nOpen == 0 && eventtime.Closed(h.start, eventtime.HourMs, wm) })
		for i := range a.hours {
			m.noteHour(a.hours[i].start)
		}
		if a.empty() {
			delete(m.ads, ad)
		}
	}
}

// Drain fires every open window now, as the end-of-time watermark of a
// drained stop or a finished file replay would, emitting rows as Advance
// does, but without moving the watermark: the fired minutes are remembered
// as closed (Add refuses them, so a click for one that comes after a
// restart is counted late, not written over the row), and hours and their
// roll-ups are kept until the real watermark passes them. Drain is what a
// job does with the end-of-time watermark: a later start after more input
// must find the state a real watermark left, not one that has forgotten
// everything.
func (m *Minutes) Drain(emit func(Row)) {
	m.fire(math.MaxInt64, true, emit)
}

// expireDrained forgets the drained minutes the watermark has passed.
func (m *Minutes) expireDrained(wm int64) {
	m.nDrained = 0
	for ad, a := range m.ads {
		if len(a.drained) == 0 {
			continue
		}
		a.drained = slices.DeleteFunc(a.drained, func(s int64) bool { return eventtime.Closed(s, m.windowMs, wm) })
		for _, s := range a.drained {
			m.noteDrained(s)
		}
		if a.empty() {
			delete(m.ads, ad)
		}
	}
}

func (m *Minutes) noteDrained(start int64) {
	if m.nDrained == 0 || start < m.oldestDrained {
		m.oldestDrained = start
	}
	m.nDrained++
}

// fire closes every open window whose last millisecond is ≤ limit, emitting
// each minute row and then each touched hour's roll-up once; drain records
// the fired minutes as drained.
func (m *Minutes) fire(limit int64, drain bool, emit func(Row)) {
	m.advances++
	var touched []hourRef
	for len(m.starts) > 0 && eventtime.Closed(m.starts[0], m.windowMs, limit) {
		start := m.starts[0]
		m.starts = m.starts[1:]
		list := m.open[start]
		delete(m.open, start)
		slices.SortFunc(list, func(x, y *adState) int { return strings.Compare(x.ad, y.ad) })
		for _, a := range list {
			i := a.minute(start)
			if i < 0 {
				continue
			}
			ms := a.mins[i]
			a.mins = slices.Delete(a.mins, i, i+1)
			m.nOpen--
			if drain {
				a.drained = append(a.drained, start)
				m.noteDrained(start)
			}
			emit(Row{Ad: a.ad, StartMs: start, Valid: ms.count, SpendMicros: ms.spend, RunValid: ms.count, RunSpend: ms.spend})
			m.stats.MinutesFired++
			hs := hourStart(start)
			h := &a.hours[m.hour(a, hs)]
			h.open.count -= ms.count
			h.open.spend -= ms.spend
			h.nOpen--
			h.closed.count += ms.count
			h.closed.spend += ms.spend
			if h.fired != m.advances {
				h.fired = m.advances
				touched = append(touched, hourRef{a, hs})
			}
		}
	}
	for _, t := range touched {
		h := &t.a.hours[t.a.hourIdx(t.start)]
		emit(Row{Ad: t.a.ad, StartMs: t.start, Hour: true, Valid: h.closed.count, SpendMicros: h.closed.spend,
			RunValid: h.closed.count + h.open.count, RunSpend: h.closed.spend + h.open.spend})
		m.stats.HourRows++
	}
}

// Early emits the running totals that changed since the last call: per
// (ad, minute) the minute's count so far, and per (ad, hour) the hour's
// fast total so far (closed plus open minutes). A minute that closed since
// is not emitted (its row carried its final total). It is the 1 s
// processing-time trigger for dashboards; rows for billing never come from
// it.
func (m *Minutes) Early(emit func(Running)) {
	for _, a := range m.dirty {
		a.dirty = false
		for i := range a.mins {
			if ms := &a.mins[i]; ms.dirty {
				ms.dirty = false
				emit(Running{Ad: a.ad, StartMs: ms.start, Valid: ms.count, SpendMicros: ms.spend})
			}
		}
		for i := range a.hours {
			if h := &a.hours[i]; h.dirty {
				h.dirty = false
				emit(Running{Ad: a.ad, StartMs: h.start, Hour: true,
					Valid: h.closed.count + h.open.count, SpendMicros: h.closed.spend + h.open.spend})
			}
		}
	}
	clear(m.dirty)
	m.dirty = m.dirty[:0]
}

// Totals calls fn for every running total the operator's state implies:
// each open minute and each hour it still holds. The flush uses it to
// rewrite the dashboards from restored state.
func (m *Minutes) Totals(fn func(Running)) {
	for _, a := range m.ads {
		for _, ms := range a.mins {
			fn(Running{Ad: a.ad, StartMs: ms.start, Valid: ms.count, SpendMicros: ms.spend})
		}
		for _, h := range a.hours {
			fn(Running{Ad: a.ad, StartMs: h.start, Hour: true,
				Valid: h.closed.count + h.open.count, SpendMicros: h.closed.spend + h.open.spend})
		}
	}
}

// HourClosed returns the roll-up state holds for ad and the hour starting
// at hourStartMs: the sum of that hour's closed minutes. ok is false if no
// minute of that hour has closed (or the hour is no longer held).
func (m *Minutes) HourClosed(ad string, hourStartMs int64) (valid, spendMicros int64, ok bool) {
	a := m.ads[ad]
	if a == nil {
		return 0, 0, false
	}
	i := a.hourIdx(hourStartMs)
	if i < 0 || a.hours[i].closed.count == 0 {
		return 0, 0, false
	}
	h := a.hours[i].closed
	return h.count, h.spend, true
}

// HasTotal reports whether state implies a running total for (ad, start,
// hour).
func (m *Minutes) HasTotal(ad string, start int64, hour bool) bool {
	a := m.ads[ad]
	if a == nil {
		return false
	}
	if hour {
		return a.hourIdx(start) >= 0
	}
	return a.minute(start) >= 0
}

// Snapshot serialises the operator's state grouped by key group of the ad,
// calling fn once per non-empty key group, in key-group order: open minutes
// ('m'), hours ('h'), then drained minutes ('d').
func (m *Minutes) Snapshot(fn func(kg int, data []byte) error) error {
	groups := make(map[int][]*adState)
	for _, a := range m.ads {
		if a.empty() {
			continue
		}
		kg := KeyGroup(a.ad)
		groups[kg] = append(groups[kg], a)
	}
	kgs := make([]int, 0, len(groups))
	for kg := range groups {
		kgs = append(kgs, kg)
	}
	slices.Sort(kgs)
	var mins []minSlot
	var hours []hourSlot
	for _, kg := range kgs {
		as := groups[kg]
		slices.SortFunc(as, func(x, y *adState) int { return strings.Compare(x.ad, y.ad) })
		var b []byte
		// Minutes first, then hours; each by ad, then start.
		for _, a := range as {
			mins = append(mins[:0], a.mins...)
			slices.SortFunc(mins, func(x, y minSlot) int { return cmp.Compare(x.start, y.start) })
			for _, ms := range mins {
				b = appendEntry(b, 'm', a.ad, ms.start, ms.acc)
			}
		}
		for _, a := range as {
			hours = append(hours[:0], a.hours...)
			slices.SortFunc(hours, func(x, y hourSlot) int { return cmp.Compare(x.start, y.start) })
			for _, h := range hours {
				b = appendEntry(b, 'h', a.ad, h.start, h.closed)
				b = binary.AppendVarint(b, h.open.count)
				b = binary.AppendVarint(b, h.open.spend)
				b = binary.AppendVarint(b, int64(h.nOpen))
			}
		}
		for _, a := range as {
			ds := slices.Sorted(slices.Values(a.drained))
			for _, s := range ds {
				b = appendEntry(b, 'd', a.ad, s, acc{})
			}
		}
		if err := fn(kg, b); err != nil {
			return err
		}
	}
	return nil
}

func appendEntry(b []byte, kind byte, ad string, start int64, a acc) []byte {
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(ad)))
	b = append(b, ad...)
	b = binary.AppendVarint(b, start)
	b = binary.AppendVarint(b, a.count)
	return binary.AppendVarint(b, a.spend)
}

var errCorrupt = errors.New("windowing: corrupt snapshot")

// Restore adds the state of one key group, as produced by Snapshot. An
// entry that repeats one already held replaces it.
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
			a := m.adState(ad)
			i := a.minute(start)
			if i < 0 {
				i = m.openMinute(a, start)
			}
			a.mins[i].acc = acc{count: c, spend: s}
		case 'd':
			if r.err != nil {
				return errCorrupt
			}
			a := m.adState(ad)
			if !slices.Contains(a.drained, start) {
				a.drained = append(a.drained, start)
				m.noteDrained(start)
			}
		case 'h':
			oc, os, no := r.varint(), r.varint(), r.varint()
			if r.err != nil {
				return errCorrupt
			}
			a := m.adState(ad)
			h := &a.hours[m.hour(a, start)]
			h.closed, h.open, h.nOpen = acc{c, s}, acc{oc, os}, int(no)
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
	q := t / eventtime.HourMs
	if t%eventtime.HourMs != 0 && t < 0 {
		q--
	}
	return q * eventtime.HourMs
}

// HourStart returns the start of the hour holding t (Unix ms).
func HourStart(t int64) int64 { return hourStart(t) }

// HourRows emits the roll-up row of every hour the operator holds that has
// closed minutes (a rewrite of the rows from state, after the blue/green
// sweep removed another generation's values), by ad and then hour.
func (m *Minutes) HourRows(emit func(Row)) {
	var rows []Row
	for _, a := range m.ads {
		for _, h := range a.hours {
			if h.closed.count > 0 {
				rows = append(rows, Row{Ad: a.ad, StartMs: h.start, Hour: true, Valid: h.closed.count, SpendMicros: h.closed.spend,
					RunValid: h.closed.count + h.open.count, RunSpend: h.closed.spend + h.open.spend})
			}
		}
	}
	slices.SortFunc(rows, func(x, y Row) int {
		if c := strings.Compare(x.Ad, y.Ad); c != 0 {
			return c
		}
		return cmp.Compare(x.StartMs, y.StartMs)
	})
	for _, r := range rows {
		emit(r)
	}
}
