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

// Dedup is one subtask's handle on the dedup sets of its key groups (the
// key groups of the click ids). It is not safe for concurrent use; several
// Dedups on one DB may be used concurrently as long as they use disjoint
// key groups.
//
// A click's identity is (key group, ad, click id): a copy with the same ad
// is a duplicate, a copy with another ad is another click. The expiry it
// is inserted with is bookkeeping only, so a copy is a duplicate whatever
// expiry each copy carries. The DB holds each (ad, id) once, under the
// bucket of the latest expiry any of its copies carried (a later copy with
// a later expiry moves it), so that Expire never forgets it before the
// latest of them. (preagg's MemDedup keeps the first copy's expiry
// instead; both only ever keep ids longer than the first copy needs.)
//
// Legacy entries, written by the previous version under the click id
// alone, are read and never written: while they last, a copy of their id
// is a duplicate whatever its ad, as it was then. They expire as the
// others do, so they are gone one horizon after the upgrade.
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
	legacyDuplicates     int64
	insertedAtDelete     int64 // inserted at the last batched deletion
	vain, gets, folds    int64
	touched              uint32 // sink of Prefetch's reads, so they are not optimised away
	interimChecked       bool   // refuseInterim passed

	// perKeyGroup and lag are physicalPerKeyGroup and physicalLagBuckets
	// (tests change them).
	perKeyGroup, lag int64
}

// keyGroup is a Dedup's in-memory view of one key group of click ids.
type keyGroup struct {
	// cur holds the filters of the entries (ad, id), by the hash of the
	// pair; legacy those of the legacy entries of the key group, by the hash
	// of the id. Legacy filters are built by load and never added to, so
	// once Expire has dropped them (one horizon after the upgrade) an Insert
	// pays for nothing more than a length test.
	cur, legacy filters
	// keys is set if the key group may hold entry keys, live or expired,
	// and legacyKeys if it may hold legacy keys: Expire deletes only those.
	// Both are cleared once the DB holds no key of theirs.
	keys, legacyKeys bool
	loaded           bool
	// maxCount is the most ids a filter of cur has held, to size new ones.
	maxCount int
	// live is the expiry bound of the key group: every bucket below it is
	// expired, whether or not its keys are deleted yet. It is kept in the
	// DB (boundKey) with the deletions, so that a load sees it too.
	// MinInt64 until an Expire.
	live int64
	// deleted is the bucket below which every key is known to be deleted
	// (valid when deletedKnown): deleted ≤ live. Expire deletes [deleted,
	// live) in batches (see physicalPerKeyGroup).
	deleted      int64
	deletedKnown bool
}

// filters is one kind of entries of a key group, in memory.
type filters struct {
	// parts holds a Bloom filter per live partition of buckets, in
	// increasing partition order, of every entry present in the DB or
	// pending (and maybe of a few that were discarded or expired since): a
	// new id (the common case) is answered without reading Pebble. Loaded
	// from the DB on first use.
	parts []*partition
	// probes holds the blocks of every partition's filter: what an Insert
	// of a new id tests and Prefetch reads, without going through the
	// partitions.
	probes [][][16]uint32
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
	return &Dedup{db: db, seed: maphash.MakeSeed(), perKeyGroup: physicalPerKeyGroup, lag: physicalLagBuckets}
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

// partitionFor returns the partition of bucket in the entries of key group
// kg, creating it (with a filter sized for 1.5 times the largest filter kg
// has had, or at least want ids) if needed.
func (d *Dedup) partitionFor(kg int, bucket int64, want int) *partition {
	g := &d.kgs[kg]
	m := g.maxCount
	return d.partitionIn(&g.cur, bucket>>partitionShift, max(want, m+m/2, minFilterCapacity))
}

// partitionIn returns partition idx of fs, creating it with a filter for
// capacity ids if needed.
func (d *Dedup) partitionIn(fs *filters, idx int64, capacity int) *partition {
	i := len(fs.parts)
	for i > 0 && fs.parts[i-1].index >= idx {
		if fs.parts[i-1].index == idx {
			return fs.parts[i-1]
		}
		i--
	}
	p := &partition{index: idx, f: newBlockBloom(capacity)}
	fs.parts = slices.Insert(fs.parts, i, p)
	fs.reindex()
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
//
// Legacy filters are folded like the others.
func (d *Dedup) enforceBudget(grown *partition) {
	for d.budget > 0 && d.filterBytes > d.budget {
		vset, victim, best := (*filters)(nil), (*partition)(nil), 0.0
		for kg := range d.kgs {
			for _, fs := range [...]*filters{&d.kgs[kg].cur, &d.kgs[kg].legacy} {
				for _, p := range fs.parts {
					if !p.f.foldable() {
						continue
					}
					// Densities within 1% count as equal. Room a filter has
					// not filled yet counts as density, so the room of a
					// partition still filling is given back first (it costs
					// no false positive until filled) and the partition is
					// rebuilt larger again once it holds twice the ids (see
					// foldedAt).
					dens := p.f.density()
					switch same := victim != nil && dens <= best*1.01 && dens >= best/1.01; {
					case victim == nil, !same && dens > best,
						same && victim == grown && p != grown,
						same && p != grown && p.index < victim.index:
						vset, victim, best = fs, p, dens
					}
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
		vset.reindex()
	}
}

// reindex rebuilds fs.probes from fs.parts.
func (fs *filters) reindex() {
	fs.probes = fs.probes[:0]
	for _, p := range fs.parts {
		fs.probes = append(fs.probes, p.f.blocks)
	}
}

// add records hash h in bucket, which p covers.
func (p *partition) add(bucket int64, h uint64) {
	j := uint32(bucket & (partitionBuckets - 1))
	p.f.add(h, j)
	p.present |= 1 << j
}

// candidates appends to dst the buckets of fs that may hold hash h, latest
// first.
func (fs *filters) candidates(dst []int64, h uint64) []int64 {
	for i := len(fs.parts) - 1; i >= 0; i-- {
		pt := fs.parts[i]
		if !pt.f.mayContain(h) {
			continue
		}
		for m := pt.present; m != 0; {
			j := uint32(63 - bits.LeadingZeros64(m))
			m &^= 1 << j
			if pt.f.mayContainTag(h, j) {
				dst = append(dst, pt.index<<partitionShift+int64(j))
			}
		}
	}
	return dst
}

// remember adds the entry of hash h (pairHash) in bucket to kg's filters. A
// full filter is first rebuilt larger from the DB and the pending batch: a
// filter is one Bloom filter, so that an Insert tests one block per
// partition, and the keys hold what it is rebuilt from.
func (d *Dedup) remember(kg int, bucket int64, h uint64) error {
	g := &d.kgs[kg]
	p := d.partitionFor(kg, bucket, 0)
	if p.f.full() && p.f.count() >= 2*p.foldedAt {
		if err := d.regrow(kg, p); err != nil {
			return err
		}
	}
	p.add(bucket, h)
	g.maxCount = max(g.maxCount, p.f.count())
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
	add := func(bucket int64, ad, id []byte) {
		j := uint32(bucket & (partitionBuckets - 1))
		f.add(pairHash(maphash.Bytes(d.seed, id), maphash.Bytes(d.seed, ad)), j)
		p.present |= 1 << j
	}
	g := &d.kgs[kg]
	for i := range d.pending.ents {
		if e := &d.pending.ents[i]; !e.del && int(e.kg) == kg && e.bucket >= lo && e.bucket < hi {
			_, ad, id, _ := parseDedupKey(d.pending.key(e))
			add(e.bucket, ad, id)
		}
	}
	lo = max(lo, g.live) // below, expired keys not deleted yet
	err := d.withGate(func() error {
		if lo >= hi {
			return nil
		}
		iter, err := d.db.db.NewIter(&pebble.IterOptions{
			LowerBound: appendBucketKey(nil, prefixDedup, kg, lo),
			UpperBound: appendBucketKey(nil, prefixDedup, kg, hi),
		})
		if err != nil {
			return err
		}
		for valid := iter.First(); valid; valid = iter.Next() {
			bucket, ad, id, ok := parseDedupKey(iter.Key())
			if !ok {
				return errors.Join(fmt.Errorf("corrupt key %x", iter.Key()), iter.Close())
			}
			add(bucket, ad, id)
		}
		return iter.Close()
	})
	if err != nil {
		return fmt.Errorf("state: dedup filter key group %d: %w", kg, err)
	}
	d.filterBytes += f.sizeBytes() - p.f.sizeBytes()
	p.f = f
	g.cur.reindex()
	d.enforceBudget(p)
	return nil
}

// refuseInterim fails if the DB holds a dedup entry of the unreleased
// interim layout (prefixInterimDedup): its keys would be misread as
// another key group's and bucket's, silently losing duplicates.
func (d *Dedup) refuseInterim() error {
	lower := []byte{prefixInterimDedup}
	iter, err := d.db.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return err
	}
	found := iter.First()
	if err := iter.Close(); err != nil {
		return err
	}
	if found {
		return errors.New("the state holds dedup entries of a development layout that no release wrote ('e' keys); restore a checkpoint written by a release, or start the job without state")
	}
	return nil
}

// load builds the filters of key group kg from the committed DB: its
// entries, and its legacy entries. It runs on the Dedup's first use of kg
// (after a restore: once per key group, reading every id of kg once, in
// key order).
func (d *Dedup) load(kg int) error {
	type ent struct {
		h      uint64
		bucket int64
	}
	cur, legacy := map[int64][]ent{}, map[int64][]ent{}
	g := &d.kgs[kg]
	fail := func(err error) error { return fmt.Errorf("state: dedup load key group %d: %w", kg, err) }
	if !d.interimChecked {
		if err := d.refuseInterim(); err != nil {
			return fail(err)
		}
		d.interimChecked = true
	}
	g.live = math.MinInt64
	v, closer, err := d.db.db.Get(boundKey(kg))
	switch {
	case err == nil:
		if len(v) != 8 {
			err = fmt.Errorf("corrupt expiry bound %x", v)
		} else {
			g.live = int64(binary.BigEndian.Uint64(v) ^ (1 << 63))
		}
		_ = closer.Close()
		if err != nil {
			return fail(err)
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return fail(err)
	}
	lower := []byte{prefixDedup, byte(kg)}
	iter, err := d.db.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fail(err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		bucket, ad, id, ok := parseDedupKey(iter.Key())
		if !ok {
			return errors.Join(fail(fmt.Errorf("corrupt key %x", iter.Key())), iter.Close())
		}
		g.keys = true
		if bucket < g.live {
			continue // expired, not deleted yet
		}
		idx := bucket >> partitionShift
		cur[idx] = append(cur[idx], ent{pairHash(maphash.Bytes(d.seed, id), maphash.Bytes(d.seed, ad)), bucket})
	}
	lower = []byte{prefixLegacyDedup, byte(kg)}
	iter.SetBounds(lower, prefixEnd(lower))
	for valid := iter.First(); valid; valid = iter.Next() {
		k := iter.Key()
		if len(k) <= legacyIDOff {
			return errors.Join(fail(fmt.Errorf("corrupt legacy key %x", k)), iter.Close())
		}
		g.legacyKeys = true
		bucket := int64(binary.BigEndian.Uint64(k[keyBucketOff:legacyIDOff]) ^ (1 << 63))
		if bucket < g.live {
			continue
		}
		idx := bucket >> partitionShift
		legacy[idx] = append(legacy[idx], ent{maphash.Bytes(d.seed, k[legacyIDOff:]), bucket})
	}
	if err := iter.Close(); err != nil {
		return fail(err)
	}
	for idx, es := range cur {
		d.partitionFor(kg, idx<<partitionShift, len(es)+len(es)/2)
		for _, e := range es {
			if err := d.remember(kg, e.bucket, e.h); err != nil { // sized to fit: no regrow
				return err
			}
		}
	}
	// Legacy filters are sized for what they hold: nothing is added later.
	for idx, es := range legacy {
		p := d.partitionIn(&g.legacy, idx, len(es))
		for _, e := range es {
			p.add(e.bucket, e.h)
		}
	}
	g.loaded = true
	return nil
}

// pairHash is the filter hash of the entry (ad, id), from the hashes of the
// id and of the ad: the id's hash alone is a legacy entry's.
func pairHash(hid, had uint64) uint64 {
	x := hid ^ (had+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return x
}

func bucketOf(ms int64) int64 {
	b := ms / BucketMs
	if ms%BucketMs < 0 {
		b--
	}
	return b
}

// Dedup keys. An entry is
//
//	'g' kg(click id) bucket len(ad) ad id
//
// with the key group one byte, the bucket 8 bytes (as in appendBucketKey)
// and len(ad) a uvarint: an ad id may hold any byte, 0x00 included (ingest
// accepts control characters), so the length, not a separator, tells where
// it ends. A legacy entry is
//
//	'd' kg(click id) bucket id
//
// Both kinds keep a key group's entries together in bucket order, so that
// a load or a filter rebuild reads one span and an Expire deletes one.
const (
	keyBucketOff = 2                // the bucket, in keys of both kinds
	keyAdOff     = keyBucketOff + 8 // the ad's length in an entry key
	legacyIDOff  = keyBucketOff + 8 // the click id in a legacy key
)

// appendBucketKey appends to dst the prefix of bucket in the keys of kind
// prefix (prefixDedup or prefixLegacyDedup) of key group kg: the bucket is
// a big-endian int64 with its sign bit flipped, so that negative times
// order before positive ones.
func appendBucketKey(dst []byte, prefix byte, kg int, bucket int64) []byte {
	dst = append(dst, prefix, byte(kg))
	return binary.BigEndian.AppendUint64(dst, uint64(bucket)^(1<<63))
}

// appendDedupKey appends to dst the key of the entry (ad, id) in bucket.
func appendDedupKey(dst []byte, kg int, bucket int64, ad, id string) []byte {
	dst = appendBucketKey(dst, prefixDedup, kg, bucket)
	dst = binary.AppendUvarint(dst, uint64(len(ad)))
	dst = append(dst, ad...)
	return append(dst, id...)
}

// parseDedupKey returns the bucket, ad and id of an entry key (ok false if
// k is not one).
func parseDedupKey(k []byte) (bucket int64, ad, id []byte, ok bool) {
	if len(k) <= keyAdOff || k[0] != prefixDedup {
		return 0, nil, nil, false
	}
	n, w := binary.Uvarint(k[keyAdOff:])
	rest := k[keyAdOff+max(w, 0):]
	if w <= 0 || n >= uint64(len(rest)) { // the id is not empty
		return 0, nil, nil, false
	}
	bucket = int64(binary.BigEndian.Uint64(k[keyBucketOff:keyAdOff]) ^ (1 << 63))
	return bucket, rest[:n], rest[n:], true
}

// boundKey is the key of the expiry bound of key group kg (keyGroup.live),
// whose value is the bucket, encoded as in a dedup key.
func boundKey(kg int) []byte { return []byte{prefixDedupBound, byte(kg)} }

func encodeBucket(bucket int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(bucket)^(1<<63))
}

// Insert records the click (ad, id), whose click id is in key group kg
// (0..KeyGroups-1), with expiry expiryMs (Unix ms, impression + the
// acceptance horizon). It returns false if (ad, id) is already present in
// kg, committed or pending in this Dedup, whatever expiry it was inserted
// with, or if a legacy entry holds id (whatever the ad); if expiryMs lies in
// a later bucket than the one (ad, id) is kept under, it is moved there, so
// that it is kept until the latest expiry of its copies. The insert (or
// move) is pending until Commit (or an automatic commit when the batch
// grows past Options.DedupBatchBytes).
func (d *Dedup) Insert(kg int, ad, id string, expiryMs int64) (inserted bool, err error) {
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
	k := entry{kg: kg, ad: ad, id: id, bucket: bucketOf(expiryMs)}
	k.hid = maphash.String(d.seed, id)
	k.h = pairHash(k.hid, maphash.String(d.seed, ad))
	k.ph = pendingHash(k.h, kg)
	hit := false
	for _, blocks := range g.cur.probes {
		if blocksMayContain(blocks, k.h) {
			hit = true
			dup, err := d.lookup(&k)
			if err != nil || dup {
				return false, err
			}
			break
		}
	}
	for _, blocks := range g.legacy.probes { // none once legacy entries expired
		if blocksMayContain(blocks, k.hid) {
			hit = true
			dup, err := d.lookupLegacy(&k)
			if err != nil || dup {
				return false, err
			}
			break
		}
	}
	if hit {
		d.vain++
	}
	if k.bucket < g.live {
		// Already expired when it arrives (preagg never inserts those: its
		// horizon rejects them): kept until the next Expire, as any other.
		if err := d.withGate(func() error { return d.lowerBound(kg, k.bucket) }); err != nil {
			return false, err
		}
	}
	if err := d.add(&k); err != nil {
		return false, err
	}
	d.inserted++
	return true, d.commitIfFull()
}

// lowerBound lowers the expiry bound of key group kg to bucket, first
// deleting the expired keys that are still in the DB between the two, so
// that lowering the bound brings none of them back. The caller is inside
// the gate.
func (d *Dedup) lowerBound(kg int, bucket int64) error {
	g := &d.kgs[kg]
	b := d.db.db.NewBatch()
	defer b.Close()
	from := bucket
	if g.deletedKnown {
		from = max(from, g.deleted)
	}
	if from < g.live {
		if err := d.deleteBuckets(b, kg, from, g.live); err != nil {
			return err
		}
	}
	if err := b.Set(boundKey(kg), encodeBucket(bucket), nil); err != nil {
		return fmt.Errorf("state: dedup expiry bound: %w", err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: dedup expiry bound: %w", err)
	}
	g.live = bucket
	if g.deletedKnown {
		// Below from, what was not deleted is below the new bound too.
		g.deleted = min(g.deleted, bucket)
	}
	return nil
}

// deleteBuckets adds to b the deletion of the keys of key group kg in
// buckets [from, to): one range for the entries if the key group may hold
// any, and one for the legacy entries if any may remain.
func (d *Dedup) deleteBuckets(b *pebble.Batch, kg int, from, to int64) error {
	g := &d.kgs[kg]
	if g.keys {
		if err := b.DeleteRange(appendBucketKey(nil, prefixDedup, kg, from), appendBucketKey(nil, prefixDedup, kg, to), nil); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
	}
	if g.legacyKeys {
		if err := b.DeleteRange(appendBucketKey(nil, prefixLegacyDedup, kg, from), appendBucketKey(nil, prefixLegacyDedup, kg, to), nil); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
	}
	return nil
}

// entry is the click an Insert is about: its key group, ad, id and bucket,
// and its hashes (of the id, of the pair, in the pending set).
type entry struct {
	kg         int
	ad, id     string
	bucket     int64
	hid, h, ph uint64
}

// add makes k pending in its bucket. The caller has made sure that (ad, id)
// is not pending yet.
func (d *Dedup) add(k *entry) error {
	// remember first: it may rebuild the filter from the pending batch,
	// which must not hold the entry yet (it would be added twice).
	if err := d.remember(k.kg, k.bucket, k.h); err != nil {
		return err
	}
	d.kgs[k.kg].keys = true
	d.pending.add(k.kg, k.bucket, k.ad, k.id, k.ph, false)
	return nil
}

// lookup is Insert's slow path, after a filter hit: it reports whether k is
// pending or in the DB, and if it is, moves it to k's bucket when that is
// later than the bucket it is kept under.
func (d *Dedup) lookup(k *entry) (dup bool, err error) {
	p := &d.pending
	if i := p.find(k.kg, k.ad, k.id, k.ph); i >= 0 {
		d.duplicates++
		if k.bucket > p.ents[i].bucket {
			p.setBucket(i, k.bucket)
			return true, d.remember(k.kg, k.bucket, k.h)
		}
		return true, nil
	}
	// The buckets that may hold it, latest first: the first found is the
	// one it is kept under (there is only one, but the latest is the right
	// one to keep if there were several).
	var buf [4 * partitionBuckets]int64
	cands := d.kgs[k.kg].cur.candidates(buf[:0], k.h)
	if len(cands) == 0 {
		return false, nil
	}
	found, at, err := d.findCommitted(k, false, cands)
	if err != nil || !found {
		return false, err
	}
	d.duplicates++
	if k.bucket > at {
		// Rare: a copy with a later expiry than the kept one. Move it:
		// delete the old key and set the new one in the same batch.
		p.add(k.kg, at, k.ad, k.id, 0, true)
		p.add(k.kg, k.bucket, k.ad, k.id, k.ph, false)
		if err := d.remember(k.kg, k.bucket, k.h); err != nil {
			return true, err
		}
		return true, d.commitIfFull()
	}
	return true, nil
}

// lookupLegacy is Insert's slow path after a hit of a legacy filter, once
// lookup found no entry of k: it reports whether a legacy entry holds k's
// id. If one does in an earlier bucket than k's, k is added in its own
// bucket (the legacy entry is never moved), so that (ad, id) is kept until
// the latest expiry of its copies.
func (d *Dedup) lookupLegacy(k *entry) (dup bool, err error) {
	var buf [4 * partitionBuckets]int64
	cands := d.kgs[k.kg].legacy.candidates(buf[:0], k.hid)
	if len(cands) == 0 {
		return false, nil
	}
	found, at, err := d.findCommitted(k, true, cands)
	if err != nil || !found {
		return false, err
	}
	d.duplicates++
	d.legacyDuplicates++
	if k.bucket > at {
		if err := d.add(k); err != nil {
			return true, err
		}
		return true, d.commitIfFull()
	}
	return true, nil
}

// findCommitted looks k (or, if legacy, the legacy entry of its id) up in
// the DB in each of buckets (in order) and returns the first bucket that
// holds it.
func (d *Dedup) findCommitted(k *entry, legacy bool, buckets []int64) (found bool, at int64, err error) {
	if err := d.db.enter(); err != nil {
		return false, 0, err
	}
	defer d.db.gate.Leave()
	for _, b := range buckets {
		d.gets++
		if legacy {
			d.key = append(appendBucketKey(d.key[:0], prefixLegacyDedup, k.kg, b), k.id...)
		} else {
			d.key = appendDedupKey(d.key[:0], k.kg, b, k.ad, k.id)
		}
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

// Prefetch reads the filter blocks that an Insert of (ad, id) in key group
// kg would test (one per live partition of kg, and one per legacy one;
// expiryMs does not choose them), and changes nothing. The filters of a
// busy subtask are far larger than the processor's caches, so each Insert
// of a new id waits on cache misses; calling Prefetch for a batch of ids
// before inserting them lets those misses overlap instead.
func (d *Dedup) Prefetch(kg int, ad, id string, expiryMs int64) {
	if kg < 0 || kg >= KeyGroups {
		return
	}
	g := &d.kgs[kg]
	if len(g.cur.probes) == 0 && len(g.legacy.probes) == 0 {
		return
	}
	hid := maphash.String(d.seed, id)
	h := pairHash(hid, maphash.String(d.seed, ad))
	for _, blocks := range g.cur.probes {
		hi, _ := bits.Mul64(h, uint64(len(blocks)))
		d.touched += blocks[hi][0]
	}
	for _, blocks := range g.legacy.probes {
		hi, _ := bits.Mul64(hid, uint64(len(blocks)))
		d.touched += blocks[hi][0]
	}
}

// Batched deletion. Deleting the expired buckets of every key group at
// every Expire costs a range deletion per key group and minute: 128 a
// minute for a Dedup holding every key group. Pebble fragments all the
// range deletions of its mutable memtable again on the first read after
// each one is added, so the cost of a minute grows with the minutes the
// memtable has lived. That is nothing at a high rate (a memtable fills in
// well under a minute) or in a live job (a checkpoint flushes it every
// 30 s), but when event time runs ahead of the memtable (a replay or a
// catch-up of a low-rate stream) it cost more than all the inserts
// (BenchmarkDedupInsertPipelineLowRate, 600 clicks a minute: 15.7 µs of
// CPU per insert, against 1.4 µs batched). So Expire moves the bound at
// once and deletes the keys below it only when enough has passed: once
// the Dedup has inserted physicalPerKeyGroup entries per key group since
// the last deletion (about a million for 128 key groups, about what a
// 64 MiB memtable holds: 1.16 million of the benchmark's entries, so a
// memtable sees the ranges of one or two deletions), or the bound has
// moved physicalLagBuckets past the deleted buckets. Until then the DB
// holds expired keys, which nothing reads: the bound is in the DB, and
// every reader skips the keys below it.
const (
	physicalPerKeyGroup = 8192
	physicalLagBuckets  = 32
)

// Expire removes every entry of key groups [kgFrom, kgTo) whose expiry
// bucket (of the latest expiry of its copies) ends at or before beforeMs
// (Unix ms, the watermark), legacy entries included. It sets the key
// groups' expiry bound, which every reader of the DB applies at once, and
// deletes the keys below it in batches (see physicalPerKeyGroup): one range
// deletion per key group that may hold keys, and one per key group while
// legacy keys may remain, covering only buckets not already deleted by
// this Dedup. Pending inserts are committed with it. A key group not used
// yet is loaded first, so that what kinds of keys it holds is known.
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
	holding := 0
	for kg := kgFrom; kg < kgTo; kg++ {
		g := &d.kgs[kg]
		if !g.loaded {
			if err := d.load(kg); err != nil {
				return err
			}
		}
		if g.keys {
			holding++
		}
	}
	byCount := d.inserted-d.insertedAtDelete >= d.perKeyGroup*int64(max(holding, 1))
	b := d.db.db.NewBatch()
	defer b.Close()
	for kg := kgFrom; kg < kgTo; kg++ {
		g := &d.kgs[kg]
		if end > g.live {
			g.live = end
			if err := b.Set(boundKey(kg), encodeBucket(end), nil); err != nil {
				return fmt.Errorf("state: dedup expire: %w", err)
			}
		}
		if g.deletedKnown && (g.deleted >= g.live || !byCount && g.live-g.deleted < d.lag) {
			continue
		}
		from := int64(math.MinInt64)
		if g.deletedKnown {
			from = g.deleted
		}
		if err := d.deleteBuckets(b, kg, from, g.live); err != nil {
			return err
		}
		g.deleted, g.deletedKnown = g.live, true
	}
	if byCount {
		d.insertedAtDelete = d.inserted
	}
	if !b.Empty() {
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
	}
	// Every bucket below the bound is now expired: clear them from the
	// partitions, and drop the partitions left with none. A key group whose
	// keys are all deleted and that holds no live entry has no key left.
	for kg := kgFrom; kg < kgTo; kg++ {
		g := &d.kgs[kg]
		d.expireFilters(&g.cur, g.live)
		d.expireFilters(&g.legacy, g.live)
		if g.deletedKnown && g.deleted == g.live {
			if len(g.cur.parts) == 0 {
				g.keys = false
			}
			if len(g.legacy.parts) == 0 {
				g.legacyKeys = false
			}
		}
	}
	return nil
}

// expireFilters clears the buckets below end from the partitions of fs and
// drops the partitions left with none.
func (d *Dedup) expireFilters(fs *filters, end int64) {
	n := len(fs.parts)
	fs.parts = slices.DeleteFunc(fs.parts, func(p *partition) bool {
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
	if len(fs.parts) != n {
		fs.reindex()
	}
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
		d.kgs[kg].deletedKnown = false
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
	// LegacyDuplicates counts the Duplicates answered by a legacy entry
	// (of the previous version, by click id alone): zero from one horizon
	// after the upgrade.
	LegacyDuplicates int64
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
		Inserted: d.inserted, Duplicates: d.duplicates, LegacyDuplicates: d.legacyDuplicates,
		VainLookups: d.vain, Gets: d.gets, Folds: d.folds, FilterBytes: d.filterBytes,
	}
}

// Count returns how many entries this Dedup inserted and how many Inserts it
// found to be duplicates since it was created.
func (d *Dedup) Count() (inserted, duplicates int64) {
	return d.inserted, d.duplicates
}
