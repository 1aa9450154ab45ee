package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// KeyGroups is the number of dedup key groups (0..KeyGroups-1). It equals the
// job's max parallelism (windowing.MaxParallelism) and is part of the state
// format.
const KeyGroups = 128

// BucketMs is the width of a dedup expiry bucket: one minute.
const BucketMs = 60_000

// Dedup is one subtask's handle on the dedup sets of its key groups. It is
// not safe for concurrent use; several Dedups on one DB may be used
// concurrently as long as they use disjoint key groups.
type Dedup struct {
	db      *DB
	pending pendingSet

	// expiredTo[kg] is the bucket below which every bucket of kg is known to
	// be deleted (valid when expiredKnown[kg]), so Expire only deletes what
	// is new.
	expiredTo    [KeyGroups]int64
	expiredKnown [KeyGroups]bool

	// filters holds, per (key group, bucket), a Bloom filter of every id
	// present in the DB or pending: a new id (the common case) is answered
	// without reading Pebble. A key group is loaded from the DB on first use.
	seed     maphash.Seed
	loaded   [KeyGroups]bool
	filters  map[filterKey]*filter
	maxCount [KeyGroups]int // the most ids a filter of each key group has held, to size new ones
	// recent caches filters by (kg, bucket mod ringSize) in front of the
	// map: a slice index instead of a map lookup on the hot path.
	recent [KeyGroups]*[ringSize]ringSlot

	inserted, duplicates int64
	touched              uint32 // sink of Prefetch's reads, so they are not optimised away
}

const ringSize = 256 // minutes; covers the 2 h horizon with room

type ringSlot struct {
	bucket int64
	f      *filter
}

// lookupFilter returns the filter of (kg, bucket), or nil.
func (d *Dedup) lookupFilter(kg int, bucket int64) *filter {
	r := d.recent[kg]
	if r == nil {
		r = new([ringSize]ringSlot)
		d.recent[kg] = r
	}
	slot := &r[uint64(bucket)%ringSize]
	if slot.f != nil && slot.bucket == bucket {
		return slot.f
	}
	f := d.filters[filterKey{kg, bucket}]
	if f != nil {
		*slot = ringSlot{bucket, f}
	}
	return f
}

type filterKey struct {
	kg     int
	bucket int64
}

// NewDedup returns a Dedup on db with an empty pending batch.
func (db *DB) NewDedup() *Dedup {
	return &Dedup{db: db, seed: maphash.MakeSeed(), filters: map[filterKey]*filter{}}
}

// minFilterCapacity is the smallest filter, in ids.
const minFilterCapacity = 256

// newFilter returns a filter for key group kg sized for at least want ids
// and for 1.5 times the largest filter kg has had (buckets of one key group
// hold similar numbers of ids; sizing per key group keeps a hot key group
// from inflating the others).
func (d *Dedup) newFilter(kg, want int) *filter {
	m := d.maxCount[kg]
	return newFilter(max(want, m+m/2, minFilterCapacity))
}

// load builds the filters of key group kg from the committed DB. It runs on
// the Dedup's first use of kg (after a restore: once per key group, reading
// every id of kg once).
func (d *Dedup) load(kg int) error {
	lower := []byte{prefixDedup, byte(kg)}
	iter, err := d.db.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("state: dedup load key group %d: %w", kg, err)
	}
	hashes := map[int64][]uint64{}
	for valid := iter.First(); valid; valid = iter.Next() {
		k := iter.Key()
		if len(k) < 10 {
			return errors.Join(fmt.Errorf("state: dedup load key group %d: corrupt key %x", kg, k), iter.Close())
		}
		bucket := int64(binary.BigEndian.Uint64(k[2:10]) ^ (1 << 63))
		hashes[bucket] = append(hashes[bucket], maphash.Bytes(d.seed, k[10:]))
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("state: dedup load key group %d: %w", kg, err)
	}
	for bucket, hs := range hashes {
		fk := filterKey{kg, bucket}
		f := d.filters[fk]
		if f == nil {
			f = newFilter(max(len(hs)+len(hs)/4, minFilterCapacity))
			d.filters[fk] = f
		}
		for _, h := range hs {
			f.add(h)
		}
		d.maxCount[kg] = max(d.maxCount[kg], f.count())
	}
	d.loaded[kg] = true
	return nil
}

func bucketOf(ms int64) int64 {
	b := ms / BucketMs
	if ms%BucketMs < 0 {
		b--
	}
	return b
}

func (d *Dedup) appendKey(dst []byte, kg int, bucket int64) []byte {
	dst = append(dst, prefixDedup, byte(kg))
	return binary.BigEndian.AppendUint64(dst, uint64(bucket)^(1<<63))
}

// Insert records click id in key group kg (0..KeyGroups-1) with expiry
// expiryMs (Unix ms, impression + the acceptance horizon). It returns false
// if the same (kg, expiry bucket, id) is already present, committed or
// pending in this Dedup. The insert is pending until Commit (or an automatic
// commit when the batch grows past Options.DedupBatchBytes).
func (d *Dedup) Insert(kg int, id string, expiryMs int64) (inserted bool, err error) {
	if kg < 0 || kg >= KeyGroups {
		return false, fmt.Errorf("state: dedup insert: key group %d out of range", kg)
	}
	if id == "" {
		return false, errors.New("state: dedup insert: empty id")
	}
	// The common case (a new id, answered by the filter) touches only this
	// Dedup's memory: no gate, whose mutex the subtasks would share. What
	// reads or writes Pebble enters the gate.
	if d.db.gate.IsClosed() {
		return false, ErrClosed
	}
	if !d.loaded[kg] {
		if err := d.withGate(func() error { return d.load(kg) }); err != nil {
			return false, err
		}
	}
	bucket := bucketOf(expiryMs)
	p := &d.pending
	off := len(p.arena)
	p.arena = append(d.appendKey(p.arena, kg, bucket), id...)
	key := p.arena[off:]
	h := maphash.String(d.seed, id)
	ph := pendingHash(h, kg, bucket)
	f := d.lookupFilter(kg, bucket)
	if f != nil && f.mayContain(h) {
		dup, err := d.seen(key, ph)
		if err != nil || dup {
			p.arena = p.arena[:off]
			if dup {
				d.duplicates++
			}
			return false, err
		}
	}
	p.add(off, kg, bucket, id, ph)
	if f == nil {
		f = d.newFilter(kg, 0)
		d.filters[filterKey{kg, bucket}] = f
		d.recent[kg][uint64(bucket)%ringSize] = ringSlot{bucket, f}
	}
	f.add(h)
	if f.n > d.maxCount[kg] {
		d.maxCount[kg] = f.n
	}
	d.inserted++
	if d.expiredKnown[kg] && bucket < d.expiredTo[kg] {
		// An id already expired by the time it arrives: make sure the next
		// Expire covers its bucket again.
		d.expiredTo[kg] = bucket
	}
	if p.sizeBytes() >= d.db.opts.DedupBatchBytes {
		return true, d.Commit()
	}
	return true, nil
}

// withGate runs fn inside the DB's gate.
func (d *Dedup) withGate(fn func() error) error {
	if err := d.db.enter(); err != nil {
		return err
	}
	defer d.db.gate.Leave()
	return fn()
}

// Prefetch reads the filter blocks that an Insert of id would test, and
// changes nothing. The filters of a busy subtask are far larger than the
// processor's caches, so each Insert of a new id waits on a cache miss;
// calling Prefetch for a batch of ids before inserting them lets those misses
// overlap instead.
func (d *Dedup) Prefetch(kg int, id string, expiryMs int64) {
	if kg < 0 || kg >= KeyGroups || d.recent[kg] == nil {
		return
	}
	f := d.lookupFilter(kg, bucketOf(expiryMs))
	if f == nil {
		return
	}
	h := maphash.String(d.seed, id)
	for _, s := range f.stages {
		d.touched += s.block(h)[0]
	}
}

// Expire removes every id of key groups [kgFrom, kgTo) whose expiry bucket
// ends at or before beforeMs (Unix ms, the watermark): one range deletion per
// key group, covering only buckets not already expired by this Dedup. Pending
// inserts are committed with it.
func (d *Dedup) Expire(kgFrom, kgTo int, beforeMs int64) error {
	if kgFrom < 0 || kgTo > KeyGroups || kgFrom > kgTo {
		return fmt.Errorf("state: dedup expire: key groups [%d,%d) out of range", kgFrom, kgTo)
	}
	if err := d.db.enter(); err != nil {
		return err
	}
	defer d.db.gate.Leave()
	end := bucketOf(beforeMs) // buckets b < end end at or before beforeMs
	if err := d.commitLocked(); err != nil {
		return err
	}
	b := d.db.db.NewBatch()
	defer b.Close()
	for kg := kgFrom; kg < kgTo; kg++ {
		start := int64(math.MinInt64)
		if d.expiredKnown[kg] {
			start = d.expiredTo[kg]
		}
		if end <= start {
			continue
		}
		if err := b.DeleteRange(d.appendKey(nil, kg, start), d.appendKey(nil, kg, end), nil); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
		d.expiredTo[kg], d.expiredKnown[kg] = end, true
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
	}
	for fk := range d.filters {
		if fk.kg >= kgFrom && fk.kg < kgTo && fk.bucket < end {
			delete(d.filters, fk)
		}
	}
	for kg := kgFrom; kg < kgTo; kg++ {
		if r := d.recent[kg]; r != nil {
			for i := range r {
				if r[i].f != nil && r[i].bucket < end {
					r[i] = ringSlot{}
				}
			}
		}
	}
	return nil
}

// Commit makes the pending inserts and expiries visible in the DB (and so
// part of the next Checkpoint).
func (d *Dedup) Commit() error {
	if err := d.db.enter(); err != nil {
		return err
	}
	defer d.db.gate.Leave()
	return d.commitLocked()
}

func (d *Dedup) commitLocked() error {
	p := &d.pending
	if p.len() == 0 {
		return nil
	}
	defer p.reset()
	// Apply the pending ids in key order: the memtable's skiplist inserts
	// sorted keys several times faster than random ones, because each insert
	// starts from the previous one's position. The ids are distinct, so the
	// order has no other effect.
	b := d.db.db.NewBatchWithSize(p.sizeBytes() + 64)
	defer b.Close()
	for _, o := range p.sorted() {
		if err := b.Set(p.key(&p.ents[o.i]), nil, nil); err != nil {
			return fmt.Errorf("state: dedup commit: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: dedup commit: %w", err)
	}
	return nil
}

// seen reports whether key (pending hash ph) is pending or committed.
func (d *Dedup) seen(key []byte, ph uint64) (bool, error) {
	if d.pending.contains(key, ph) {
		return true, nil
	}
	if err := d.db.enter(); err != nil {
		return false, err
	}
	defer d.db.gate.Leave()
	_, closer, err := d.db.db.Get(key)
	switch {
	case err == nil:
		_ = closer.Close()
		return true, nil
	case errors.Is(err, pebble.ErrNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("state: dedup lookup: %w", err)
	}
}

// Discard drops the pending inserts and expiries without applying them. (The
// in-memory filters may keep the dropped ids: that costs only a lookup.)
func (d *Dedup) Discard() {
	d.pending.reset()
	d.expiredKnown = [KeyGroups]bool{}
}

// FilterBytes returns the memory held by the Dedup's in-memory filters
// (about 1.5 bytes per live id).
func (d *Dedup) FilterBytes() int {
	n := 0
	for _, f := range d.filters {
		n += f.sizeBytes()
	}
	return n
}

// Count returns how many ids this Dedup inserted and how many Inserts it
// found to be duplicates since it was created.
func (d *Dedup) Count() (inserted, duplicates int64) {
	return d.inserted, d.duplicates
}
