package embedded

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/adclick/adclick/sink"
)

// SetTotals writes absolute totals and records each key under its epoch
// (t.Epoch). Each total is written atomically with its epoch entries.
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
		return s.finish(false, fmt.Errorf("embedded: set totals: %w", err))
	}
	// One batch for the call: it commits atomically, so a reader never sees
	// a value without its epoch records; within it the last total for a
	// key wins, as in Valkey.
	b := s.db.NewBatch()
	defer b.Close()
	for _, t := range ts {
		k := t.Key()
		_ = b.Set(totalKey(k), encodeTotal(t), nil)
		_ = b.Set(epochKey(t.Epoch, k), nil, nil)
		_ = b.Set(reverseKey(k, t.Epoch), nil, nil)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return s.finish(false, fmt.Errorf("embedded: set totals: %w", err))
	}
	s.metrics.Writes.WithLabelValues("set_total").Add(float64(len(ts)))
	return s.finish(len(ts) > 0, nil)
}

// TotalsWritten calls fn for every total key recorded under epoch, in key
// order. fn may write to the store.
func (s *Store) TotalsWritten(ctx context.Context, epoch int64, fn func(sink.TotalKey) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	prefix := epochPrefix(epoch)
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

// DeleteTotals deletes the totals and forgets them from every epoch that
// recorded them. Deleting a missing total is not an error.
func (s *Store) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
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
	prefix := reversePrefix(k)
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
		_ = b.Delete(epochKey(epoch, k), nil)
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

// ForgetEpochs drops the bookkeeping of epochs in [from, to); the totals
// themselves stay.
func (s *Store) ForgetEpochs(ctx context.Context, from, to int64) error {
	if from >= to {
		return nil
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.gate.Leave()
	lower, upper := epochPrefix(from), epochPrefix(to)
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
		epoch, rest, err := readInt64(key[1:])
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
		_ = b.Delete(reverseKey(k, epoch), nil)
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
