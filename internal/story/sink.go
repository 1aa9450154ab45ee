package story

import (
	"cmp"
	"slices"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
)

// dedupKey is a click, (ad, click id), in the key group of its click id.
type dedupKey struct {
	kg     int
	ad, id string
}

// snapDedup is the pre-aggregator's dedup store for the harness: the real
// preagg.MemDedup, plus a shadow copy of its ids that a checkpoint can copy
// (MemDedup keeps its map private). Both see every Insert and Expire.
type snapDedup struct {
	mem    *preagg.MemDedup
	shadow map[dedupKey]int64
}

var _ preagg.Dedup = (*snapDedup)(nil)

func newSnapDedup() *snapDedup {
	return &snapDedup{mem: preagg.NewMemDedup(), shadow: make(map[dedupKey]int64)}
}

func (d *snapDedup) Insert(kg int, ad, id string, expiryMs int64) (bool, error) {
	ok, err := d.mem.Insert(kg, ad, id, expiryMs)
	if err != nil {
		return false, err
	}
	if ok {
		d.shadow[dedupKey{kg, ad, id}] = expiryMs
	}
	return ok, nil
}

func (d *snapDedup) Expire(kgFrom, kgTo int, beforeMs int64) error {
	if err := d.mem.Expire(kgFrom, kgTo, beforeMs); err != nil {
		return err
	}
	for k, exp := range d.shadow {
		if k.kg >= kgFrom && k.kg < kgTo && exp < beforeMs {
			delete(d.shadow, k)
		}
	}
	return nil
}

// load puts a restored click into both copies.
func (d *snapDedup) load(kg int, ad, id string, expiryMs int64) error {
	_, err := d.Insert(kg, ad, id, expiryMs)
	return err
}

// Value is one writer's attributes of a row: its count, spend and tag.
type Value struct {
	Valid, SpendMicros, Epoch int64
}

// Key is a row or total key: an ad and the start of its window or hour.
type Key struct {
	Ad      string
	StartMs int64
	Hour    bool
}

// Sink models the row store and the running-total store as a reader would
// see them: minute rows (fast_*) written with the closed-row condition, hour
// rows with the fast_* roll-up and the late_* total as separate writers'
// attributes, and running totals. Restore flushes it with the full flush's
// own rule (flush.Decide).
type Sink struct {
	minutes  map[Key]Value
	hourFast map[Key]Value
	late     map[Key]Value
	totals   map[Key]Value
	refused  int
}

func newSink() *Sink {
	return &Sink{minutes: map[Key]Value{}, hourFast: map[Key]Value{}, late: map[Key]Value{}, totals: map[Key]Value{}}
}

// put applies a tagged write as the row store does (ro is the row it
// writes): a closed minute with the closed-row condition, refused (false)
// when the row carries a tag below the restored checkpoint; an hour's fast
// roll-up or a late total as that writer's attributes.
func (k *Sink) put(p sink.Put, ro RowOut) bool {
	key := Key{ro.Ad, ro.StartMs, ro.Hour}
	v := Value{p.Valid, p.SpendMicros, p.Epoch}
	switch {
	case p.Writer == sink.Late:
		k.late[key] = v
	case p.ClosedRow:
		if old, ok := k.minutes[key]; ok && old.Epoch < p.RestoredCkpt {
			k.refused++
			return false
		}
		k.minutes[key] = v
	default:
		k.hourFast[key] = v
	}
	return true
}

func (k *Sink) setTotal(r RowOut) {
	k.totals[Key{r.Ad, r.StartMs, r.Hour}] = Value{r.Valid, r.SpendMicros, r.Epoch}
}

// flush is the full flush after restoring checkpoint c. The rows are
// decided by flush.Decide, the rule the runtime's full flush applies (one
// rule, one place): minute rows tagged ≥ c are deleted; an hour's fast_*
// roll-up and late_* total tagged ≥ c are rewritten from restored state
// (tag c), or removed where state holds none. Running totals are rewritten
// from restored state and those tagged ≥ c that state lacks are removed.
func (k *Sink) flush(c int64, st flush.State, totals func(func(RowOut))) {
	type decision struct {
		key Key
		act flush.Action
	}
	var ds []decision
	for key, it := range k.items() {
		for _, w := range sink.TaggedWriters {
			if it.Attrs(w).Present {
				ds = append(ds, decision{key, flush.Decide(it, w, c, st)})
			}
		}
	}
	for _, d := range ds {
		k.apply(d.key, d.act)
	}
	state := map[Key]Value{}
	totals(func(r RowOut) { state[Key{r.Ad, r.StartMs, r.Hour}] = Value{r.Valid, r.SpendMicros, c} })
	for key, v := range k.totals {
		if _, ok := state[key]; !ok && v.Epoch >= c {
			delete(k.totals, key)
		}
	}
	for key, v := range state {
		k.totals[key] = v
	}
}

// items returns the rows as the row store holds them: a minute item with
// fast_*, an hour item with its fast_* roll-up and late_* total.
func (k *Sink) items() map[Key]sink.Item {
	out := map[Key]sink.Item{}
	tagged := func(v Value) sink.Tagged {
		return sink.Tagged{Present: true, Valid: v.Valid, SpendMicros: v.SpendMicros, Ckpt: v.Epoch}
	}
	item := func(key Key) sink.Item {
		if it, ok := out[key]; ok {
			return it
		}
		b := sink.MinuteBucket(key.StartMs)
		if key.Hour {
			b = sink.HourBucket(key.StartMs)
		}
		return sink.Item{Key: sink.Key{Entity: key.Ad, Bucket: b}}
	}
	for key, v := range k.minutes {
		it := item(key)
		it.Fast = tagged(v)
		out[key] = it
	}
	for key, v := range k.hourFast {
		it := item(key)
		it.Fast = tagged(v)
		out[key] = it
	}
	for key, v := range k.late {
		it := item(key)
		it.Late = tagged(v)
		out[key] = it
	}
	return out
}

// apply carries out one flush decision on the row at key.
func (k *Sink) apply(key Key, act flush.Action) {
	m := k.late
	if act.Writer == sink.Fast {
		m = k.minutes
		if key.Hour {
			m = k.hourFast
		}
	}
	switch act.Kind {
	case flush.DeleteItem, flush.RemoveAttrs:
		delete(m, key)
	case flush.RewriteFast, flush.RewriteLate:
		m[key] = Value{act.Valid, act.SpendMicros, act.Epoch}
	}
}

// restoredState answers flush.Decide from the restored window and late
// state.
type restoredState struct {
	late, hour func(ad string, hourMs int64) (int64, int64, bool)
}

func (r restoredState) LateTotal(ad string, hourMs int64) (int64, int64, bool) {
	return r.late(ad, hourMs)
}
func (r restoredState) HourFast(ad string, hourMs int64) (int64, int64, bool) {
	return r.hour(ad, hourMs)
}

// Refused returns the number of minute-row writes the closed-row condition
// refused.
func (k *Sink) Refused() int { return k.refused }

// Minute returns the minute row of (ad, startMs).
func (k *Sink) Minute(ad string, startMs int64) (Value, bool) {
	v, ok := k.minutes[Key{ad, startMs, false}]
	return v, ok
}

// HourFast returns the fast_* attributes of the hour row of (ad, hourMs).
func (k *Sink) HourFast(ad string, hourMs int64) (Value, bool) {
	v, ok := k.hourFast[Key{ad, hourMs, true}]
	return v, ok
}

// Late returns the late_* attributes of the hour row of (ad, hourMs).
func (k *Sink) Late(ad string, hourMs int64) (Value, bool) {
	v, ok := k.late[Key{ad, hourMs, true}]
	return v, ok
}

// Total returns a running total.
func (k *Sink) Total(key Key) (Value, bool) {
	v, ok := k.totals[key]
	return v, ok
}

// Minutes returns every minute row, sorted by ad then start.
func (k *Sink) Minutes() []Key { return sortedKeys(k.minutes) }

// HourRows returns the keys of every hour row that has fast_* or late_*
// attributes, sorted.
func (k *Sink) HourRows() []Key {
	m := map[Key]Value{}
	for key, v := range k.hourFast {
		m[key] = v
	}
	for key, v := range k.late {
		m[key] = v
	}
	return sortedKeys(m)
}

// Totals returns the keys of every running total, sorted.
func (k *Sink) Totals() []Key { return sortedKeys(k.totals) }

func sortedKeys(m map[Key]Value) []Key {
	out := make([]Key, 0, len(m))
	for key := range m {
		out = append(out, key)
	}
	slices.SortFunc(out, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Ad, b.Ad), cmp.Compare(a.StartMs, b.StartMs), boolCmp(a.Hour, b.Hour))
	})
	return out
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
