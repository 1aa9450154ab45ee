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
	// tokens holds the token of each total's last write; absent: the zero
	// token.
	tokens map[sink.TotalKey]sink.Token
	// refused counts the writes and deletes refused by a stored token.
	refused int
	// epochs holds the records of each scope ("" unscoped), by epoch.
	epochs map[string]map[int64]map[sink.TotalKey]struct{}
}

var _ sink.FencedTotals = (*MemTotals)(nil)

// NewMemTotals returns an empty in-memory totals store.
func NewMemTotals() *MemTotals {
	return &MemTotals{memTotals: &memTotals{
		totals: map[sink.TotalKey]sink.Total{},
		tokens: map[sink.TotalKey]sink.Token{},
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

// SetTotals is SetTotalsFenced under the zero token.
func (m *MemTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	_, err := m.SetTotalsFenced(ctx, ts, sink.Token{})
	return err
}

// SetTotalsFenced stores the totals (absolute values, the last one for a
// key wins) with t, except those stored under a token above t, and records
// every key under its epoch, as sink/valkey does.
func (m *MemTotals) SetTotalsFenced(ctx context.Context, ts []sink.Total, t sink.Token) (refused int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := sink.ValidFence(t.Fence); err != nil {
		return 0, fmt.Errorf("sinktest: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	eps := m.scoped(len(ts) > 0)
	for _, x := range ts {
		k := x.Key()
		ep := eps[x.Epoch]
		if ep == nil {
			ep = map[sink.TotalKey]struct{}{}
			eps[x.Epoch] = ep
		}
		ep[k] = struct{}{}
		if t.Less(m.tokens[k]) {
			refused++
			continue
		}
		m.totals[k] = x
		m.tokens[k] = t
	}
	m.refused += refused
	return refused, nil
}

// Token returns the token of the last write of the total at k; ok is false
// if there is no total.
func (m *MemTotals) Token(k sink.TotalKey) (t sink.Token, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.totals[k]; !ok {
		return sink.Token{}, false
	}
	return m.tokens[k], true
}

// Refused returns the number of writes and deletes refused by a stored
// token so far, through every view.
func (m *MemTotals) Refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
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

// DeleteTotals is DeleteTotalsFenced under the zero token.
func (m *MemTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	_, err := m.DeleteTotalsFenced(ctx, keys, sink.Token{})
	return err
}

// DeleteTotalsFenced deletes the totals, except those stored under a token
// above t, and drops the deleted keys from every epoch of m's scope.
func (m *MemTotals) DeleteTotalsFenced(ctx context.Context, keys []sink.TotalKey, t sink.Token) (refused int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := sink.ValidFence(t.Fence); err != nil {
		return 0, fmt.Errorf("sinktest: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	eps := m.scoped(false)
	for _, k := range keys {
		if t.Less(m.tokens[k]) {
			refused++
			continue
		}
		delete(m.totals, k)
		delete(m.tokens, k)
		for e, ep := range eps {
			delete(ep, k)
			if len(ep) == 0 {
				delete(eps, e)
			}
		}
	}
	m.refused += refused
	return refused, nil
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
