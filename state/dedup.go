package state

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	db    *DB
	batch *pebble.Batch
	key   []byte

	// expiredTo[kg] is the bucket below which every bucket of kg is known to
	// be deleted (valid when expiredKnown[kg]), so Expire only deletes what
	// is new.
	expiredTo    [KeyGroups]int64
	expiredKnown [KeyGroups]bool

	inserted, duplicates int64
}

// NewDedup returns a Dedup on db with an empty pending batch.
func (db *DB) NewDedup() *Dedup {
	return &Dedup{db: db, key: make([]byte, 0, 64)}
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
	if err := d.db.enter(); err != nil {
		return false, err
	}
	defer d.db.closeMu.RUnlock()
	if d.batch == nil {
		d.batch = d.db.db.NewIndexedBatch()
	}
	bucket := bucketOf(expiryMs)
	d.key = append(d.appendKey(d.key[:0], kg, bucket), id...)
	_, closer, err := d.batch.Get(d.key)
	switch {
	case err == nil:
		_ = closer.Close()
		d.duplicates++
		return false, nil
	case !errors.Is(err, pebble.ErrNotFound):
		return false, fmt.Errorf("state: dedup lookup: %w", err)
	}
	if err := d.batch.Set(d.key, nil, nil); err != nil {
		return false, fmt.Errorf("state: dedup insert: %w", err)
	}
	d.inserted++
	if d.expiredKnown[kg] && bucket < d.expiredTo[kg] {
		// An id already expired by the time it arrives: make sure the next
		// Expire covers its bucket again.
		d.expiredTo[kg] = bucket
	}
	if d.batch.Len() >= d.db.opts.DedupBatchBytes {
		return true, d.commitLocked()
	}
	return true, nil
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
	defer d.db.closeMu.RUnlock()
	end := bucketOf(beforeMs) // buckets b < end end at or before beforeMs
	for kg := kgFrom; kg < kgTo; kg++ {
		start := int64(math.MinInt64)
		if d.expiredKnown[kg] {
			start = d.expiredTo[kg]
		}
		if end <= start {
			continue
		}
		if d.batch == nil {
			d.batch = d.db.db.NewIndexedBatch()
		}
		if err := d.batch.DeleteRange(d.appendKey(nil, kg, start), d.appendKey(nil, kg, end), nil); err != nil {
			return fmt.Errorf("state: dedup expire: %w", err)
		}
		d.expiredTo[kg], d.expiredKnown[kg] = end, true
	}
	return d.commitLocked()
}

// Commit makes the pending inserts and expiries visible in the DB (and so
// part of the next Checkpoint).
func (d *Dedup) Commit() error {
	if err := d.db.enter(); err != nil {
		return err
	}
	defer d.db.closeMu.RUnlock()
	return d.commitLocked()
}

func (d *Dedup) commitLocked() error {
	if d.batch == nil {
		return nil
	}
	b := d.batch
	d.batch = nil
	if b.Empty() {
		return b.Close()
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		_ = b.Close()
		return fmt.Errorf("state: dedup commit: %w", err)
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("state: dedup commit: %w", err)
	}
	return nil
}

// Discard drops the pending inserts and expiries without applying them.
func (d *Dedup) Discard() {
	if d.batch != nil {
		_ = d.batch.Close()
		d.batch = nil
	}
	d.expiredKnown = [KeyGroups]bool{}
}

// Count returns how many ids this Dedup inserted and how many Inserts it
// found to be duplicates since it was created.
func (d *Dedup) Count() (inserted, duplicates int64) {
	return d.inserted, d.duplicates
}
