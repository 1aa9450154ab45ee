package sinktest

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/adclick/adclick/sink"
)

// MemRows is an in-memory sink.Rows guarded by one mutex. Every method is
// atomic with respect to the others, so conditions hold exactly as a
// DynamoDB condition expression would. It is safe for concurrent use. A
// MemRows may be a view with an index scope (Scoped).
type MemRows struct {
	*memRows
	scope string
}

// memRows is what a MemRows and its views share.
type memRows struct {
	mu    sync.Mutex
	items map[sink.Key]sink.Item
}

var _ sink.FencedRows = (*MemRows)(nil)

// NewMemRows returns an empty in-memory store.
func NewMemRows() *MemRows {
	return &MemRows{memRows: &memRows{items: map[sink.Key]sink.Item{}}}
}

// Scoped returns a view of m with the index scope scope, sharing its
// items: the view's Put writes sink.IndexKeyIn(scope, ...) and its
// QueryIndex(w, ix) matches sink.ScopedIndexKey(scope, ix). Scopes do not
// nest.
func (m *MemRows) Scoped(scope string) (*MemRows, error) {
	if err := sink.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("sinktest: %w", err)
	}
	return &MemRows{memRows: m.memRows, scope: scope}, nil
}

// Scope returns m's index scope, "" when unscoped.
func (m *MemRows) Scope() string { return m.scope }

func checkTagged(op string, w sink.Writer) error {
	if w != sink.Fast && w != sink.Late {
		return fmt.Errorf("sinktest: %s: writer %v is not a tagged writer (fast or late)", op, w)
	}
	return nil
}

// Put applies the writes in order, each under the conditions of sink.Put.
func (m *MemRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	for _, p := range puts {
		if err := checkTagged("put", p.Writer); err != nil {
			return 0, err
		}
		if err := sink.ValidFence(p.Fence); err != nil {
			return 0, fmt.Errorf("sinktest: put: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sinktest: put: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	refused := 0
	for _, p := range puts {
		it, ok := m.items[p.Key]
		if !ok {
			it = sink.Item{Key: p.Key}
		}
		a := it.Attrs(p.Writer)
		if it.HasJobGen && (it.JobGen > p.Gen || it.JobGen == p.Gen && it.Fence > p.Fence) {
			refused++
			continue
		}
		if p.ClosedRow && a.Present && a.Ckpt < p.RestoredCkpt {
			refused++
			continue
		}
		*a = sink.Tagged{
			Present:     true,
			Valid:       p.Valid,
			SpendMicros: p.SpendMicros,
			Ckpt:        p.Epoch,
			Ix:          sink.IndexKeyIn(m.scope, p.Epoch, p.Key),
			Gen:         p.Gen,
		}
		it.JobGen, it.HasJobGen, it.Fence = p.Gen, true, p.Fence
		m.items[p.Key] = it
	}
	return refused, nil
}

// PutFinal applies the recount writes in order under the final_gen
// condition. It leaves job_gen alone.
func (m *MemRows) PutFinal(ctx context.Context, puts []sink.FinalPut) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sinktest: put final: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	refused := 0
	for _, p := range puts {
		it, ok := m.items[p.Key]
		if !ok {
			it = sink.Item{Key: p.Key}
		}
		if it.Final.Present && it.Final.Gen > p.Gen {
			refused++
			continue
		}
		it.Final = sink.FinalAttrs{Present: true, Valid: p.Valid, SpendMicros: p.SpendMicros, Gen: p.Gen, AtMs: p.AtMs}
		m.items[p.Key] = it
	}
	return refused, nil
}

// Get returns the item at k.
func (m *MemRows) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	if err := ctx.Err(); err != nil {
		return sink.Item{}, false, fmt.Errorf("sinktest: get: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[k]
	return it, ok, nil
}

// QueryIndex calls fn, without holding the lock, for a snapshot of the items
// whose <w>_ix equals ix in m's scope.
func (m *MemRows) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	if err := checkTagged("query index", w); err != nil {
		return err
	}
	ix = sink.ScopedIndexKey(m.scope, ix)
	return m.each(ctx, func(it *sink.Item) bool {
		a := it.Attrs(w)
		return a.Present && a.Ix == ix
	}, fn)
}

// QueryBucket calls fn, without holding the lock, for a snapshot of the
// items of bucket after the entity after, in entity order, at most limit
// of them (limit < 1: all).
func (m *MemRows) QueryBucket(ctx context.Context, bucket, after string, limit int, fn func(sink.Item) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sinktest: query bucket: %w", err)
	}
	m.mu.Lock()
	var out []sink.Item
	for _, it := range m.items {
		if it.Bucket == bucket && it.Entity > after {
			out = append(out, it)
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Entity < out[j].Entity })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	for _, it := range out {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// Scan calls fn, without holding the lock, for a snapshot of every item.
func (m *MemRows) Scan(ctx context.Context, fn func(sink.Item) error) error {
	return m.each(ctx, func(*sink.Item) bool { return true }, fn)
}

func (m *MemRows) each(ctx context.Context, match func(*sink.Item) bool, fn func(sink.Item) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sinktest: read: %w", err)
	}
	m.mu.Lock()
	var out []sink.Item
	for _, it := range m.items {
		if match(&it) {
			out = append(out, it)
		}
	}
	m.mu.Unlock()
	for _, it := range out {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes w's attributes from k if <w>_ckpt equals ckpt.
func (m *MemRows) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	return m.remove(ctx, k, w, ckpt, nil)
}

// RemoveFenced is Remove under t (sink.FencedRows).
func (m *MemRows) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	return m.remove(ctx, k, w, ckpt, &t)
}

func (m *MemRows) remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t *sink.Token) (bool, error) {
	if err := checkTagged("remove", w); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("sinktest: remove: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.removeLocked(k, w, ckpt, t), nil
}

// fencedOut reports whether t's fence is below the item's wf, in t's
// generation; a nil t is never fenced out.
func fencedOut(it *sink.Item, t *sink.Token) bool {
	return t != nil && it.HasJobGen && it.JobGen == t.Gen && it.Fence > t.Fence
}

func (m *MemRows) removeLocked(k sink.Key, w sink.Writer, ckpt int64, t *sink.Token) bool {
	it, ok := m.items[k]
	if !ok {
		return false
	}
	a := it.Attrs(w)
	if !a.Present || a.Ckpt != ckpt || fencedOut(&it, t) {
		return false
	}
	*a = sink.Tagged{}
	if t != nil && it.HasJobGen && it.JobGen == t.Gen {
		it.Fence = t.Fence
	}
	m.items[k] = it
	return true
}

// Delete deletes k if <w>_ckpt equals ckpt and no other writer's attributes
// are present; otherwise it removes w's attributes as Remove does.
func (m *MemRows) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	return m.delete(ctx, k, w, ckpt, nil)
}

// DeleteFenced is Delete under t (sink.FencedRows).
func (m *MemRows) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (deleted, ok bool, err error) {
	return m.delete(ctx, k, w, ckpt, &t)
}

func (m *MemRows) delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t *sink.Token) (deleted, ok bool, err error) {
	if err := checkTagged("delete", w); err != nil {
		return false, false, err
	}
	if err := ctx.Err(); err != nil {
		return false, false, fmt.Errorf("sinktest: delete: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	it, found := m.items[k]
	if !found {
		return false, false, nil
	}
	other := sink.Late
	if w == sink.Late {
		other = sink.Fast
	}
	if a := it.Attrs(w); a.Present && a.Ckpt == ckpt && !it.Attrs(other).Present && !it.Final.Present && !fencedOut(&it, t) {
		delete(m.items, k)
		return true, true, nil
	}
	return false, m.removeLocked(k, w, ckpt, t), nil
}

// Len returns the number of items.
func (m *MemRows) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}
