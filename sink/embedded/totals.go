package embedded

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/adclick/adclick/sink"
)

// totalsBuffer holds running totals not yet on disk. Like Valkey, the
// running totals are a cache for dashboards: SetTotals only updates memory,
// and Sync writes what changed (values and epoch records) in one batch. The
// runtime calls Sync while the graph is stopped at every checkpoint, before
// the checkpoint completes, so every total set before a checkpoint's
// barrier is on disk before that checkpoint can be restored; totals set
// later are lost with a crash, and the flush after the restore rewrites
// what restored state implies.
type totalsBuffer struct {
	mu       sync.Mutex
	vals     totalsPending
	flushing totalsPending // being written by Sync; still visible to readers
	// syncMu orders Sync against DeleteTotals, ForgetEpochs and
	// TotalsWritten, which read or change what Sync writes.
	syncMu sync.Mutex
}

// totalsPending maps a key to its latest total and the epochs it was set
// in: one map operation per SetTotals entry.
type totalsPending map[sink.TotalKey]*pendingTotal

type pendingTotal struct {
	t      sink.Total
	epochs []scopedEpoch  // distinct, in the order first set; usually one
	one    [1]scopedEpoch // epochs' first backing array: no allocation for one epoch
}

// scopedEpoch is an epoch record of a view's scope ("" unscoped).
type scopedEpoch struct {
	scope string
	epoch int64
}

func (p *pendingTotal) addEpoch(e scopedEpoch) {
	if n := len(p.epochs); n > 0 && p.epochs[n-1] == e {
		return
	}
	if !slices.Contains(p.epochs, e) {
		p.epochs = append(p.epochs, e)
	}
}

// SetTotals records absolute totals and each key under its epoch
// (t.Epoch) in the store's scope, in memory; Sync makes them durable.
// Within a call, and across calls and views, the last total for a key
// wins, as in Valkey.
func (s *Store) SetTotals(ctx context.Context, ts []sink.Total) error {
	for _, t := range ts {
		if t.Ad == "" {
			return errors.New("embedded: set totals: empty ad")
		}
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("embedded: set totals: %w", err)
	}
	b := &s.tot
	b.mu.Lock()
	if b.vals == nil {
		b.vals = make(totalsPending)
	}
	for _, t := range ts {
		k := t.Key()
		e := scopedEpoch{s.scope, t.Epoch}
		if p := b.vals[k]; p != nil {
			p.t = t
			p.addEpoch(e)
			continue
		}
		p := &pendingTotal{t: t}
		p.epochs = p.one[:0]
		b.vals[k] = p
		p.addEpoch(e)
	}
	b.mu.Unlock()
	s.metrics.Writes.WithLabelValues("set_total").Add(float64(len(ts)))
	return nil
}

// Sync writes the running totals set since the last Sync, with their epoch
// records, to disk in one atomic batch. It is safe to call at any time.
func (s *Store) Sync(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	b := &s.tot
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	b.mu.Lock()
	p := b.vals
	b.vals = nil
	b.flushing = p
	b.mu.Unlock()
	err := s.writeTotals(ctx, p)
	b.mu.Lock()
	if err != nil {
		// Put them back under anything set meanwhile (which is newer), keeping
		// every epoch either recorded.
		if b.vals == nil {
			b.vals = make(totalsPending)
		}
		for k, old := range p {
			cur := b.vals[k]
			if cur == nil {
				b.vals[k] = old
				continue
			}
			for _, e := range cur.epochs {
				old.addEpoch(e)
			}
			old.t = cur.t
			b.vals[k] = old
		}
	}
	b.flushing = nil
	b.mu.Unlock()
	return err
}

func (s *Store) writeTotals(ctx context.Context, p totalsPending) error {
	if len(p) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("embedded: sync totals: %w", err)
	}
	batch := s.db.NewBatch()
	defer batch.Close()
	for k, pt := range p {
		_ = batch.Set(totalKey(k), encodeTotal(pt.t), nil)
		for _, e := range pt.epochs {
			_ = batch.Set(epochKey(e.scope, e.epoch, k), nil, nil)
			_ = batch.Set(reverseKey(e.scope, k, e.epoch), nil, nil)
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("embedded: sync totals: %w", err)
	}
	return s.finish(true, nil)
}

// pendingTotal returns a total set but not yet on disk.
func (s *Store) pendingTotal(k sink.TotalKey) (sink.Total, bool) {
	b := &s.tot
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.vals[k]; p != nil {
		return p.t, true
	}
	if p := b.flushing[k]; p != nil {
		return p.t, true
	}
	return sink.Total{}, false
}

// TotalsWritten calls fn for every total key recorded under epoch in the
// store's scope, in key order. fn may write to the store.
func (s *Store) TotalsWritten(ctx context.Context, epoch int64, fn func(sink.TotalKey) error) error {
	// Pending totals first go to disk, so that one ordered scan sees all.
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	prefix := epochPrefix(s.scope, epoch)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("embedded: totals written: %w", err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("embedded: totals written: %w", err), iter.Close())
		}
		k, rest, err := readTotalKey(iter.Key()[len(prefix):])
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		if err != nil {
			return errors.Join(fmt.Errorf("embedded: totals written: %w", err), iter.Close())
		}
		if err := fn(k); err != nil {
			return errors.Join(err, iter.Close())
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("embedded: totals written: %w", err)
	}
	return nil
}

// DeleteTotals deletes the totals and forgets them from every epoch of the
// store's scope that recorded them (records of other scopes stay).
// Deleting a missing total is not an error.
func (s *Store) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	s.tot.syncMu.Lock()
	defer s.tot.syncMu.Unlock()
	s.forgetPending(keys)
	wrote := false
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return s.finish(wrote, fmt.Errorf("embedded: delete totals: %w", err))
		}
		did, err := s.deleteTotal(k)
		if err != nil {
			return s.finish(wrote, err)
		}
		wrote = wrote || did
	}
	return s.finish(wrote, nil)
}

func (s *Store) deleteTotal(k sink.TotalKey) (bool, error) {
	tkey := totalKey(k)
	mu := s.lock(tkey)
	defer mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	prefix := reversePrefix(s.scope, k)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return false, fmt.Errorf("embedded: delete total %q: %w", k.Ad, err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		epoch, rest, err := readInt64(iter.Key()[len(prefix):])
		if err != nil || len(rest) != 0 {
			return false, errors.Join(fmt.Errorf("embedded: delete total %q: %w", k.Ad, errCorrupt), iter.Close())
		}
		_ = b.Delete(iter.Key(), nil)
		_ = b.Delete(epochKey(s.scope, epoch, k), nil)
	}
	if err := iter.Close(); err != nil {
		return false, fmt.Errorf("embedded: delete total %q: %w", k.Ad, err)
	}
	_, closer, err := s.db.Get(tkey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if b.Empty() {
			return false, nil
		}
	case err != nil:
		return false, fmt.Errorf("embedded: delete total %q: %w", k.Ad, err)
	default:
		_ = closer.Close()
		_ = b.Delete(tkey, nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return false, fmt.Errorf("embedded: delete total %q: %w", k.Ad, err)
	}
	s.metrics.Writes.WithLabelValues("delete_total").Inc()
	return true, nil
}

// ForgetEpochs drops the bookkeeping of epochs in [from, to) of the
// store's scope; the totals themselves, and other scopes' records, stay.
func (s *Store) ForgetEpochs(ctx context.Context, from, to int64) error {
	if from >= to {
		return nil
	}
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	s.tot.syncMu.Lock()
	defer s.tot.syncMu.Unlock()
	s.tot.mu.Lock()
	for _, p := range s.tot.vals {
		p.epochs = slices.DeleteFunc(p.epochs, func(e scopedEpoch) bool {
			return e.scope == s.scope && e.epoch >= from && e.epoch < to
		})
	}
	s.tot.mu.Unlock()
	space := epochSpace(s.scope)
	lower, upper := epochPrefix(s.scope, from), epochPrefix(s.scope, to)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("embedded: forget epochs: %w", err)
	}
	b := s.db.NewBatch()
	defer func() { _ = b.Close() }()
	wrote := false
	commit := func() error {
		if b.Empty() {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return fmt.Errorf("embedded: forget epochs: %w", err)
		}
		wrote = true
		_ = b.Close()
		b = s.db.NewBatch()
		return nil
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		if err := ctx.Err(); err != nil {
			cerr := commit()
			return s.finish(wrote, errors.Join(fmt.Errorf("embedded: forget epochs: %w", err), cerr, iter.Close()))
		}
		key := iter.Key()
		epoch, rest, err := readInt64(key[len(space):])
		var k sink.TotalKey
		if err == nil {
			k, rest, err = readTotalKey(rest)
		}
		if err == nil && len(rest) != 0 {
			err = errCorrupt
		}
		if err != nil {
			return s.finish(wrote, errors.Join(fmt.Errorf("embedded: forget epochs: %w", err), iter.Close()))
		}
		_ = b.Delete(key, nil)
		_ = b.Delete(reverseKey(s.scope, k, epoch), nil)
		if b.Len() > 1<<20 {
			if err := commit(); err != nil {
				return s.finish(wrote, errors.Join(err, iter.Close()))
			}
		}
	}
	if err := iter.Close(); err != nil {
		return s.finish(wrote, fmt.Errorf("embedded: forget epochs: %w", err))
	}
	cerr := commit()
	return s.finish(wrote, cerr)
}

// GetTotal returns a total; ok is false if there is none.
func (s *Store) GetTotal(ctx context.Context, k sink.TotalKey) (sink.Total, bool, error) {
	if err := ctx.Err(); err != nil {
		return sink.Total{}, false, fmt.Errorf("embedded: get total: %w", err)
	}
	if err := s.enter(); err != nil {
		return sink.Total{}, false, err
	}
	defer s.gate.Leave()
	if t, ok := s.pendingTotal(k); ok {
		return t, true, nil
	}
	v, closer, err := s.db.Get(totalKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return sink.Total{}, false, nil
	}
	if err != nil {
		return sink.Total{}, false, fmt.Errorf("embedded: get total %q: %w", k.Ad, err)
	}
	t, derr := decodeTotal(k, v)
	_ = closer.Close()
	if derr != nil {
		return sink.Total{}, false, derr
	}
	return t, true, nil
}

// forgetPending drops keys from the totals not yet on disk (a DeleteTotals
// racing a SetTotals of the same key; the runtime does not do that).
func (s *Store) forgetPending(keys []sink.TotalKey) {
	b := &s.tot
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		delete(b.vals, k)
	}
}
