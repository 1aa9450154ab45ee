// Package sink holds the data model of the ad_metrics rows and the running
// totals, shared by every sink adapter (embedded Pebble store, DynamoDB,
// Valkey) and by the flush.
//
// The model follows DESIGN.md §5 and seed 001 Part 8: several writers share
// one item and each writer owns, and tags, only its own attributes:
//
//	fast  — the stream's closed minutes and the hour roll-up (fast_valid,
//	        fast_spend_micros, fast_ckpt, fast_ix, fast_gen)
//	late  — the late path's totals per hour (late_valid, late_spend_micros,
//	        late_ckpt, late_ix, late_gen)
//	final — the recount (final_valid, final_spend_micros, final_gen, final_at)
//
// job_gen is set on every write and fences older job versions.
package sink

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// IndexShards is the number of shards of each writer's tag index.
const IndexShards = 8

// Writer names the owner of a group of attributes on an item.
type Writer uint8

const (
	// Fast is the stream's on-time output: minute rows and the hour roll-up.
	Fast Writer = iota + 1
	// Late is the late path's per-hour totals.
	Late
	// Final is the batch recount.
	Final
)

// String returns the attribute prefix of the writer ("fast", "late", "final").
func (w Writer) String() string {
	switch w {
	case Fast:
		return "fast"
	case Late:
		return "late"
	case Final:
		return "final"
	}
	return "writer(" + strconv.Itoa(int(w)) + ")"
}

// Key is the primary key of an ad_metrics item.
type Key struct {
	Entity string // the ad id
	Bucket string // MinuteBucket or HourBucket
}

// Tagged holds one tagged writer's attributes on an item (fast_* or late_*).
// Present is false when the item carries none of them.
type Tagged struct {
	Present     bool
	Valid       int64
	SpendMicros int64
	Ckpt        int64  // <w>_ckpt: the epoch (last barrier passed) of the write
	Ix          string // <w>_ix: IndexKey(Ckpt, key)
	Gen         int64  // <w>_gen: the job generation of the write
}

// FinalAttrs holds the recount's attributes on an hour item.
type FinalAttrs struct {
	Present     bool
	Valid       int64
	SpendMicros int64
	Gen         int64
	AtMs        int64 // final_at, Unix ms
}

// Item is one ad_metrics row.
type Item struct {
	Key
	JobGen    int64 // job_gen; meaningful only when HasJobGen
	HasJobGen bool
	Fast      Tagged
	Late      Tagged
	Final     FinalAttrs
}

// Attrs returns the tagged attributes of w on the item (Fast or Late).
func (it *Item) Attrs(w Writer) *Tagged {
	if w == Late {
		return &it.Late
	}
	return &it.Fast
}

// Put is one tagged write of a writer's attributes: an absolute SET, never
// an ADD (seed 001 Part 8, TAGGED WRITE).
//
// The store applies it with the condition
//
//	(attribute_not_exists(job_gen) OR job_gen <= Gen)
//
// and, when ClosedRow is true, also the CLOSED-WINDOW WRITE condition
//
//	(attribute_not_exists(<w>_ckpt) OR <w>_ckpt >= RestoredCkpt)
//
// A write refused by its condition is reported as refused, never retried.
type Put struct {
	Key
	Writer      Writer // Fast or Late
	Valid       int64
	SpendMicros int64
	Epoch       int64 // the id of the last barrier the writing subtask passed
	Gen         int64 // job_gen of the writing job
	ClosedRow   bool
	// RestoredCkpt is the checkpoint the job restored from (or, before any
	// restore, the id it started from); used only when ClosedRow is set.
	RestoredCkpt int64
}

// FinalPut writes the recount's attributes on an hour item. It is applied
// with the condition (attribute_not_exists(final_gen) OR final_gen <= Gen),
// so a recount under a newer generation wins and an older one is refused.
type FinalPut struct {
	Key
	Valid       int64
	SpendMicros int64
	Gen         int64
	AtMs        int64
}

// IndexShard returns hash(entity, bucket) mod IndexShards, the shard of the
// tag index an item's writes land on. It is stable across releases: stored
// index keys depend on it.
func IndexShard(k Key) int {
	h := fnv.New32a()
	h.Write([]byte(k.Entity))
	h.Write([]byte{0})
	h.Write([]byte(k.Bucket))
	return int(h.Sum32() % IndexShards)
}

// IndexKey returns the tag-index key "<epoch>#<shard>" of a write of k
// tagged with epoch.
func IndexKey(epoch int64, k Key) string {
	return IndexKeyOf(epoch, IndexShard(k))
}

// IndexKeyOf returns "<epoch>#<shard>".
func IndexKeyOf(epoch int64, shard int) string {
	return strconv.FormatInt(epoch, 10) + "#" + strconv.Itoa(shard)
}

// MinuteBucket returns the bucket of the minute starting at startMs (UTC),
// such as "M2026-11-29T10:14Z".
func MinuteBucket(startMs int64) string {
	return time.UnixMilli(startMs).UTC().Format("M2006-01-02T15:04Z")
}

// HourBucket returns the bucket of the hour starting at startMs (UTC), such
// as "H2026-11-29T10Z".
func HourBucket(startMs int64) string {
	return time.UnixMilli(startMs).UTC().Format("H2006-01-02T15Z")
}

// ParseBucket returns the start (Unix ms) of a bucket and whether it is an
// hour bucket.
func ParseBucket(b string) (startMs int64, hour bool, err error) {
	if len(b) < 2 {
		return 0, false, fmt.Errorf("sink: bad bucket %q", b)
	}
	var t time.Time
	switch b[0] {
	case 'M':
		t, err = time.Parse("M2006-01-02T15:04Z", b)
	case 'H':
		t, err = time.Parse("H2006-01-02T15Z", b)
		hour = true
	default:
		return 0, false, fmt.Errorf("sink: bad bucket %q", b)
	}
	if err != nil {
		return 0, false, fmt.Errorf("sink: bad bucket %q: %w", b, err)
	}
	return t.UnixMilli(), hour, nil
}

// Total is a running total for dashboards: per ad and minute (Hour false) or
// per ad and hour (Hour true), as absolute values.
type Total struct {
	Ad          string
	StartMs     int64 // start of the minute or hour
	Hour        bool
	Valid       int64
	SpendMicros int64
	Epoch       int64 // the last barrier the writer passed
}

// TotalKey identifies a running total.
type TotalKey struct {
	Ad      string
	StartMs int64
	Hour    bool
}

// Key returns the total's key.
func (t Total) Key() TotalKey { return TotalKey{Ad: t.Ad, StartMs: t.StartMs, Hour: t.Hour} }

// Rows is the ad_metrics store as the runtime, the flush, the recount and the
// API use it. Implementations: sink/embedded (Pebble), sink/dynamo
// (DynamoDB). All methods are safe for concurrent use.
//
// Conditions are evaluated per item and atomically, as DynamoDB's
// UpdateItem/DeleteItem conditions are.
type Rows interface {
	// Put applies tagged writes (SET of one writer's attributes, its tag,
	// its index key, its generation and job_gen). A write refused by its
	// condition is counted in refused and not retried; err reports only
	// failures that remain after the adapter's own retries.
	Put(ctx context.Context, puts []Put) (refused int, err error)
	// PutFinal applies recount writes; refused counts condition failures.
	PutFinal(ctx context.Context, puts []FinalPut) (refused int, err error)
	// Get returns the item at k; ok is false if there is none.
	Get(ctx context.Context, k Key) (it Item, ok bool, err error)
	// QueryIndex calls fn for every item whose <w>_ix equals ix (the tag
	// index, "<epoch>#<shard>"), following pagination to the end. w is Fast
	// or Late.
	QueryIndex(ctx context.Context, w Writer, ix string, fn func(Item) error) error
	// Remove removes w's attributes (<w>_valid, <w>_spend_micros,
	// <w>_ckpt, <w>_ix, <w>_gen) from k, on condition that <w>_ckpt still
	// equals ckpt; ok is false if the condition failed or there is no item.
	Remove(ctx context.Context, k Key, w Writer, ckpt int64) (ok bool, err error)
	// Delete deletes the item k on condition that <w>_ckpt equals ckpt and
	// the item carries no other writer's attributes. If another writer's
	// attributes are present it removes only w's attributes, as Remove does.
	// deleted reports whether the whole item went; ok whether anything was
	// changed.
	Delete(ctx context.Context, k Key, w Writer, ckpt int64) (deleted, ok bool, err error)
	// Scan calls fn for every item, in no particular order.
	Scan(ctx context.Context, fn func(Item) error) error
}

// Totals is the running-total store for dashboards (sink/valkey, and the
// embedded store). All methods are safe for concurrent use.
type Totals interface {
	// SetTotals writes absolute totals and records each key under its
	// epoch, so that the flush can find what was written since a checkpoint.
	SetTotals(ctx context.Context, ts []Total) error
	// TotalsWritten calls fn for every total key recorded under epoch.
	TotalsWritten(ctx context.Context, epoch int64, fn func(TotalKey) error) error
	// DeleteTotals deletes the totals and forgets them from their epochs.
	DeleteTotals(ctx context.Context, keys []TotalKey) error
	// ForgetEpochs drops the bookkeeping of epochs in [from, to).
	ForgetEpochs(ctx context.Context, from, to int64) error
	// GetTotal returns a total; ok is false if there is none.
	GetTotal(ctx context.Context, k TotalKey) (t Total, ok bool, err error)
}
