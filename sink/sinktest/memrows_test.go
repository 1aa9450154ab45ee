package sinktest

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/adclick/adclick/sink"
)

func TestMemRowsConformance(t *testing.T) {
	defer goleak.VerifyNone(t)
	Rows(t, func(t *testing.T) sink.Rows { return NewMemRows() })
}

// brokenRows wraps MemRows and breaks one rule, so that the suite can be
// shown to notice.
type brokenRows struct {
	*MemRows
	put func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error)
}

func (b brokenRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	return b.put(b.MemRows, ctx, puts)
}

// TestSuiteCatchesBrokenStores runs single subtests of the suite against
// deliberately wrong stores, each in a sub-testing.T whose failure is
// expected.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		name string
		put  func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error)
		run  func(t *testing.T, s sink.Rows)
	}{
		{
			name: "no job_gen fence",
			put: func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error) {
				for i := range puts {
					m.mu.Lock()
					it := m.items[puts[i].Key]
					it.HasJobGen = false
					m.items[puts[i].Key] = it
					m.mu.Unlock()
				}
				return m.Put(ctx, puts)
			},
			run: testJobGenFencing,
		},
		{
			name: "closed-row condition ignored",
			put: func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error) {
				ps := append([]sink.Put(nil), puts...)
				for i := range ps {
					ps[i].ClosedRow = false
				}
				return m.Put(ctx, ps)
			},
			run: testClosedRow,
		},
		{
			name: "first write wins in a batch",
			put: func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error) {
				ps := append([]sink.Put(nil), puts...)
				for i, j := 0, len(ps)-1; i < j; i, j = i+1, j-1 {
					ps[i], ps[j] = ps[j], ps[i]
				}
				return m.Put(ctx, ps)
			},
			run: testCoalescedPuts,
		},
		{
			name: "drops the last put of large batches",
			put: func(m *MemRows, ctx context.Context, puts []sink.Put) (int, error) {
				if len(puts) > 256 {
					puts = puts[:len(puts)-1]
				}
				return m.Put(ctx, puts)
			},
			run: testLargeBatch,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !suiteFails(func(inner *testing.T) { c.run(inner, brokenRows{MemRows: NewMemRows(), put: c.put}) }) {
				t.Fatalf("the suite passed a store whose %s; want a failure", c.name)
			}
		})
	}
}

func TestMemRowsScoped(t *testing.T) {
	ScopedRows(t, func(t *testing.T) (sink.Rows, func(string) (sink.Rows, error)) {
		m := NewMemRows()
		return m, func(scope string) (sink.Rows, error) { return m.Scoped(scope) }
	})
}

// TestScopedSuiteCatchesUnscopedViews runs the scope suites against views
// that ignore their scope (the store itself), or query the unscoped index,
// which they must refuse.
func TestScopedSuiteCatchesUnscopedViews(t *testing.T) {
	broken := map[string]func(m *MemRows, scope string) (sink.Rows, error){
		"ignores scope": func(m *MemRows, scope string) (sink.Rows, error) { return m, sink.ValidateScope(scope) },
		"queries unscoped": func(m *MemRows, scope string) (sink.Rows, error) {
			v, err := m.Scoped(scope)
			return halfScoped{v, m}, err
		},
	}
	rows := []struct {
		name string
		run  func(t *testing.T, base sink.Rows, scoped func(string) (sink.Rows, error))
	}{{"IndexApart", testScopedIndexApart}, {"SharedItems", testScopedSharedItems}}
	for how, view := range broken {
		for _, c := range rows {
			t.Run("rows/"+how+"/"+c.name, func(t *testing.T) {
				m := NewMemRows()
				wantSuiteFailure(t, func(t *testing.T) {
					c.run(t, m, func(scope string) (sink.Rows, error) { return view(m, scope) })
				})
			})
		}
	}
	t.Run("rows/Unscoped", func(t *testing.T) {
		m := NewMemRows()
		wantSuiteFailure(t, func(t *testing.T) {
			// Scope "" gives a scoped view.
			testScopedUnscoped(t, m, func(scope string) (sink.Rows, error) {
				if scope == "" {
					scope = "x"
				}
				return m.Scoped(scope)
			})
		})
	})
	t.Run("rows/BadScope", func(t *testing.T) {
		m := NewMemRows()
		wantSuiteFailure(t, func(t *testing.T) {
			testScopedBadScope(t, m, func(string) (sink.Rows, error) { return m, nil })
		})
	})
	totals := []struct {
		name string
		run  func(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error))
	}{{"EpochsApart", testScopedEpochsApart}, {"ForgetApart", testScopedForgetApart}, {"DeleteApart", testScopedDeleteApart}}
	for _, c := range totals {
		t.Run("totals/"+c.name, func(t *testing.T) {
			m := NewMemTotals()
			wantSuiteFailure(t, func(t *testing.T) {
				c.run(t, m, func(scope string) (sink.Totals, error) { return m, sink.ValidateScope(scope) })
			})
		})
	}
	t.Run("totals/Unscoped", func(t *testing.T) {
		m := NewMemTotals()
		wantSuiteFailure(t, func(t *testing.T) {
			testScopedTotalsUnscoped(t, m, func(scope string) (sink.Totals, error) {
				if scope == "" {
					scope = "x"
				}
				return m.Scoped(scope)
			})
		})
	})
	t.Run("totals/BadScope", func(t *testing.T) {
		m := NewMemTotals()
		wantSuiteFailure(t, func(t *testing.T) {
			testScopedTotalsBadScope(t, m, func(string) (sink.Totals, error) { return m, nil })
		})
	})
}

// halfScoped writes through a scoped view and queries the unscoped index.
type halfScoped struct {
	*MemRows
	unscoped *MemRows
}

func (h halfScoped) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	return h.unscoped.QueryIndex(ctx, w, ix, fn)
}

// wantSuiteFailure runs fn on a sub-testing.T, on its own goroutine (Fatalf
// calls runtime.Goexit), and fails t unless fn failed.
func wantSuiteFailure(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	inner := &testing.T{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(inner)
	}()
	<-done
	if !inner.Failed() {
		t.Fatal("the suite passed a store that ignores index scopes; want a failure")
	}
}

// suiteFails runs a conformance suite against a broken store, on a
// testing.T of its own, and reports whether it failed.
func suiteFails(run func(t *testing.T)) bool {
	inner := &testing.T{}
	done := make(chan struct{})
	// Fatalf calls runtime.Goexit, so run the suite on its own goroutine.
	go func() {
		defer close(done)
		run(inner)
	}()
	<-done
	return inner.Failed()
}
