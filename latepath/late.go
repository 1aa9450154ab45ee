package latepath

import (
	"encoding/binary"
	"errors"
	"github.com/adclick/adclick/eventtime"
	"slices"

	"github.com/adclick/adclick/windowing"
)

// Total is the late total of one (ad, hour).
type Total struct {
	Ad          string
	HourMs      int64 // start of the hour, Unix ms
	Valid       int64
	SpendMicros int64
}

type key struct {
	ad   string
	hour int64
}

type acc struct{ count, spend int64 }

// Late holds the late totals of one window subtask. Not safe for
// concurrent use.
type Late struct {
	horizonMs int64
	totals    map[key]*acc
	dirty     map[key]struct{}
	clicks    int64
	// oldest is a lower bound of the hours held (valid when oldestOK): Expire
	// returns at once while it cannot expire anything, so a watermark costs
	// nothing until an hour passes its horizon.
	oldest   int64
	oldestOK bool
}

// New returns an empty Late whose totals are kept until the watermark passes
// hour end + horizonMs (after that the horizon rejects any click of the
// hour, so its late total can no longer change).
func New(horizonMs int64) *Late {
	return &Late{horizonMs: horizonMs, totals: make(map[key]*acc), dirty: make(map[key]struct{})}
}

// Add counts one late click (or a batch of count clicks) of ad at eventMs.
func (l *Late) Add(ad string, eventMs, count, spend int64) {
	k := key{ad, windowing.HourStart(eventMs)}
	a, ok := l.totals[k]
	if !ok {
		a = &acc{}
		l.totals[k] = a
		l.noteHour(k.hour)
	}
	a.count += count
	a.spend += spend
	l.dirty[k] = struct{}{}
	l.clicks += count
}

func (l *Late) noteHour(hour int64) {
	if !l.oldestOK || hour < l.oldest {
		l.oldest, l.oldestOK = hour, true
	}
}

// Clicks returns the number of late clicks added.
func (l *Late) Clicks() int64 { return l.clicks }

// Flush emits every total that changed since the last Flush, ordered by
// (ad, hour), as absolute values.
func (l *Late) Flush(emit func(Total)) {
	if len(l.dirty) == 0 {
		return
	}
	keys := make([]key, 0, len(l.dirty))
	for k := range l.dirty {
		keys = append(keys, k)
	}
	clear(l.dirty)
	slices.SortFunc(keys, cmpKey)
	for _, k := range keys {
		if a, ok := l.totals[k]; ok {
			emit(Total{Ad: k.ad, HourMs: k.hour, Valid: a.count, SpendMicros: a.spend})
		}
	}
}

// Get returns the late total of (ad, hour).
func (l *Late) Get(ad string, hourMs int64) (valid, spend int64, ok bool) {
	a, ok := l.totals[key{ad, hourMs}]
	if !ok {
		return 0, 0, false
	}
	return a.count, a.spend, true
}

// Each calls fn for every total held.
func (l *Late) Each(fn func(Total)) {
	for k, a := range l.totals {
		fn(Total{Ad: k.ad, HourMs: k.hour, Valid: a.count, SpendMicros: a.spend})
	}
}

// Expire forgets totals whose hour can no longer receive late clicks:
// hour end + horizon < wm. Pending (dirty) totals are kept until flushed.
func (l *Late) Expire(wm int64) {
	if !l.oldestOK || l.oldest+eventtime.HourMs+l.horizonMs >= wm {
		return
	}
	l.oldestOK = false
	for k := range l.totals {
		if _, d := l.dirty[k]; !d && k.hour+eventtime.HourMs+l.horizonMs < wm {
			delete(l.totals, k)
			continue
		}
		l.noteHour(k.hour)
	}
}

// Len returns the number of totals held.
func (l *Late) Len() int { return len(l.totals) }

// Snapshot serialises the totals grouped by key group of the ad, in
// key-group order.
func (l *Late) Snapshot(fn func(kg int, data []byte) error) error {
	groups := make(map[int][]key)
	for k := range l.totals {
		kg := windowing.KeyGroup(k.ad)
		groups[kg] = append(groups[kg], k)
	}
	kgs := make([]int, 0, len(groups))
	for kg := range groups {
		kgs = append(kgs, kg)
	}
	slices.Sort(kgs)
	for _, kg := range kgs {
		ks := groups[kg]
		slices.SortFunc(ks, cmpKey)
		var b []byte
		for _, k := range ks {
			a := l.totals[k]
			b = binary.AppendUvarint(b, uint64(len(k.ad)))
			b = append(b, k.ad...)
			b = binary.AppendVarint(b, k.hour)
			b = binary.AppendVarint(b, a.count)
			b = binary.AppendVarint(b, a.spend)
		}
		if err := fn(kg, b); err != nil {
			return err
		}
	}
	return nil
}

var errCorrupt = errors.New("latepath: corrupt snapshot")

// Restore adds the totals of one key group, as produced by Snapshot.
func (l *Late) Restore(data []byte) error {
	for len(data) > 0 {
		n, w := binary.Uvarint(data)
		if w <= 0 || uint64(len(data)-w) < n {
			return errCorrupt
		}
		data = data[w:]
		ad := string(data[:n])
		data = data[n:]
		var vals [3]int64
		for i := range vals {
			v, w := binary.Varint(data)
			if w <= 0 {
				return errCorrupt
			}
			vals[i] = v
			data = data[w:]
		}
		l.totals[key{ad, vals[0]}] = &acc{count: vals[1], spend: vals[2]}
		l.noteHour(vals[0])
	}
	return nil
}

func cmpKey(a, b key) int {
	if a.ad != b.ad {
		if a.ad < b.ad {
			return -1
		}
		return 1
	}
	switch {
	case a.hour < b.hour:
		return -1
	case a.hour > b.hour:
		return 1
	}
	return 0
}

// MarkAllDirty marks every total held as changed, so the next Flush emits
// all of them (a rewrite after the blue/green sweep removed another
// generation's values).
func (l *Late) MarkAllDirty() {
	for k := range l.totals {
		l.dirty[k] = struct{}{}
	}
}
