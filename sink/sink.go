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
// job_gen is set on every write and fences older job versions; wf, the
// lease fence of the last tagged write, fences an older owner of the same
// version (see Token).
package sink

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
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

// TaggedWriters are the writers whose attributes carry a checkpoint tag
// and a tag index (<w>_ckpt, <w>_ix), and that the flush after a restore
// cleans: the one list the sink model, the adapters, the flush and the
// metrics range over.
var TaggedWriters = [...]Writer{Fast, Late}

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
	Ix          string // <w>_ix: IndexKeyIn(scope, Ckpt, key), scope that of the store view that wrote it
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
	// Fence is wf, the fence of the last tagged write (Put.Fence); 0 when
	// the item has none, which the stores treat as fence 0.
	Fence int64
	Fast  Tagged
	Late  Tagged
	Final FinalAttrs
}

// Attrs returns the tagged attributes of w on the item. w must be one of
// TaggedWriters: any other is a programming error, and panics rather than
// read another writer's attributes.
func (it *Item) Attrs(w Writer) *Tagged {
	switch w {
	case Fast:
		return &it.Fast
	case Late:
		return &it.Late
	}
	panic("sink: " + w.String() + " has no tagged attributes")
}

// Put is one tagged write of a writer's attributes: an absolute SET, never
// an ADD (seed 001 Part 8, TAGGED WRITE).
//
// The store applies it with the condition on the token (Gen, Fence)
// (see Token)
//
//	(attribute_not_exists(job_gen) OR job_gen < Gen OR
//	 (job_gen = Gen AND (attribute_not_exists(wf) OR wf <= Fence)))
//
// and, when ClosedRow is true, also the CLOSED-WINDOW WRITE condition
//
//	(attribute_not_exists(<w>_ckpt) OR <w>_ckpt >= RestoredCkpt)
//
// It sets job_gen = Gen and wf = Fence; a Fence of 0 removes wf instead,
// so writes without a lease leave items as they were before fences, and
// an item without wf reads as fence 0. With Fence 0 everywhere the
// condition is the one before fences, job_gen <= Gen.
//
// A write refused by its condition is reported as refused, never retried.
type Put struct {
	Key
	Writer      Writer // Fast or Late
	Valid       int64
	SpendMicros int64
	Epoch       int64 // the id of the last barrier the writing subtask passed
	Gen         int64 // job_gen of the writing job
	// Fence is the lease fence of the writer's range (the lease counter
	// its take wrote), ≥ 0; 0 without a range lease (embedded mode, a
	// single job). Stores refuse a negative one with an error.
	Fence     int64
	ClosedRow bool
	// RestoredCkpt is the checkpoint the job restored from (or, before any
	// restore, the id it started from); used only when ClosedRow is set.
	RestoredCkpt int64
}

// Token is what fences a writer's writes to an item: its job generation
// and the lease fence of its range, compared lexicographically. A newer
// version (higher Gen) wins whatever the fences; within one version the
// newer owner of the range (higher Fence: every take raises it) wins. So
// the first write of a new owner to an item refuses every later write of
// an old owner to it, even one sent after its lease check passed
// (docs/scale-out.md §6.5).
//
// Fences of different generations are never compared: each version has
// its own lease items, so its own counters.
type Token struct {
	Gen   int64
	Fence int64
}

// FencedRows is a Rows whose flush writes can carry a token. Put carries
// its own (Put.Gen, Put.Fence); RemoveFenced and DeleteFenced are Remove
// and Delete with the further condition that the item was not written
// under a higher fence of t's generation:
//
//	(attribute_not_exists(wf) OR wf <= t.Fence OR job_gen <> t.Gen)
//
// and, when they leave the item in place and job_gen = t.Gen, they raise
// its wf to t.Fence (a removal is a write of the new owner too). An item
// last written by another generation is removed on <w>_ckpt alone, as
// Remove does. The plain Remove and Delete check no fence, as before
// fences. Implementations: sink/embedded, sink/dynamo, sinktest.MemRows,
// and the views of Fenced and of sink/fence.
type FencedRows interface {
	Rows
	// RemoveFenced is Remove under t.
	RemoveFenced(ctx context.Context, k Key, w Writer, ckpt int64, t Token) (ok bool, err error)
	// DeleteFenced is Delete under t: its fallback removal is
	// RemoveFenced under t.
	DeleteFenced(ctx context.Context, k Key, w Writer, ckpt int64, t Token) (deleted, ok bool, err error)
}

// ErrNoFence reports a row store that cannot fence its removals (it does
// not implement FencedRows).
var ErrNoFence = errors.New("sink: the row store takes no fence token")

// Fenced returns a view of rows under t: its Put sets Fence = t.Fence on
// every write whose Fence is 0, and its Remove and Delete are rows's
// RemoveFenced and DeleteFenced under t. Everything else is rows's. A
// view of a view replaces the token. It fails with ErrNoFence if rows
// does not implement FencedRows, and for a negative fence.
//
// A range pipeline writes through Fenced(store, Token{job_gen, fence of
// its take}), so neither its window output nor its flush need to know
// the fence.
func Fenced(rows Rows, t Token) (FencedRows, error) {
	if err := ValidFence(t.Fence); err != nil {
		return nil, err
	}
	if v, ok := rows.(fencedView); ok {
		rows = v.FencedRows
	}
	fr, ok := rows.(FencedRows)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoFence, rows)
	}
	return fencedView{fr, t}, nil
}

// fencedView is the view Fenced returns.
type fencedView struct {
	FencedRows
	t Token
}

func (v fencedView) Put(ctx context.Context, puts []Put) (int, error) {
	if v.t.Fence != 0 && slices.ContainsFunc(puts, func(p Put) bool { return p.Fence == 0 }) {
		puts = slices.Clone(puts)
		for i := range puts {
			if puts[i].Fence == 0 {
				puts[i].Fence = v.t.Fence
			}
		}
	}
	return v.FencedRows.Put(ctx, puts)
}

func (v fencedView) Remove(ctx context.Context, k Key, w Writer, ckpt int64) (bool, error) {
	return v.FencedRows.RemoveFenced(ctx, k, w, ckpt, v.t)
}

func (v fencedView) Delete(ctx context.Context, k Key, w Writer, ckpt int64) (deleted, ok bool, err error) {
	return v.FencedRows.DeleteFenced(ctx, k, w, ckpt, v.t)
}

// ValidFence returns an error if fence is negative.
func ValidFence(fence int64) error {
	if fence < 0 {
		return fmt.Errorf("sink: fence %d must not be negative", fence)
	}
	return nil
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

// MaxScopeLen is the longest index scope ValidateScope accepts.
const MaxScopeLen = 32

// An index scope keeps the tag index and the totals' epoch bookkeeping of
// one range pipeline apart from those of the others sharing the same table
// and the same Valkey: each range numbers its own epochs, so two ranges
// write the same "<epoch>#<shard>", and a range's flush after a restore
// must find only its own writes. A scope is 1 to MaxScopeLen characters of
// a-z, A-Z, 0-9, '.', '_' and '-', starting with a letter or a digit, such
// as "kg0-16". The empty scope is the unscoped layout, byte for byte the
// one written before scopes existed.
//
// A store's view with a scope (the adapters' Scoped methods) writes and
// queries the scoped index key (ScopedIndexKey) and keeps its own epoch
// sets; the rows, the totals and everything else stay shared. Callers keep
// passing unscoped keys (IndexKeyOf) to QueryIndex.

// ValidateScope returns nil if scope is a valid index scope or "".
func ValidateScope(scope string) error {
	if len(scope) > MaxScopeLen {
		return fmt.Errorf("sink: scope %q is longer than %d characters", scope, MaxScopeLen)
	}
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch {
		case alnum:
		case i == 0:
			return fmt.Errorf("sink: scope %q must start with a letter or a digit", scope)
		case c != '.' && c != '_' && c != '-':
			return fmt.Errorf("sink: scope %q has %q; want only a-z, A-Z, 0-9, '.', '_' and '-'", scope, c)
		}
	}
	return nil
}

// ScopedIndexKey returns the tag-index key ix ("<epoch>#<shard>") in scope:
// "<scope>/<epoch>#<shard>", or ix itself when scope is "". An unscoped key
// never contains '/' and a scope never does, so a scoped key never equals
// an unscoped one or one of another scope.
func ScopedIndexKey(scope, ix string) string {
	if scope == "" {
		return ix
	}
	return scope + "/" + ix
}

// IndexKeyIn returns the tag-index key of a write of k tagged with epoch by
// a store view with scope: ScopedIndexKey(scope, IndexKey(epoch, k)).
func IndexKeyIn(scope string, epoch int64, k Key) string {
	return ScopedIndexKey(scope, IndexKey(epoch, k))
}

// SplitIndexKey splits a stored tag-index key into its scope ("" for an
// unscoped key) and its unscoped key "<epoch>#<shard>".
func SplitIndexKey(ix string) (scope, key string) {
	if i := strings.IndexByte(ix, '/'); i >= 0 {
		return ix[:i], ix[i+1:]
	}
	return "", ix
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

// Defaults and floors of Retention.
const (
	// DefaultMinuteRetention keeps minute rows 35 days after their minute.
	DefaultMinuteRetention = 35 * 24 * time.Hour
	// DefaultHourRetention keeps hour rows, which are billing, 400 days
	// after their hour.
	DefaultHourRetention = 400 * 24 * time.Hour
	// MinMinuteRetention is the shortest minute retention Validate accepts:
	// more than the 48 h a minute's running total lives, which the rebuild
	// of a wiped running-total store reads back from minute rows.
	MinMinuteRetention = 3 * 24 * time.Hour
	// MinHourRetention is the shortest hour retention Validate accepts:
	// more than the 8 days an hour's running total lives (rebuilt from hour
	// rows the same way), and time enough for a recount that was held up.
	MinHourRetention = 10 * 24 * time.Hour
	// Forever, as a Retention field, keeps rows of that kind forever: their
	// writes carry no expiry.
	Forever time.Duration = -1
)

// Retention is how long the row store keeps rows after their bucket ends.
// Every tagged write of a row (and the recount's write of an hour row that
// has none yet) sets its expiry, expires_at, to the end of its minute or
// hour plus the retention of its kind, in Unix seconds; DynamoDB's TTL
// deletes it some time (usually days) after that, and the embedded store
// deletes it at once once its clock has passed it. A zero field takes its
// default; Forever keeps rows of that kind.
//
// Why expiry can never take a row something still needs:
//
//   - The expiry is a function of the bucket alone, not of the time of the
//     write: every write of a row, the first, a retried one, the flush's
//     rewrite after a restore and the replay's, sets the same value, so
//     rewriting never moves it and a row lives at least retention past its
//     bucket's end, however late it was written.
//   - The stream writes only buckets near its watermark: minutes as they
//     close, hour roll-ups of the hours being closed, late totals within
//     the horizon (2 h) after an hour. None is within days of its expiry,
//     so no write lands on a row that TTL is about to remove.
//   - The flush after a restore from checkpoint c reads rows only through
//     the tag index, and only those tagged ≥ c; its decision (flush.Decide)
//     depends on the tag, and the values it writes come from restored
//     state, never from other rows. A row TTL took before the flush reached
//     it holds nothing to undo: a minute row would have been deleted, an
//     hour row is rewritten from state (with the same expires_at). So
//     expiry cannot confuse the flush, even after a restore from an old
//     savepoint. What expiry does take with a row is its closed-row fence
//     (fast_ckpt ≥ the restored checkpoint): that matters only for a write
//     of a bucket already past its retention, which no live job makes.
//   - The recount reads the lake, not rows; it writes final_* on hour rows,
//     and reconciliation reads hour rows, once an hour is over by the
//     horizon: hours, not days, after it ends, far inside MinHourRetention.
//     Its write never shortens a row's life (it sets expires_at only on a
//     row that has none).
//   - The rebuild of a wiped running-total store reads minute rows of the
//     last 48 h and hour rows of the last 8 days: MinMinuteRetention and
//     MinHourRetention are longer.
//   - No reader is confused by the attribute: the adapters' decoders ignore
//     attributes they do not know (sink/dynamo's decodeItem) or keep it out
//     of Item (the embedded store), so Item, the flush's and the recount's
//     input, never carries it; the flush's conditional Delete ("no other
//     writer's attributes") does not count it as a writer's.
//
// A job reading a stream far behind (more than the minute retention of
// backlog) writes minute rows that expire soon after; their hour rows keep
// the counts. A changed retention applies to rows written from then on.
type Retention struct {
	Minute time.Duration // minute rows; default DefaultMinuteRetention
	Hour   time.Duration // hour rows; default DefaultHourRetention
}

// RetentionDays returns the retention of minute and hour rows given in
// days, 0 meaning forever (the command line's convention).
func RetentionDays(minuteDays, hourDays int) Retention {
	d := func(n int) time.Duration {
		if n == 0 {
			return Forever
		}
		return time.Duration(n) * 24 * time.Hour
	}
	return Retention{Minute: d(minuteDays), Hour: d(hourDays)}
}

// EnsureDefaults sets each zero field to its default.
func (r *Retention) EnsureDefaults() {
	if r.Minute == 0 {
		r.Minute = DefaultMinuteRetention
	}
	if r.Hour == 0 {
		r.Hour = DefaultHourRetention
	}
}

// Validate reports every problem with r (after EnsureDefaults), or nil.
func (r Retention) Validate() error {
	var errs []error
	if r.Minute != Forever && r.Minute < MinMinuteRetention {
		errs = append(errs, fmt.Errorf("sink: minute retention %v is shorter than %v (a rebuild of the running totals reads minute rows that old)", r.Minute, MinMinuteRetention))
	}
	if r.Hour != Forever && r.Hour < MinHourRetention {
		errs = append(errs, fmt.Errorf("sink: hour retention %v is shorter than %v (hour rows are billing; the rebuild of running totals reads them)", r.Hour, MinHourRetention))
	}
	return errors.Join(errs...)
}

// ExpiresAt returns the expiry of the row in bucket, in Unix seconds: the
// end of its minute or hour plus the retention of its kind. ok is false
// when the row never expires (Forever, or a bucket that does not parse).
// Call it after EnsureDefaults.
func (r Retention) ExpiresAt(bucket string) (sec int64, ok bool) {
	startMs, hour, err := ParseBucket(bucket)
	if err != nil {
		return 0, false
	}
	return r.ExpiresAtStart(startMs, hour)
}

// ExpiresAtStart is ExpiresAt for a bucket already parsed (ParseBucket).
func (r Retention) ExpiresAtStart(startMs int64, hour bool) (sec int64, ok bool) {
	keep, size := r.Minute, int64(60_000)
	if hour {
		keep, size = r.Hour, 3_600_000
	}
	if keep < 0 {
		return 0, false
	}
	return (startMs+size)/1000 + int64(keep/time.Second), true
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
	// its index key, its generation, job_gen and wf). The index key is
	// IndexKeyIn(scope, epoch, key), scope that of the store view ("" for
	// the store itself). A write refused by its
	// condition is counted in refused and not retried; err reports only
	// failures that remain after the adapter's own retries.
	Put(ctx context.Context, puts []Put) (refused int, err error)
	// PutFinal applies recount writes; refused counts condition failures.
	PutFinal(ctx context.Context, puts []FinalPut) (refused int, err error)
	// Get returns the item at k; ok is false if there is none.
	Get(ctx context.Context, k Key) (it Item, ok bool, err error)
	// QueryIndex calls fn for every item whose <w>_ix equals ix (the tag
	// index, "<epoch>#<shard>"), following pagination to the end. w is Fast
	// or Late. A store view with a scope queries ScopedIndexKey(scope, ix):
	// ix is always given unscoped.
	QueryIndex(ctx context.Context, w Writer, ix string, fn func(Item) error) error
	// Remove removes w's attributes (<w>_valid, <w>_spend_micros,
	// <w>_ckpt, <w>_ix, <w>_gen) from k, on condition that <w>_ckpt still
	// equals ckpt; ok is false if the condition failed or there is no item.
	// It checks no fence (see FencedRows).
	Remove(ctx context.Context, k Key, w Writer, ckpt int64) (ok bool, err error)
	// Delete deletes the item k on condition that <w>_ckpt equals ckpt and
	// the item carries no other writer's attributes. If another writer's
	// attributes are present it removes only w's attributes, as Remove does.
	// deleted reports whether the whole item went; ok whether anything was
	// changed.
	// It checks no fence (see FencedRows).
	Delete(ctx context.Context, k Key, w Writer, ckpt int64) (deleted, ok bool, err error)
	// QueryBucket calls fn for the items of bucket whose entity sorts after
	// after ("" = from the first), in entity order (byte order of the
	// strings), and stops after limit items (limit < 1: no limit). It reads
	// an index on bucket, so its cost is that of the items it returns, not
	// of the table. On DynamoDB the index is eventually consistent: a write
	// of the last second may be missing.
	QueryBucket(ctx context.Context, bucket, after string, limit int, fn func(Item) error) error
	// Scan calls fn for every item, in no particular order.
	Scan(ctx context.Context, fn func(Item) error) error
}

// Totals is the running-total store for dashboards (sink/valkey, and the
// embedded store). All methods are safe for concurrent use.
//
// The totals themselves are shared by every view of a store; the epoch
// bookkeeping (SetTotals' records, TotalsWritten, ForgetEpochs, and the
// records DeleteTotals forgets) belongs to the view's scope.
//
// Every stored total carries the token (Token) of its last write, and
// the plain SetTotals and DeleteTotals are those of FencedTotals under the
// zero token: they act on totals stored without a token (or under the
// zero token) and leave the others as they are.
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

// FencedTotals is a Totals whose writes carry a token (Token): the store
// keeps the token of each total's last write with the total and refuses,
// per total and atomically, a write under a lower one
// (docs/scale-out.md §6.5.5), as the row store refuses a Put. So once
// the new holder of a range has written a total, a paused old holder's
// late write of it is refused by the store itself, whatever its lease
// check said. Implementations: sink/valkey (a single-key script),
// sink/embedded, sinktest.MemTotals.
type FencedTotals interface {
	Totals
	// SetTotalsFenced is SetTotals under t: each total whose stored token
	// is above t (Token.Less) is left as it is and counted in refused; the
	// others are written with t. The epoch records are written either way.
	SetTotalsFenced(ctx context.Context, ts []Total, t Token) (refused int, err error)
	// DeleteTotalsFenced is DeleteTotals under t: each total whose stored
	// token is above t stays, still recorded, and is counted in refused.
	// A missing total is deleted (not refused).
	DeleteTotalsFenced(ctx context.Context, keys []TotalKey, t Token) (refused int, err error)
}

// Less reports whether t is below u: a lower generation, or the same
// generation and a lower fence.
func (t Token) Less(u Token) bool {
	return t.Gen < u.Gen || t.Gen == u.Gen && t.Fence < u.Fence
}

// TotalsUnder returns a view of totals whose SetTotals and DeleteTotals
// are SetTotalsFenced and DeleteTotalsFenced under t; the refusals are
// counted by the store (its metrics), not returned. A store that writes
// back (a Sync(ctx) error method, the embedded one) keeps it. A view of
// a view replaces the token. It fails with ErrNoFence if totals does not
// implement FencedTotals, and for a negative fence. A nil totals gives
// nil.
//
// A job writes its running totals, its flush's and its rebuild's, through
// TotalsUnder(store, Token{job_gen, fence of its range's take}), fence 0
// without a range lease.
func TotalsUnder(totals Totals, t Token) (Totals, error) {
	if totals == nil {
		return nil, nil
	}
	if err := ValidFence(t.Fence); err != nil {
		return nil, err
	}
	switch v := totals.(type) {
	case totalsView:
		totals = v.FencedTotals
	case syncTotalsView:
		totals = v.FencedTotals
	}
	ft, ok := totals.(FencedTotals)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoFence, totals)
	}
	v := totalsView{ft, t}
	if s, ok := totals.(interface{ Sync(context.Context) error }); ok {
		return syncTotalsView{v, s.Sync}, nil
	}
	return v, nil
}

// totalsView is the view TotalsUnder returns.
type totalsView struct {
	FencedTotals
	t Token
}

func (v totalsView) SetTotals(ctx context.Context, ts []Total) error {
	_, err := v.FencedTotals.SetTotalsFenced(ctx, ts, v.t)
	return err
}

func (v totalsView) DeleteTotals(ctx context.Context, keys []TotalKey) error {
	_, err := v.FencedTotals.DeleteTotalsFenced(ctx, keys, v.t)
	return err
}

// syncTotalsView is a totalsView of a store that writes back.
type syncTotalsView struct {
	totalsView
	sync func(context.Context) error
}

// Sync is the store's.
func (v syncTotalsView) Sync(ctx context.Context) error { return v.sync(ctx) }
