package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// KeyGroups is the number of dedup key groups (0..KeyGroups-1). It equals the
// job's max parallelism (windowing.MaxParallelism) and is part of the state
// format.
const KeyGroups = 128

// BucketMs is the width of a dedup expiry bucket: one minute.
const BucketMs = 60_000

// partitionShift sets the buckets of one filter partition: 1<<5 = 32
// one-minute buckets. An Insert tests one filter block per live partition
// of its key group (four or five for a 2 h horizon); a partition's filter
// is dropped when none of its buckets holds ids any more, so a filter keeps
// expired ids up to a partition longer than the DB does (they only cost
// memory and lookups). 64-bucket partitions test one block fewer but hold
// more expired ids and, with more buckets to tell apart, send about twice
// as many new ids to a Get in vain (BenchmarkDedupFilterPath).
const (
	partitionShift   = 5
	partitionBuckets = 1 << partitionShift
)

// Dedup is one subtask's handle on the dedup sets of its key groups. It is
// not safe for concurrent use; several Dedups on one DB may be used
// concurrently as long as they use disjoint key groups.
//
// A click id's identity is (key group, id): the expiry it is inserted with
// is bookkeeping only, so a copy is a duplicate whatever expiry each copy
// carries. The DB holds each id once, under the bucket of the latest expiry
// any of its copies carried (a later copy with a later expiry moves it), so
// that Expire never forgets an id before the latest of them. (preagg's
// MemDedup keeps the first copy's expiry instead; both only ever keep ids
// longer than the first copy needs.)
type Dedup struct {
	db      *DB
	pending pendingSet
	seed    maphash.Seed
	kgs     [KeyGroups]keyGroup
	key     []byte // reused by lookups

	// budget bounds filterBytes, the memory of the filters (0: no bound);
	// see SetFilterBudget.
	budget, filterBytes int

	inserted, duplicates int64
	vain, gets, folds    int64
	touched              uint32 // sink of Prefetch's reads, so they are not optimised away
}

// keyGroup is a Dedup's in-memory view of one key group.
type keyGroup struct {
	// parts holds a Bloom filter per live partition of buckets, in
	// increasing partition order, of every id present in the DB or pending
	// (and maybe of a few that were discarded or expired since): a new id
	// (the common case) is answered without reading Pebble. Loaded from the
	// DB on first use.
	parts []*partition
	// probes holds the blocks of every stage of every partition's filter:
	// what an Insert of a new id tests and Prefetch reads, without going
	// through the partitions.
	probes [][][16]uint32
	loaded bool
	// maxCount is the most ids a filter of this key group has held, to
	// size new ones.
	maxCount int
	// expiredTo is the bucket below which every bucket is known to be
	// deleted (valid when expiredKnown), so Expire only deletes what is new.
	expiredTo    int64
	expiredKnown bool
}

// partition is the filter of buckets [index<<partitionShift,
// (index+1)<<partitionShift) of one key group. Each id is added with its
// bucket's offset in the partition as the tag, so a filter hit also tells
// which buckets to look in.
type partition struct {
	index int64
	// present has bit i set if bucket index<<partitionShift + i may hold
	// ids (pending or in the DB). Expire clears the bits of expired buckets.
	present uint64
	f       *blockBloom
	// foldedAt is the number of ids the filter held when it was last
	// folded to stay within the budget (0: never). A folded filter takes
	// more ids than it was sized for (more false positives) and is rebuilt
	// larger only once it holds twice as many: a partition that still
	// receives most new ids (the newest) keeps growing, at the price of
	// folding others, while one that receives a stray id now and then is
	// not read back from the DB for each.
	foldedAt int
}

// NewDedup returns a Dedup on db with an empty pending batch.
func (db *DB) NewDedup() *Dedup {
	return &Dedup{db: db, seed: maphash.MakeSeed()}
}

// minFilterCapacity is the smallest filter, in ids.
const minFilterCapacity = 256

// SetFilterBudget bounds the memory of the Dedup's filters to about bytes
// (0 or less: no bound). Past the budget, filters are folded in half —
// the densest first (most bits per id), the oldest among equals: memory
// stays within the budget whatever the number of live ids, and the price
// is more false positives, each a few point lookups in Pebble
// (Stats.VainLookups, Stats.Gets). A filter
// folds down to at most 15 blocks of 64 bytes, so the bound holds once
// the budget exceeds about 1 KiB per live partition (key groups × 5 for a
// 2 h horizon).
func (d *Dedup) SetFilterBudget(bytes int) {
	d.budget = max(bytes, 0)
	d.enforceBudget(nil)
}

// partitionFor returns the partition of bucket in key group kg, creating it
// (with a filter sized for 1.5 times the largest filter kg has had, or at
// least want ids) if needed.
func (d *Dedup) partitionFor(kg int, bucket int64, want int) *partition {
	g := &d.kgs[kg]
	idx := bucket >> partitionShift
	i := len(g.parts)
	for i > 0 && g.parts[i-1].index >= idx {
		if g.parts[i-1].index == idx {
			return g.parts[i-1]
		}
		i--
	}
	m := g.maxCount
	p := &partition{index: idx, f: newBlockBloom(max(want, m+m/2, minFilterCapacity))}
	g.parts = slices.Insert(g.parts, i, p)
	g.reindex()
	d.filterBytes += p.f.sizeBytes()
	d.enforceBudget(p)
	return p
}

// enforceBudget folds filters until their memory fits the budget: each
// time the densest foldable filter (most bits per id, see
// blockBloom.density), the oldest partition among equals, and grown (the
// filter just created or rebuilt) only if it is denser than every other.
// Folding spreads the budget evenly over the ids: each new id is tested
// against every live partition of its key group, so the sum of their
// false-positive rates is what costs, and that sum is least when every
// filter has the same bits per id.
func (d *Dedup) enforceBudget(grown *partition) {
	for d.budget > 0 && d.filterBytes > d.budget {
		vkg, victim, best := -1, (*partition)(nil), 0.0
		for kg := range d.kgs {
			for _, p := range d.kgs[kg].parts {
				if !p.f.foldable() {
					continue
				}
				// Densities within 1% count as equal. Room a filter has not
				// filled yet counts as density, so the room of a partition
				// still filling is given back first (it costs no false
				// positive until filled) and the partition is rebuilt
				// larger again once it holds twice the ids (see foldedAt).
				dens := p.f.density()
				switch same := victim != nil && dens <= best*1.01 && dens >= best/1.01; {
				case victim == nil, !same && dens > best,
					same && victim == grown && p != grown,
					same && p != grown && p.index < victim.index:
					vkg, victim, best = kg, p, dens
				}
			}
		}
		if victim == nil {
			return // every filter is as small as it gets
		}
		before := victim.f.sizeBytes()
		victim.f.fold()
		victim.foldedAt = victim.f.count()
		d.filterBytes -= before - victim.f.sizeBytes()
		d.folds++
		d.kgs[vkg].reindex()
	}
}

// reindex rebuilds g.probes from g.parts.
func (g *keyGroup) reindex() {
	g.probes = g.probes[:0]
	for _, p := range g.parts {
		g.probes = append(g.probes, p.f.blocks)
	}
}

// remember adds id (hash h) in bucket to kg's filters. A full filter is
// first rebuilt larger from the DB and the pending batch: a filter is one
// Bloom filter, so that an Insert tests one block per partition, and the
// keys hold what it is rebuilt from.
func (d *Dedup) remember(kg int, bucket int64, h uint64) error {
	g := &d.kgs[kg]
	p := d.partitionFor(kg, bucket, 0)
	if p.f.full() && p.f.count() >= 2*p.foldedAt {
		if err := d.regrow(kg, p); err != nil {
			return err
		}
	}
	j := uint32(bucket & (partitionBuckets - 1))
	p.f.add(h, j)
	p.present |= 1 << j
	g.maxCount = max(g.maxCount, p.f.count())
	if g.expiredKnown && bucket < g.expiredTo {
		// An id already expired by the time it arrives: make sure the next
		// Expire covers its bucket again.
		g.expiredTo = bucket
	}
	return nil
}

// regrow replaces the filter of partition p of key group kg by one four
// times as large, built from the keys of its buckets in the DB and in the
// pending batch (so it leaves out the ids it held that were discarded or
// expired since). Each id is read again about a third of a time over the
// growth of its partition; a partition sized from its key group's earlier
// ones (partitionFor) rarely grows.
func (d *Dedup) regrow(kg int, p *partition) error {
	lo := p.index << partitionShift
	hi := lo + partitionBuckets
	f := newBlockBloom(4 * p.f.cap)
	p.present = 0
	add := func(bucket int64, id []byte) {
		j := uint32(bucket & (partitionBuckets - 1))
		f.add(maphash.Bytes(d.seed, id), j)
		p.present |= 1 << j
	}
	for i := range d.pending.ents {
		if e := &d.pending.ents[i]; !e.del && int(e.kg) == kg && e.bucket >= lo && e.bucket < hi {
			add(e.bucket, d.pending.arena[e.off+keyIDOff:e.off+e.n])
		}
	}
	err := d.withGate(func() error {
		iter, err := d.db.db.NewIter(&pebble.IterOptions{
			LowerBound: appendDedupKey(nil, kg, lo),
			UpperBound: appendDedupKey(nil, kg, hi),
		})
		if err != nil {
			return err
		}
		for valid := iter.First(); valid; valid = iter.Next() {
			k := iter.Key()
			if len(k) <= keyIDOff {
				return errors.Join(fmt.Errorf("corrupt key %x", k), iter.Close())
			}
			add(int64(binary.BigEndian.Uint64(k[2:keyIDOff])^(1<<63)), k[keyIDOff:])
		}
		return iter.Close()
	})
	if err != nil {
		return fmt.Errorf("state: dedup filter key group %d: %w", kg, err)
	}
	d.filterBytes += f.sizeBytes() - p.f.sizeBytes()
	p.f = f
	d.kgs[kg].reindex()
	d.enforceBudget(p)
	return nil
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
	type ent struct {
		h      uint64
		bucket int64
	}
	byPart := map[int64][]ent{}
	for valid := iter.First(); valid; valid = iter.Next() {
		k := iter.Key()
		if len(k) <= keyIDOff {
			return errors.Join(fmt.Errorf("state: dedup load key group %d: corrupt key %x", kg, k), iter.Close())
		}
		bucket := int64(binary.BigEndian.Uint64(k[2:keyIDOff]) ^ (1 << 63))
		idx := bucket >> partitionShift
		byPart[idx] = append(byPart[idx], ent{maphash.Bytes(d.seed, k[keyIDOff:]), bucket})
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("state: dedup load key group %d: %w", kg, err)
	}
	g := &d.kgs[kg]
	for idx, es := range byPart {
		d.partitionFor(kg, idx<<partitionShift, len(es)+len(es)/2)
		for _, e := range es {
			if err := d.remember(kg, e.bucket, e.h); err != nil { // sized to fit: no regrow
				return err
			}
		}
	}
	g.loaded = true
	return nil
}

func bucketOf(ms int64) int64 {
	b := ms / BucketMs
	if ms%BucketMs < 0 {
		b--
	}
	return b
}

// appendDedupKey appends the dedup key prefix of (kg, bucket) to dst; the
// click id follows it.
func appendDedupKey(dst []byte, kg int, bucket int64) []byte {
	dst = append(dst, prefixDedup, byte(kg))
	return binary.BigEndian.AppendUint64(dst, uint64(bucket)^(1<<63))
}

// Insert records click id in key group kg (0..KeyGroups-1) with expiry
// expiryMs (Unix ms, impression + the acceptance horizon). It returns false
// if id is already present in kg, committed or pending in this Dedup,
// whatever expiry it was inserted with; if expiryMs lies in a later bucket
// than the one id is kept under, id is moved there, so that it is kept
// until the latest expiry of its copies. The insert (or move) is pending
// until Commit (or an automatic commit when the batch grows past
// Options.DedupBatchBytes).
func (d *Dedup) Insert(kg int, id string, expiryMs int64) (inserted bool, err error) {
	if kg < 0 || kg >= KeyGroups {
		return false, fmt.Errorf("state: dedup insert: key group %d out of range", kg)
	}
	if id == "" {
		return false, errors.New("state: dedup insert: empty id")
	}
	// The common case (a new id, answered by the filters) touches only this
	// Dedup's memory: no gate, whose mutex the subtasks would share. What
	// reads or writes Pebble enters the gate.
	if d.db.gate.IsClosed() {
		return false, ErrClosed
	}
	g := &d.kgs[kg]
	if !g.loaded {
		if err := d.withGate(func() error { return d.load(kg) }); err != nil {
			return false, err
		}
	}
	bucket := bucketOf(expiryMs)
	h := maphash.String(d.seed, id)
	ph := pendingHash(h, kg)
	for _, blocks := range g.probes {
		if blocksMayContain(blocks, h) {
			dup, err := d.lookup(kg, id, h, ph, bucket)
			if err != nil || dup {
				return false, err
			}
			break
		}
	}
	// remember first: it may rebuild the filter from the pending batch,
	// which must not hold the id yet (it would be added twice).
	if err := d.remember(kg, bucket, h); err != nil {
		return false, err
	}
	d.pending.add(kg, bucket, id, ph, false)
	d.inserted++
	return true, d.commitIfFull()
}

// lookup is Insert's slow path, after a filter hit: it reports whether id
// (hash h, pending hash ph) is pending or in the DB, and if it is, moves it
// to bucket when that is later than the bucket it is kept under.
func (d *Dedup) lookup(kg int, id string, h, ph uint64, bucket int64) (dup bool, err error) {
	p := &d.pending
	if i := p.find(kg, id, ph); i >= 0 {
		d.duplicates++
		if bucket > p.ents[i].bucket {
			p.setBucket(i, bucket)
			return true, d.remember(kg, bucket, h)
		}
		return true, nil
	}
	// The buckets that may hold id, latest first: the first found is the
	// one it is kept under (there is only one, but the latest is the right
	// one to keep if there were several).
	var buf [4 * partitionBuckets]int64
	cands := buf[:0]
	g := &d.kgs[kg]
	for i := len(g.parts) - 1; i >= 0; i-- {
		pt := g.parts[i]
		if !pt.f.mayContain(h) {
			continue
		}
		for m := pt.present; m != 0; {
			j := uint32(63 - bits.LeadingZeros64(m))
			m &^= 1 << j
			if pt.f.mayContainTag(h, j) {
				cands = append(cands, pt.index<<partitionShift+int64(j))
			}
		}
	}
	if len(cands) == 0 {
		d.vain++
		return false, nil
	}
	found, at, err := d.findCommitted(kg, id, cands)
	if err != nil || !found {
		if err == nil {
			d.vain++
		}
		return false, err
	}
	d.duplicates++
	if bucket > at {
		// Rare: a copy with a later expiry than the kept one. Move the id:
		// delete the old key and set the new one in the same batch.
		p.add(kg, at, id, 0, true)
		p.add(kg, bucket, id, ph, false)
		if err := d.remember(kg, bucket, h); err != nil {
			return true, err
		}
		return true, d.commitIfFull()
	}
	return true, nil
}

// findCommitted looks id up in the DB in each of buckets (in order) and
// returns the first bucket that holds it.
func (d *Dedup) findCommitted(kg int, id string, buckets []int64) (found bool, at int64, err error) {
	if err := d.db.enter(); err != nil {
		return false, 0, err
	}
	defer d.db.gate.Leave()
	for _, b := range buckets {
		d.gets++
		d.key = append(appendDedupKey(d.key[:0], kg, b), id...)
		_, closer, err := d.db.db.Get(d.key)
		switch {
		case err == nil:
			_ = closer.Close()
			return true, b, nil
		case !errors.Is(err, pebble.ErrNotFound):
			return false, 0, fmt.Errorf("state: dedup lookup: %w", err)
		}
	}
	return false, 0, nil
}

// commitIfFull commits the pending batch once it passes
// Options.DedupBatchBytes.
func (d *Dedup) commitIfFull() error {
	if d.pending.sizeBytes() >= d.db.opts.DedupBatchBytes {
		return d.Commit()
	}
	return nil
}

// withGate runs fn inside the DB's gate.
func (d *Dedup) withGate(fn func() error) error {
	if err := d.db.enter(); err != nil {
		return err
	}
	defer d.db.gate.Leave()
	return fn()
}

// Prefetch reads the filter blocks that an Insert of id in key group kg
// would test (one per live partition of kg; expiryMs does not choose them),
// and changes nothing. The filters of a busy subtask are far larger than
// the processor's caches, so each Insert of a new id waits on cache misses;
// calling Prefetch for a batch of ids before inserting them lets those
// misses overlap instead.
func (d *Dedup) Prefetch(kg int, id string, expiryMs int64) {
	if kg < 0 || kg >= KeyGroups || len(d.kgs[kg].probes) == 0 {
		return
	}
	h := maphash.String(d.seed, id)
	for _, blocks := range d.kgs[kg].probes {
		hi, _ := bits.Mul64(h, uint64(len(blocks)))
		d.touched += blocks[hi][0]
	}
}

// Expire removes every id of key groups [kgFrom, kgTo) whose expiry bucket
// (of the latest expiry of its copies) ends at or before beforeMs (Unix ms,
// the watermark): one range deletion per key group, covering only buckets
// not already expired by this Dedup. Pending inserts are committed with it.
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
		g := &d.kgs[kg]
		start := int64(math.MinInt64)
		if g.expiredKnown {
			start = g.expiredTo
		}
		if end <= start {
			continue
		}
		if err := b.DeleteRange(appendDedupKey(nil, kg, start), appendDedupKey(nil, kg, end), nil); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
		g.expiredTo, g.expiredKnown = end, true
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
	}
	// Every bucket below end is now empty (those below expiredTo were
	// already): clear them from the partitions, and drop the partitions left
	// with none.
	for kg := kgFrom; kg < kgTo; kg++ {
		g := &d.kgs[kg]
		g.parts = slices.DeleteFunc(g.parts, func(p *partition) bool {
			switch lo := p.index << partitionShift; {
			case lo+partitionBuckets <= end:
				p.present = 0
			case lo < end:
				p.present &^= 1<<(end-lo) - 1
			}
			if p.present == 0 {
				d.filterBytes -= p.f.sizeBytes()
				return true
			}
			return false
		})
		g.reindex()
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
	// Apply the pending keys in key order: the memtable's skiplist inserts
	// sorted keys several times faster than random ones, because each insert
	// starts from the previous one's position. The keys are distinct (a
	// moved id deletes one bucket's key and sets another's), so the order
	// has no other effect.
	b := d.db.db.NewBatchWithSize(p.sizeBytes() + 64)
	defer b.Close()
	for _, o := range p.sorted() {
		e := &p.ents[o.i]
		var err error
		if e.del {
			err = b.Delete(p.key(e), nil)
		} else {
			err = b.Set(p.key(e), nil, nil)
		}
		if err != nil {
			return fmt.Errorf("state: dedup commit: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: dedup commit: %w", err)
	}
	return nil
}

// Discard drops the pending inserts and expiries without applying them. (The
// in-memory filters may keep the dropped ids: that costs only a lookup.)
func (d *Dedup) Discard() {
	d.pending.reset()
	for kg := range d.kgs {
		d.kgs[kg].expiredKnown = false
	}
}

// FilterBytes returns the memory held by the Dedup's in-memory filters:
// about 3 bytes per id they hold, 4–6 bytes per live id with the expired
// ids of partitions not yet dropped and room to grow; at most about the
// budget (SetFilterBudget).
func (d *Dedup) FilterBytes() int { return d.filterBytes }

// DedupStats are a Dedup's counters since it was created.
type DedupStats struct {
	Inserted, Duplicates int64
	// VainLookups counts Inserts of new ids that a filter could not answer
	// (a false positive) and Gets the point lookups in Pebble made by
	// Inserts, in vain or not.
	VainLookups, Gets int64
	// Folds counts filters halved to keep within the budget.
	Folds int64
	// FilterBytes is the filters' memory now.
	FilterBytes int
}

// Stats returns the Dedup's counters.
func (d *Dedup) Stats() DedupStats {
	return DedupStats{
		Inserted: d.inserted, Duplicates: d.duplicates,
		VainLookups: d.vain, Gets: d.gets, Folds: d.folds, FilterBytes: d.filterBytes,
	}
}

// Count returns how many ids this Dedup inserted and how many Inserts it
// found to be duplicates since it was created.
func (d *Dedup) Count() (inserted, duplicates int64) {
	return d.inserted, d.duplicates
}
