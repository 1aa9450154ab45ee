package sinktest

import (
	"context"
	"sync"

	"github.com/adclick/adclick/sink"
)

// MemTotals is an in-memory sink.Totals. It keeps every key written under
// every epoch until DeleteTotals or ForgetEpochs drops it, as the Totals
// suite requires. It is safe for concurrent use; the zero value is not
// usable, use NewMemTotals.
type MemTotals struct {
	mu     sync.Mutex
	totals map[sink.TotalKey]sink.Total
	epochs map[int64]map[sink.TotalKey]struct{}
}

var _ sink.Totals = (*MemTotals)(nil)

// NewMemTotals returns an empty in-memory totals store.
func NewMemTotals() *MemTotals {
	return &MemTotals{
		totals: map[sink.TotalKey]sink.Total{},
		epochs: map[int64]map[sink.TotalKey]struct{}{},
	}
}

// SetTotals stores the totals (absolute values, the last one for a key
// wins) and records each key under its epoch.
func (m *MemTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range ts {
		k := t.Key()
		m.totals[k] = t
		ep := m.epochs[t.Epoch]
		if ep == nil {
			ep = map[sink.TotalKey]struct{}{}
			m.epochs[t.Epoch] = ep
		}
		ep[k] = struct{}{}
	}
	return nil
}

// TotalsWritten calls fn for every key recorded under epoch, in no
// particular order, without holding the lock: fn may call back into m.
func (m *MemTotals) TotalsWritten(ctx context.Context, epoch int64, fn func(sink.TotalKey) error) error {
	m.mu.Lock()
	ks := make([]sink.TotalKey, 0, len(m.epochs[epoch]))
	for k := range m.epochs[epoch] {
		ks = append(ks, k)
	}
	m.mu.Unlock()
	for _, k := range ks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

// DeleteTotals deletes the totals and drops the keys from every epoch.
func (m *MemTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.totals, k)
	}
	for e, ep := range m.epochs {
		for _, k := range keys {
			delete(ep, k)
		}
		if len(ep) == 0 {
			delete(m.epochs, e)
		}
	}
	return nil
}

// ForgetEpochs drops the records of the epochs in [from, to); the totals
// stay.
func (m *MemTotals) ForgetEpochs(ctx context.Context, from, to int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for e := range m.epochs {
		if e >= from && e < to {
			delete(m.epochs, e)
		}
	}
	return nil
}

// GetTotal returns the total at k; ok is false if there is none.
func (m *MemTotals) GetTotal(ctx context.Context, k sink.TotalKey) (sink.Total, bool, error) {
	if err := ctx.Err(); err != nil {
		return sink.Total{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.totals[k]
	return t, ok, nil
}
