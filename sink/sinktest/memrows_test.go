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
				if len(puts) > 1000 {
					puts = puts[:len(puts)-1]
				}
				return m.Put(ctx, puts)
			},
			run: testLargeBatch,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inner := &testing.T{}
			done := make(chan struct{})
			// Fatalf calls runtime.Goexit, so run the subtest on its own goroutine.
			go func() {
				defer close(done)
				c.run(inner, brokenRows{MemRows: NewMemRows(), put: c.put})
			}()
			<-done
			if !inner.Failed() {
				t.Fatalf("the suite passed a store whose %s; want a failure", c.name)
			}
		})
	}
}
