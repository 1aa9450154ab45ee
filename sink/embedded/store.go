package embedded

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/internal/pebbleutil"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
)

var (
	_ sink.Rows   = (*Store)(nil)
	_ sink.Totals = (*Store)(nil)
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
	// MemTableSize is Pebble's memtable size in bytes. Default 8 MiB.
	MemTableSize uint64
	// NoSync skips the write-ahead-log sync at the end of each mutating call.
	// Writes then survive Close but not a crash. Default false (sync); meant
	// for throwaway stores in tests and benchmarks only.
	NoSync bool
}

const (
	defaultCacheSize    = 16 << 20
	defaultMemTableSize = 64 << 20
	lockStripes         = 256
)

// Store is the embedded ad_metrics table and running-total store on Pebble.
// It implements sink.Rows and sink.Totals. All methods are safe for
// concurrent use.
type Store struct {
	db      *pebble.DB
	noSync  bool
	metrics *Metrics
	seed    maphash.Seed
	locks   [lockStripes]sync.Mutex

	gate pebbleutil.Gate

	// Running totals are written back: kept in memory and written to disk
	// by Sync (see totals.go).
	tot totalsBuffer

	// indexSteps counts index iterator steps (for tests of QueryIndex cost).
	indexSteps atomic.Int64
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = defaultMemTableSize
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
	return &Store{db: db, noSync: o.NoSync, metrics: m, seed: maphash.MakeSeed(), gate: pebbleutil.Gate{Closed: ErrClosed}}, nil
}

// Metrics returns the store's metrics.
func (s *Store) Metrics() *Metrics { return s.metrics }

// Close waits for running calls, syncs and closes the store. Later calls
// return ErrClosed.
func (s *Store) Close() error {
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
	v, closer, err := s.db.Get(ikey)
	if errors.Is(err, pebble.ErrNotFound) {
		return sink.Item{Key: k}, false, nil
	}
	if err != nil {
		return sink.Item{}, false, fmt.Errorf("embedded: get %q/%q: %w", k.Entity, k.Bucket, err)
	}
	it, derr := decodeItem(k, v)
	cerr := closer.Close()
	if derr != nil {
		return sink.Item{}, false, derr
	}
	if cerr != nil {
		return sink.Item{}, false, fmt.Errorf("embedded: get %q/%q: %w", k.Entity, k.Bucket, cerr)
	}
	return it, true, nil
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

// Put applies tagged writes with the conditions of sink.Put: job_gen fencing
// and, for closed rows, the closed-row condition. Refused writes are counted
// and not retried. The inputs are validated before anything is written.
func (s *Store) Put(ctx context.Context, puts []sink.Put) (refused int, err error) {
	for _, p := range puts {
		if err := validKey(p.Key); err != nil {
			return 0, err
		}
		if err := validWriter(p.Writer); err != nil {
			return 0, err
		}
	}
	return applyEach(ctx, s, "put", puts, s.putOne)
}

func (s *Store) putOne(p sink.Put) (bool, error) {
	ikey := itemKey(p.Key)
	mu := s.lock(ikey)
	defer mu.Unlock()
	it, _, err := s.getItem(p.Key, ikey)
	if err != nil {
		return false, err
	}
	a := it.Attrs(p.Writer)
	if it.HasJobGen && it.JobGen > p.Gen {
		s.metrics.Refused.WithLabelValues("put").Inc()
		return false, nil
	}
	if p.ClosedRow && a.Present && a.Ckpt < p.RestoredCkpt {
		s.metrics.Refused.WithLabelValues("put").Inc()
		return false, nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	ix := sink.IndexKey(p.Epoch, p.Key)
	if a.Present && a.Ix != ix {
		_ = b.Delete(indexKey(p.Writer, a.Ix, p.Key), nil)
		s.metrics.IndexEntries.WithLabelValues("removed").Inc()
	}
	if !a.Present || a.Ix != ix {
		_ = b.Set(indexKey(p.Writer, ix, p.Key), nil, nil)
		s.metrics.IndexEntries.WithLabelValues("added").Inc()
	}
	*a = sink.Tagged{Present: true, Valid: p.Valid, SpendMicros: p.SpendMicros, Ckpt: p.Epoch, Ix: ix, Gen: p.Gen}
	it.JobGen, it.HasJobGen = p.Gen, true
	_ = b.Set(ikey, encodeItem(&it), nil)
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
	return applyEach(ctx, s, "put final", puts, s.putFinalOne)
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
	it, _, err := s.getItem(p.Key, ikey)
	if err != nil {
		return false, err
	}
	if it.Final.Present && it.Final.Gen > p.Gen {
		s.metrics.Refused.WithLabelValues("put_final").Inc()
		return false, nil
	}
	it.Final = sink.FinalAttrs{Present: true, Valid: p.Valid, SpendMicros: p.SpendMicros, Gen: p.Gen, AtMs: p.AtMs}
	if err := s.db.Set(ikey, encodeItem(&it), pebble.NoSync); err != nil {
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

// QueryIndex calls fn for every item whose <w>_ix equals ix. It scans only the
// index entries of (w, ix), so its cost is proportional to the number of
// matches. fn may modify the store (the flush removes what it finds); an
// item changed since the scan started is re-read and passed to fn only if it
// still carries the tag.
func (s *Store) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	if err := validWriter(w); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
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
	_, ok, err := s.removeOrDelete(ctx, k, w, ckpt, false)
	return ok, err
}

// Delete deletes the item k if <w>_ckpt equals ckpt and the item carries no
// other writer's attributes (neither the other tagged writer's nor final_*);
// if it carries some, only w's attributes are removed, as Remove does.
func (s *Store) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	return s.removeOrDelete(ctx, k, w, ckpt, true)
}

func (s *Store) removeOrDelete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, del bool) (deleted, ok bool, err error) {
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
	it, found, err := s.getItem(k, ikey)
	if err != nil {
		return false, false, err
	}
	a := it.Attrs(w)
	if !found || !a.Present || a.Ckpt != ckpt {
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
		deleted = true
	} else {
		*a = sink.Tagged{}
		_ = b.Set(ikey, encodeItem(&it), nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, false, fmt.Errorf("embedded: %s %q/%q: %w", op, k.Entity, k.Bucket, err)
	}
	s.metrics.Writes.WithLabelValues(op).Inc()
	return deleted, true, s.sync()
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
