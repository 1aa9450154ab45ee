package sinktest

import (
	"context"
	"fmt"
	"sync"

	"github.com/adclick/adclick/sink"
)

// MemTotals is an in-memory sink.Totals. It keeps every key written under
// every epoch until DeleteTotals or ForgetEpochs drops it, as the Totals
// suite requires. It is safe for concurrent use; the zero value is not
// usable, use NewMemTotals. A MemTotals may be a view with an index scope
// (Scoped).
type MemTotals struct {
	*memTotals
	scope string
}

// memTotals is what a MemTotals and its views share.
type memTotals struct {
	mu     sync.Mutex
	totals map[sink.TotalKey]sink.Total
	// epochs holds the records of each scope ("" unscoped), by epoch.
	epochs map[string]map[int64]map[sink.TotalKey]struct{}
}

var _ sink.Totals = (*MemTotals)(nil)

// NewMemTotals returns an empty in-memory totals store.
func NewMemTotals() *MemTotals {
	return &MemTotals{memTotals: &memTotals{
		totals: map[sink.TotalKey]sink.Total{},
		epochs: map[string]map[int64]map[sink.TotalKey]struct{}{},
	}}
}

// Scoped returns a view of m with the index scope scope: it shares m's
// totals and keeps its own epoch records, which its SetTotals writes, its
// TotalsWritten lists, and its ForgetEpochs and DeleteTotals drop. Scopes
// do not nest.
func (m *MemTotals) Scoped(scope string) (*MemTotals, error) {
	if err := sink.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("sinktest: %w", err)
	}
	return &MemTotals{memTotals: m.memTotals, scope: scope}, nil
}

// Scope returns m's index scope, "" when unscoped.
func (m *MemTotals) Scope() string { return m.scope }

// scoped returns the epoch records of m's scope, creating them if asked.
// The caller holds m.mu.
func (m *MemTotals) scoped(create bool) map[int64]map[sink.TotalKey]struct{} {
	eps := m.epochs[m.scope]
	if eps == nil && create {
		eps = map[int64]map[sink.TotalKey]struct{}{}
		m.epochs[m.scope] = eps
	}
	return eps
}

// SetTotals stores the totals (absolute values, the last one for a key
// wins) and records each key under its epoch.
func (m *MemTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	eps := m.scoped(len(ts) > 0)
	for _, t := range ts {
		k := t.Key()
		m.totals[k] = t
		ep := eps[t.Epoch]
		if ep == nil {
			ep = map[sink.TotalKey]struct{}{}
			eps[t.Epoch] = ep
		}
		ep[k] = struct{}{}
	}
	return nil
}

// TotalsWritten calls fn for every key recorded under epoch in m's scope,
// in no particular order, without holding the lock: fn may call back into
// m.
func (m *MemTotals) TotalsWritten(ctx context.Context, epoch int64, fn func(sink.TotalKey) error) error {
	m.mu.Lock()
	ep := m.scoped(false)[epoch]
	ks := make([]sink.TotalKey, 0, len(ep))
	for k := range ep {
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

// DeleteTotals deletes the totals and drops the keys from every epoch of
// m's scope.
func (m *MemTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.totals, k)
	}
	eps := m.scoped(false)
	for e, ep := range eps {
		for _, k := range keys {
			delete(ep, k)
		}
		if len(ep) == 0 {
			delete(eps, e)
		}
	}
	return nil
}

// ForgetEpochs drops the records of the epochs in [from, to) of m's scope;
// the totals stay.
func (m *MemTotals) ForgetEpochs(ctx context.Context, from, to int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	eps := m.scoped(false)
	for e := range eps {
		if e >= from && e < to {
			delete(eps, e)
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
