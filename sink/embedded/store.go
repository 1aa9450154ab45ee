package embedded

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/internal/pebbleutil"
	"github.com/adclick/adclick/sink"
)

var (
	_ sink.FencedRows = (*Store)(nil)
	_ sink.Totals     = (*Store)(nil)
)

// ErrClosed is returned by every method of a closed Store.
var ErrClosed = errors.New("embedded: store closed")

// Options configure a Store. The zero value is valid.
type Options struct {
	// Registerer receives the store's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// CacheSize is Pebble's block cache in bytes, on top of the memtables
	// (Pebble charges those to the same cache; Open adds them). Default
	// 16 MiB.
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes. Default 64 MiB.
	MemTableSize uint64
	// NoSync skips the write-ahead-log sync at the end of each mutating call.
	// Writes then survive Close but not a crash. Default false (sync); meant
	// for throwaway stores in tests and benchmarks only.
	NoSync bool
	// Retention is how long rows are kept after their bucket ends (see
	// sink.Retention, which says why expiry never takes a row the flush or
	// the recount needs). Zero fields take sink's defaults: 35 days for
	// minute rows, 400 for hour rows.
	Retention sink.Retention
	// Clock is the time expiry is judged by. Default: the store's data
	// clock, the start of the newest bucket written through this Store
	// since Open. A file replay then expires rows by the trace's own time,
	// the same way on every run, and a store nothing writes to (adclick
	// rows reading it) expires nothing.
	Clock clock.Clock
}

// Expiry is driven by writes: a Put or PutFinal call that finds the clock
// expiryEveryMs past the last pass expires up to expiryBatch rows whose
// expires_at is over, before it returns (a pass that hits the batch size
// leaves the rest to the next call). Expire does the same on demand.
const (
	expiryEveryMs = 60_000
	expiryBatch   = 1000
)

const (
	defaultCacheSize    = 16 << 20
	defaultMemTableSize = 64 << 20
	lockStripes         = 256
)

// Store is the embedded ad_metrics table and running-total store on Pebble.
// It implements sink.Rows and sink.Totals. All methods are safe for
// concurrent use. A Store may be a view with an index scope (Scoped).
type Store struct {
	*store
	scope string // the index scope (sink.ValidateScope); "" unscoped
	view  bool   // made by Scoped: Close leaves the database open
}

// store is what a Store and its views share: the database, the locks, the
// running totals not yet on disk, the metrics.
type store struct {
	db      *pebble.DB
	noSync  bool
	metrics *Metrics
	seed    maphash.Seed
	locks   [lockStripes]sync.Mutex

	gate pebbleutil.Gate

	// Running totals are written back: kept in memory and written to disk
	// by Sync (see totals.go).
	tot totalsBuffer

	// indexSteps counts index iterator steps (for tests of QueryIndex cost),
	// bucketSteps those of QueryBucket.
	indexSteps, bucketSteps atomic.Int64

	retention sink.Retention
	clock     clock.Clock // nil: the data clock, newest
	// newest is the data clock: the start (Unix ms) of the newest bucket
	// written since Open; math.MinInt64 before the first write.
	newest atomic.Int64
	// nextExpiry is the clock time (Unix ms) of the next expiry pass;
	// expireMu lets one call run it while the others go on.
	nextExpiry atomic.Int64
	expireMu   sync.Mutex
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = defaultMemTableSize
	}
	o.Retention.EnsureDefaults()
	if err := o.Retention.Validate(); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	m, err := NewMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	// Pebble charges its memtables (the one being written and one being
	// flushed) to the block cache; add them so that CacheSize stays for
	// blocks.
	cache := pebble.NewCache(o.CacheSize + 2*int64(o.MemTableSize))
	defer cache.Unref()
	po := &pebble.Options{
		Cache:              cache,
		MemTableSize:       o.MemTableSize,
		Logger:             pebbleutil.Logger{Prefix: "embedded"},
		FormatMajorVersion: pebble.FormatNewest,
	}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", dir, err)
	}
	s := &Store{store: &store{db: db, noSync: o.NoSync, metrics: m, seed: maphash.MakeSeed(), gate: pebbleutil.Gate{Closed: ErrClosed},
		retention: o.Retention, clock: o.Clock}}
	s.newest.Store(math.MinInt64)
	if err := s.indexBuckets(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// indexBuckets writes the bucket index entries of every item, once, in a
// store written before the bucket index existed (as DynamoDB backfills a
// new global secondary index), and marks the store as indexed.
func (s *Store) indexBuckets() error {
	_, closer, err := s.db.Get(metaBucketIndex)
	if err == nil {
		return closer.Close()
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("embedded: open: %w", err)
	}
	lower := []byte{prefixItem}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("embedded: index buckets: %w", err)
	}
	b := s.db.NewBatch()
	for valid := iter.First(); valid; valid = iter.Next() {
		k, err := decodeItemKey(iter.Key())
		if err != nil {
			b.Close()
			return errors.Join(fmt.Errorf("embedded: index buckets: %w", err), iter.Close())
		}
		_ = b.Set(bucketIndexKey(k), nil, nil)
		if b.Count() >= 10_000 {
			if err := b.Commit(pebble.NoSync); err != nil {
				b.Close()
				return errors.Join(fmt.Errorf("embedded: index buckets: %w", err), iter.Close())
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	if err := iter.Close(); err != nil {
		b.Close()
		return fmt.Errorf("embedded: index buckets: %w", err)
	}
	_ = b.Set(metaBucketIndex, nil, nil)
	err = b.Commit(pebble.Sync)
	b.Close()
	if err != nil {
		return fmt.Errorf("embedded: index buckets: %w", err)
	}
	return nil
}

// Metrics returns the store's metrics.
func (s *Store) Metrics() *Metrics { return s.metrics }

// Scoped returns a view of the store with the index scope scope (see
// sink.ValidateScope). The view's Put writes <w>_ix =
// sink.IndexKeyIn(scope, ...) and its QueryIndex(w, ix) reads
// sink.ScopedIndexKey(scope, ix); its SetTotals records keys in the
// scope's own epoch records, which its TotalsWritten lists, its
// ForgetEpochs drops and its DeleteTotals forgets the keys from. Items,
// totals, the running totals not yet on disk, Sync, expiry and the metrics
// are shared with s. Scope "" gives the unscoped layout; scopes do not
// nest: s.Scoped(a).Scoped(b) is s.Scoped(b). Closing a view does nothing:
// close the Store that Open returned.
func (s *Store) Scoped(scope string) (*Store, error) {
	if err := sink.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	return &Store{store: s.store, scope: scope, view: true}, nil
}

// Scope returns the store's index scope, "" when unscoped.
func (s *Store) Scope() string { return s.scope }

// Close waits for running calls, syncs and closes the store. Later calls
// return ErrClosed. On a view (Scoped) it does nothing and returns nil.
func (s *Store) Close() error {
	if s.view {
		return nil
	}
	// Refuse new calls and wait for running ones, then write the running
	// totals still in memory: none can arrive after that.
	if err := s.gate.Close(); err != nil {
		return err
	}
	s.tot.syncMu.Lock()
	s.tot.mu.Lock()
	p := s.tot.vals
	s.tot.vals = nil
	s.tot.mu.Unlock()
	serr := s.writeTotals(context.Background(), p)
	s.tot.syncMu.Unlock()
	if serr != nil {
		s.db.Close()
		return serr
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("embedded: close: %w", err)
	}
	return nil
}

// enter admits an operation unless the store is closed; the caller must
// call s.gate.leave when done (only if enter returned nil).
func (s *Store) enter() error { return s.gate.Enter() }

func (s *Store) lock(key []byte) *sync.Mutex {
	mu := &s.locks[maphash.Bytes(s.seed, key)%lockStripes]
	mu.Lock()
	return mu
}

// sync makes every write applied so far durable. It is called once at the
// end of each mutating call that wrote something.
func (s *Store) sync() error {
	if s.noSync {
		return nil
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("embedded: sync: %w", err)
	}
	s.metrics.Syncs.Inc()
	return nil
}

// finish syncs if wrote and joins the sync error with err.
func (s *Store) finish(wrote bool, err error) error {
	if !wrote {
		return err
	}
	return errors.Join(err, s.sync())
}

// getItem reads the item stored under ikey (the encoded key of k).
func (s *Store) getItem(k sink.Key, ikey []byte) (sink.Item, bool, error) {
	it, _, ok, err := s.getRecord(k, ikey)
	return it, ok, err
}

// getRecord reads the item stored under ikey and its expiry.
func (s *Store) getRecord(k sink.Key, ikey []byte) (sink.Item, expiry, bool, error) {
	v, closer, err := s.db.Get(ikey)
	if errors.Is(err, pebble.ErrNotFound) {
		return sink.Item{Key: k}, expiry{}, false, nil
	}
	if err != nil {
		return sink.Item{}, expiry{}, false, fmt.Errorf("embedded: get %q/%q: %w", k.Entity, k.Bucket, err)
	}
	it, exp, derr := decodeRecord(k, v)
	cerr := closer.Close()
	if derr != nil {
		return sink.Item{}, expiry{}, false, derr
	}
	if cerr != nil {
		return sink.Item{}, expiry{}, false, fmt.Errorf("embedded: get %q/%q: %w", k.Entity, k.Bucket, cerr)
	}
	return it, exp, true, nil
}

// written notes a write of bucket: it advances the data clock and returns
// the row's expiry under the store's retention.
func (s *Store) written(bucket string) expiry {
	startMs, hour, err := sink.ParseBucket(bucket)
	if err != nil {
		return expiry{}
	}
	for {
		cur := s.newest.Load()
		if startMs <= cur || s.newest.CompareAndSwap(cur, startMs) {
			break
		}
	}
	sec, ok := s.retention.ExpiresAtStart(startMs, hour)
	return expiry{sec: sec, set: ok}
}

// setExpiry puts into b the change of an item's expiry from old to exp
// (the expiry queue entry) and returns the expiry to store.
func setExpiry(b *pebble.Batch, k sink.Key, old, exp expiry) expiry {
	if !exp.set || old == exp {
		return old
	}
	if old.set {
		_ = b.Delete(expiryKey(old.sec, k), nil)
	}
	_ = b.Set(expiryKey(exp.sec, k), nil, nil)
	return exp
}

func validKey(k sink.Key) error {
	if k.Entity == "" || k.Bucket == "" {
		return fmt.Errorf("embedded: empty key attribute in %q/%q", k.Entity, k.Bucket)
	}
	return nil
}

func validWriter(w sink.Writer) error {
	if w != sink.Fast && w != sink.Late {
		return fmt.Errorf("embedded: writer %v has no tagged attributes", w)
	}
	return nil
}

// Put applies tagged writes with the conditions of sink.Put: the token
// (job_gen, wf) and, for closed rows, the closed-row condition. Refused
// writes are counted and not retried. The inputs are validated before
// anything is written.
func (s *Store) Put(ctx context.Context, puts []sink.Put) (refused int, err error) {
	for _, p := range puts {
		if err := validKey(p.Key); err != nil {
			return 0, err
		}
		if err := validWriter(p.Writer); err != nil {
			return 0, err
		}
		if err := sink.ValidFence(p.Fence); err != nil {
			return 0, fmt.Errorf("embedded: put: %w", err)
		}
	}
	refused, err = applyEach(ctx, s, "put", puts, s.putOne)
	if err != nil {
		return refused, err
	}
	return refused, s.expireDue(ctx)
}

func (s *Store) putOne(p sink.Put) (bool, error) {
	ikey := itemKey(p.Key)
	mu := s.lock(ikey)
	defer mu.Unlock()
	it, exp, found, err := s.getRecord(p.Key, ikey)
	if err != nil {
		return false, err
	}
	a := it.Attrs(p.Writer)
	if it.HasJobGen && (it.JobGen > p.Gen || it.JobGen == p.Gen && it.Fence > p.Fence) {
		s.metrics.Refused.WithLabelValues("put").Inc()
		return false, nil
	}
	if p.ClosedRow && a.Present && a.Ckpt < p.RestoredCkpt {
		s.metrics.Refused.WithLabelValues("put").Inc()
		return false, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	ix := sink.IndexKeyIn(s.scope, p.Epoch, p.Key)
	if a.Present && a.Ix != ix {
		_ = b.Delete(indexKey(p.Writer, a.Ix, p.Key), nil)
		s.metrics.IndexEntries.WithLabelValues("removed").Inc()
	}
	if !a.Present || a.Ix != ix {
		_ = b.Set(indexKey(p.Writer, ix, p.Key), nil, nil)
		s.metrics.IndexEntries.WithLabelValues("added").Inc()
	}
	if !found {
		_ = b.Set(bucketIndexKey(p.Key), nil, nil)
	}
	// An absolute SET of expires_at, as sink/dynamo writes it; Forever
	// leaves an earlier expiry as it is.
	exp = setExpiry(b, p.Key, exp, s.written(p.Bucket))
	*a = sink.Tagged{Present: true, Valid: p.Valid, SpendMicros: p.SpendMicros, Ckpt: p.Epoch, Ix: ix, Gen: p.Gen}
	it.JobGen, it.HasJobGen, it.Fence = p.Gen, true, p.Fence
	_ = b.Set(ikey, encodeRecord(&it, exp), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, fmt.Errorf("embedded: put %q/%q: %w", p.Entity, p.Bucket, err)
	}
	s.metrics.Writes.WithLabelValues("put").Inc()
	return true, nil
}

// PutFinal applies recount writes with the condition
// (attribute_not_exists(final_gen) OR final_gen <= Gen). It sets the final_*
// attributes only; job_gen, which fences the stream's job versions, is left
// as it is.
func (s *Store) PutFinal(ctx context.Context, puts []sink.FinalPut) (refused int, err error) {
	for _, p := range puts {
		if err := validKey(p.Key); err != nil {
			return 0, err
		}
	}
	refused, err = applyEach(ctx, s, "put final", puts, s.putFinalOne)
	if err != nil {
		return refused, err
	}
	return refused, s.expireDue(ctx)
}

// applyEach applies one conditional write per element (one returns false
// when the condition refused it), counts the refusals, and syncs the log
// once for the call.
func applyEach[T any](ctx context.Context, s *Store, op string, xs []T, one func(T) (bool, error)) (refused int, err error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	wrote := false
	for _, x := range xs {
		if err := ctx.Err(); err != nil {
			return refused, s.finish(wrote, fmt.Errorf("embedded: %s: %w", op, err))
		}
		ok, err := one(x)
		if err != nil {
			return refused, s.finish(wrote, err)
		}
		if ok {
			wrote = true
		} else {
			refused++
		}
	}
	return refused, s.finish(wrote, nil)
}

func (s *Store) putFinalOne(p sink.FinalPut) (bool, error) {
	ikey := itemKey(p.Key)
	mu := s.lock(ikey)
	defer mu.Unlock()
	it, exp, found, err := s.getRecord(p.Key, ikey)
	if err != nil {
		return false, err
	}
	if it.Final.Present && it.Final.Gen > p.Gen {
		s.metrics.Refused.WithLabelValues("put_final").Inc()
		return false, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	if !found {
		_ = b.Set(bucketIndexKey(p.Key), nil, nil)
	}
	// The recount sets an expiry only on a row that has none (DynamoDB's
	// if_not_exists): the stream's writes, under the job's retention, own it.
	if nexp := s.written(p.Bucket); !exp.set {
		exp = setExpiry(b, p.Key, exp, nexp)
	}
	it.Final = sink.FinalAttrs{Present: true, Valid: p.Valid, SpendMicros: p.SpendMicros, Gen: p.Gen, AtMs: p.AtMs}
	_ = b.Set(ikey, encodeRecord(&it, exp), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, fmt.Errorf("embedded: put final %q/%q: %w", p.Entity, p.Bucket, err)
	}
	s.metrics.Writes.WithLabelValues("put_final").Inc()
	return true, nil
}

// Get returns the item at k; ok is false if there is none.
func (s *Store) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	if err := ctx.Err(); err != nil {
		return sink.Item{}, false, fmt.Errorf("embedded: get: %w", err)
	}
	if err := s.enter(); err != nil {
		return sink.Item{}, false, err
	}
	defer s.gate.Leave()
	it, ok, err := s.getItem(k, itemKey(k))
	if !ok || err != nil {
		return sink.Item{}, false, err
	}
	return it, true, nil
}

// QueryIndex calls fn for every item whose <w>_ix equals ix in the store's
// scope (sink.ScopedIndexKey). It scans only the index entries of (w, ix),
// so its cost is proportional to the number of matches. fn may modify the
// store (the flush removes what it finds); an item changed since the scan
// started is re-read and passed to fn only if it still carries the tag.
func (s *Store) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	if err := validWriter(w); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	ix = sink.ScopedIndexKey(s.scope, ix)
	prefix := indexPrefix(w, ix)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("embedded: query index: %w", err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		s.indexSteps.Add(1)
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("embedded: query index: %w", err), iter.Close())
		}
		k, err := decodeKeySuffix(iter.Key()[len(prefix):])
		if err != nil {
			return errors.Join(fmt.Errorf("embedded: query index: %w", err), iter.Close())
		}
		it, ok, err := s.getItem(k, itemKey(k))
		if err != nil {
			return errors.Join(err, iter.Close())
		}
		if a := it.Attrs(w); !ok || !a.Present || a.Ix != ix {
			continue
		}
		if err := fn(it); err != nil {
			return errors.Join(err, iter.Close())
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("embedded: query index: %w", err)
	}
	return nil
}

// Remove removes w's attributes from k if <w>_ckpt equals ckpt; ok is false
// if the condition failed or there is no item. The item itself stays (with
// its job_gen), as DynamoDB's REMOVE leaves it.
func (s *Store) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	_, ok, err := s.removeOrDelete(ctx, k, w, ckpt, false, nil)
	return ok, err
}

// RemoveFenced is Remove under t (sink.FencedRows): refused if the item's
// job_gen is t.Gen and its wf is above t.Fence; if job_gen is t.Gen, wf
// becomes t.Fence.
func (s *Store) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	_, ok, err := s.removeOrDelete(ctx, k, w, ckpt, false, &t)
	return ok, err
}

// Delete deletes the item k if <w>_ckpt equals ckpt and the item carries no
// other writer's attributes (neither the other tagged writer's nor final_*);
// if it carries some, only w's attributes are removed, as Remove does.
func (s *Store) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	return s.removeOrDelete(ctx, k, w, ckpt, true, nil)
}

// DeleteFenced is Delete under t (sink.FencedRows), with the fence
// condition of RemoveFenced.
func (s *Store) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (deleted, ok bool, err error) {
	return s.removeOrDelete(ctx, k, w, ckpt, true, &t)
}

// removeOrDelete removes w's attributes, or deletes the item if del and
// nothing else is on it, under the fence of t if not nil.
func (s *Store) removeOrDelete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, del bool, t *sink.Token) (deleted, ok bool, err error) {
	op := "remove"
	if del {
		op = "delete"
	}
	if err := validWriter(w); err != nil {
		return false, false, err
	}
	if err := ctx.Err(); err != nil {
		return false, false, fmt.Errorf("embedded: %s: %w", op, err)
	}
	if err := s.enter(); err != nil {
		return false, false, err
	}
	defer s.gate.Leave()

	ikey := itemKey(k)
	mu := s.lock(ikey)
	defer mu.Unlock()
	it, exp, found, err := s.getRecord(k, ikey)
	if err != nil {
		return false, false, err
	}
	a := it.Attrs(w)
	sameGen := t != nil && it.HasJobGen && it.JobGen == t.Gen
	if !found || !a.Present || a.Ckpt != ckpt || sameGen && it.Fence > t.Fence {
		s.metrics.Refused.WithLabelValues(op).Inc()
		return false, false, nil
	}
	other := &it.Late
	if w == sink.Late {
		other = &it.Fast
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(indexKey(w, a.Ix, k), nil)
	s.metrics.IndexEntries.WithLabelValues("removed").Inc()
	if del && !other.Present && !it.Final.Present {
		_ = b.Delete(ikey, nil)
		_ = b.Delete(bucketIndexKey(k), nil)
		if exp.set {
			_ = b.Delete(expiryKey(exp.sec, k), nil)
		}
		deleted = true
	} else {
		*a = sink.Tagged{}
		if sameGen {
			it.Fence = t.Fence
		}
		_ = b.Set(ikey, encodeRecord(&it, exp), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, false, fmt.Errorf("embedded: %s %q/%q: %w", op, k.Entity, k.Bucket, err)
	}
	s.metrics.Writes.WithLabelValues(op).Inc()
	return deleted, true, s.sync()
}

// QueryBucket calls fn for the items of bucket after the entity after, in
// entity order, at most limit of them (limit < 1: all). It walks only the
// bucket's entries of the bucket index, from after on, so its cost is
// proportional to the items it returns. Each item is read when its entry
// is reached; fn may write to the store.
func (s *Store) QueryBucket(ctx context.Context, bucket, after string, limit int, fn func(sink.Item) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	prefix := bucketPrefix(bucket)
	lower := prefix
	if after != "" {
		lower = appendEsc(append([]byte(nil), prefix...), after)
	}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("embedded: query bucket: %w", err)
	}
	n := 0
	for valid := iter.First(); valid && (limit < 1 || n < limit); valid = iter.Next() {
		s.bucketSteps.Add(1)
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("embedded: query bucket: %w", err), iter.Close())
		}
		entity, rest, err := readEsc(iter.Key()[len(prefix):])
		if err != nil || len(rest) != 0 {
			return errors.Join(fmt.Errorf("embedded: query bucket: %w", errCorrupt), iter.Close())
		}
		if entity <= after {
			continue
		}
		k := sink.Key{Entity: entity, Bucket: bucket}
		it, ok, err := s.getItem(k, itemKey(k))
		if err != nil {
			return errors.Join(err, iter.Close())
		}
		if !ok {
			continue
		}
		if err := fn(it); err != nil {
			return errors.Join(err, iter.Close())
		}
		n++
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("embedded: query bucket: %w", err)
	}
	return nil
}

// now returns the time expiry is judged by: the clock's, or the data
// clock's (math.MinInt64 before any write).
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock.NowMs()
	}
	return s.newest.Load()
}

// expireDue runs an expiry pass if the clock has moved expiryEveryMs past
// the last one, unless another call is running one.
func (s *Store) expireDue(ctx context.Context) error {
	now := s.now()
	if now == math.MinInt64 || now < s.nextExpiry.Load() || !s.expireMu.TryLock() {
		return nil
	}
	defer s.expireMu.Unlock()
	n, err := s.Expire(ctx, now, expiryBatch)
	if err != nil {
		return err
	}
	next := now + expiryEveryMs
	if n >= expiryBatch {
		next = now // more are due: the next call goes on
	}
	s.nextExpiry.Store(next)
	return nil
}

// Expire deletes up to limit items (limit < 1: all) whose expires_at, in
// Unix seconds, is before nowMs (as DynamoDB's TTL deletes an item once
// the current time is past its expires_at), with their tag-index, bucket
// index and expiry entries, and returns how many it deleted. Each item is
// checked again under its lock, so an item written since with another
// expiry stays. It syncs once. Put and PutFinal call it by themselves as
// the store's clock advances (see Options.Clock); tests and tools call it
// with the time they choose.
func (s *Store) Expire(ctx context.Context, nowMs int64, limit int) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	sec := nowMs / 1000
	if nowMs < 0 && nowMs%1000 != 0 {
		sec-- // floor
	}
	lower := []byte{prefixExpiry}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: appendInt64([]byte{prefixExpiry}, sec)})
	if err != nil {
		return 0, fmt.Errorf("embedded: expire: %w", err)
	}
	type due struct {
		sec int64
		k   sink.Key
	}
	var todo []due
	for valid := iter.First(); valid && (limit < 1 || len(todo) < limit); valid = iter.Next() {
		at, k, err := decodeExpiryKey(iter.Key())
		if err != nil {
			return 0, errors.Join(fmt.Errorf("embedded: expire: %w", err), iter.Close())
		}
		todo = append(todo, due{at, k})
	}
	if err := iter.Close(); err != nil {
		return 0, fmt.Errorf("embedded: expire: %w", err)
	}
	n, wrote := 0, false
	for _, d := range todo {
		if err := ctx.Err(); err != nil {
			return n, s.finish(wrote, fmt.Errorf("embedded: expire: %w", err))
		}
		deleted, err := s.expireOne(d.k, d.sec)
		if err != nil {
			return n, s.finish(wrote, err)
		}
		wrote = true
		if deleted {
			n++
		}
	}
	return n, s.finish(wrote, nil)
}

// expireOne deletes the item k if its expiry is still sec, or else only
// the stale queue entry.
func (s *Store) expireOne(k sink.Key, sec int64) (bool, error) {
	ikey := itemKey(k)
	mu := s.lock(ikey)
	defer mu.Unlock()
	it, exp, found, err := s.getRecord(k, ikey)
	if err != nil {
		return false, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(expiryKey(sec, k), nil)
	deleted := found && exp.set && exp.sec == sec
	if deleted {
		_ = b.Delete(ikey, nil)
		_ = b.Delete(bucketIndexKey(k), nil)
		for _, w := range sink.TaggedWriters {
			if a := it.Attrs(w); a.Present {
				_ = b.Delete(indexKey(w, a.Ix, k), nil)
				s.metrics.IndexEntries.WithLabelValues("removed").Inc()
			}
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, fmt.Errorf("embedded: expire %q/%q: %w", k.Entity, k.Bucket, err)
	}
	if deleted {
		s.metrics.Writes.WithLabelValues("expire").Inc()
	}
	return deleted, nil
}

// Scan calls fn for every item, in (entity, bucket) order.
func (s *Store) Scan(ctx context.Context, fn func(sink.Item) error) error {
	return s.ScanOrdered(ctx, fn)
}

// ScanOrdered calls fn for every item in (entity, bucket) order (byte order
// of the strings). It reads a consistent snapshot taken when it starts; fn
// may write to the store.
func (s *Store) ScanOrdered(ctx context.Context, fn func(sink.Item) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	lower := []byte{prefixItem}
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("embedded: scan: %w", err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("embedded: scan: %w", err), iter.Close())
		}
		k, err := decodeItemKey(iter.Key())
		if err != nil {
			return errors.Join(fmt.Errorf("embedded: scan: %w", err), iter.Close())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return errors.Join(fmt.Errorf("embedded: scan: %w", err), iter.Close())
		}
		it, err := decodeItem(k, v)
		if err != nil {
			return errors.Join(err, iter.Close())
		}
		if err := fn(it); err != nil {
			return errors.Join(err, iter.Close())
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("embedded: scan: %w", err)
	}
	return nil
}

// Opener returns a function that opens the store in dir as both the row
// store and the running-total store, for runtime.Config.OpenSinks: the job
// opens it once it holds its data dir, and closes it with the job.
func Opener(dir string, o Options) func() (sink.Rows, sink.Totals, io.Closer, error) {
	return func() (sink.Rows, sink.Totals, io.Closer, error) {
		s, err := Open(dir, o)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("embedded: open %s: %w", dir, err)
		}
		return s, s, s, nil
	}
}
