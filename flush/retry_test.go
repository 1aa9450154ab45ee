package flush

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
)

// errThrottled is a transient store failure, marked as sink/dynamo marks
// what it gave up on: a Transient() bool method.
type errThrottled struct{}

func (errThrottled) Error() string   { return "injected throttling" }
func (errThrottled) Transient() bool { return true }

// faultyRows fails calls of any method with err, n of them in all: the
// first n calls, or with every > 1 every every-th call until n have failed.
// It passes the other calls through. Safe for concurrent use.
type faultyRows struct {
	sink.Rows
	n      int64
	every  int64
	err    error
	calls  atomic.Int64
	failed atomic.Int64
}

func (f *faultyRows) fault() error {
	c := f.calls.Add(1)
	if f.every > 1 && c%f.every != 0 {
		return nil
	}
	if f.failed.Add(1) <= f.n {
		return f.err
	}
	return nil
}

func (f *faultyRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	if err := f.fault(); err != nil {
		return 0, err
	}
	return f.Rows.Put(ctx, puts)
}

func (f *faultyRows) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	if err := f.fault(); err != nil {
		return sink.Item{}, false, err
	}
	return f.Rows.Get(ctx, k)
}

func (f *faultyRows) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Rows.QueryIndex(ctx, w, ix, fn)
}

func (f *faultyRows) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	if err := f.fault(); err != nil {
		return false, err
	}
	return f.Rows.Remove(ctx, k, w, ckpt)
}

func (f *faultyRows) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, bool, error) {
	if err := f.fault(); err != nil {
		return false, false, err
	}
	return f.Rows.Delete(ctx, k, w, ckpt)
}

func (f *faultyRows) Scan(ctx context.Context, fn func(sink.Item) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Rows.Scan(ctx, fn)
}

// napClock is a fakeClock that records every sleep.
type napClock struct {
	*fakeClock
	naps []time.Duration
}

func (c *napClock) Sleep(ctx context.Context, d time.Duration) error {
	c.naps = append(c.naps, d)
	return c.fakeClock.Sleep(ctx, d)
}

func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"marked", errThrottled{}, true},
		{"marked, wrapped", errors.Join(errors.New("x"), errThrottled{}), true},
		{"plain", errCrash, false},
		{"context", context.DeadlineExceeded, false},
		{"nil", nil, false},
	} {
		if got := IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFullWaitsOutTransientErrors: a row store that fails 40 calls with a
// transient error (the first 40, or every second call until 40 failed, so
// that every kind of call meets one) only slows the flush down; it ends as
// a clean run does, with the retries counted, the waits capped, and a few
// log lines rather than 40.
func TestFullWaitsOutTransientErrors(t *testing.T) {
	clean, cleanTotals, cleanSt := story(t)
	if _, err := Full(context.Background(), clean, cleanTotals, cleanSt, cleanSt, unlimited()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		every int64
		ops   []string // calls that must have been retried
	}{
		{"first 40 calls", 1, []string{"query"}},
		{"every second call", 2, []string{"query", "put", "delete", "remove"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, totals, st := story(t)
			faulty := &faultyRows{Rows: rows, n: 40, every: tc.every, err: errThrottled{}}
			clk := &napClock{fakeClock: newFakeClock()}
			reg := prometheus.NewRegistry()
			var logs bytes.Buffer
			o := unlimited()
			o.Clock, o.Registerer = clk, reg
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			o.RetryBackoff, o.MaxRetryBackoff, o.RetryLogEvery = 100*time.Millisecond, 2*time.Second, 10*time.Second
			rep, err := Full(context.Background(), faulty, totals, st, st, o)
			if err != nil {
				t.Fatalf("flush with 40 transient failures: %v, want it to wait them out", err)
			}
			if rep.Retries != 40 {
				t.Errorf("report retries: got %d, want 40", rep.Retries)
			}
			if got := counterSum(t, reg, "adclick_flush_retries_total"); got != 40 {
				t.Errorf("adclick_flush_retries_total: got %v, want 40", got)
			}
			for _, op := range tc.ops {
				if got := counterValue(t, reg, "adclick_flush_retries_total", map[string]string{"kind": "flush", "op": op}); got < 1 {
					t.Errorf("adclick_flush_retries_total{op=%q}: got %v, want at least 1", op, got)
				}
			}
			if got, want := dumpRows(t, rows), dumpRows(t, clean); got != want {
				t.Errorf("rows after waiting out the faults:\ngot:\n%swant (a clean run):\n%s", got, want)
			}
			if got, want := dumpTotals(t, totals), dumpTotals(t, cleanTotals); got != want {
				t.Errorf("totals after waiting out the faults:\ngot:\n%swant (a clean run):\n%s", got, want)
			}
			if len(clk.naps) != 40 {
				t.Fatalf("sleeps: got %d, want 40 (one per retry; the rate limit is off)", len(clk.naps))
			}
			var slept time.Duration
			for i, d := range clk.naps {
				slept += d
				if d > o.MaxRetryBackoff {
					t.Errorf("sleep %d: got %v, want at most MaxRetryBackoff %v", i, d, o.MaxRetryBackoff)
				}
			}
			if d := clk.naps[0]; d < o.RetryBackoff/2 || d > o.RetryBackoff {
				t.Errorf("first sleep: got %v, want in [%v, %v]", d, o.RetryBackoff/2, o.RetryBackoff)
			}
			if d := clk.naps[len(clk.naps)-1]; tc.every == 1 && d < o.MaxRetryBackoff/2 {
				t.Errorf("last of 40 sleeps for one call: got %v, want at least %v (the cap, jittered)", d, o.MaxRetryBackoff/2)
			}
			lines := strings.Count(logs.String(), "waiting it out")
			if limit := int(slept/o.RetryLogEvery) + 1; lines < 1 || lines > limit {
				t.Errorf("retry log lines: got %d over %v, want between 1 and %d (one per %v)\n%s", lines, slept, limit, o.RetryLogEvery, logs.String())
			}
		})
	}
}

// TestFullFailsAtOnceOnOtherErrors: an error that is not transient fails
// the flush at the first call, without a retry or a wait.
func TestFullFailsAtOnceOnOtherErrors(t *testing.T) {
	rows, totals, st := story(t)
	faulty := &faultyRows{Rows: rows, n: 40, err: errCrash}
	clk := &napClock{fakeClock: newFakeClock()}
	o := unlimited()
	o.Clock = clk
	rep, err := Full(context.Background(), faulty, totals, st, st, o)
	if !errors.Is(err, errCrash) {
		t.Fatalf("flush: got %v, want the injected error", err)
	}
	if got := faulty.calls.Load(); got != 1 {
		t.Errorf("row-store calls: got %d, want 1", got)
	}
	if rep.Retries != 0 || len(clk.naps) != 0 {
		t.Errorf("retries %d, sleeps %d; want none", rep.Retries, len(clk.naps))
	}
}

// TestFullRetriesUntilContextEnds: a store that never recovers holds the
// flush until its context ends; the error then says both.
func TestFullRetriesUntilContextEnds(t *testing.T) {
	rows, totals, st := story(t)
	faulty := &faultyRows{Rows: rows, n: 1 << 30, err: errThrottled{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := &cancelAfter{fakeClock: newFakeClock(), naps: 100, cancel: cancel}
	o := unlimited()
	o.Clock = clk
	rep, err := Full(ctx, faulty, totals, st, st, o)
	if !errors.Is(err, context.Canceled) || !errors.As(err, new(errThrottled)) {
		t.Fatalf("flush: got %v, want context.Canceled and the last transient error", err)
	}
	if rep.Retries < 100 {
		t.Errorf("retries: got %d, want at least 100 (until the context ended)", rep.Retries)
	}
}

// cancelAfter is a fakeClock that cancels a context at its naps-th sleep.
type cancelAfter struct {
	*fakeClock
	naps   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Sleep(ctx context.Context, d time.Duration) error {
	if c.fakeClock.naps+1 >= c.naps {
		c.cancel()
	}
	return c.fakeClock.Sleep(ctx, d)
}

// TestSweepWaitsOutTransientErrors: the sweep shares the flush's retries.
func TestSweepWaitsOutTransientErrors(t *testing.T) {
	rows, _, _ := story(t)
	faulty := &faultyRows{Rows: rows, n: 40, err: errThrottled{}}
	rep, err := Sweep(context.Background(), faulty, nil, SweepOptions{Gen: 7, Since: 41, High: 43,
		WritesPerSec: unlimited().WritesPerSec, Clock: newFakeClock()})
	if err != nil {
		t.Fatalf("sweep with 40 transient failures: %v", err)
	}
	if rep.Retries != 40 {
		t.Errorf("retries: got %d, want 40", rep.Retries)
	}
}

// counterSum sums every series of the named counter in g.
func counterSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
