package valkey

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/sink"
)

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// blackhole accepts connections and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// value reads a single-series gauge or counter.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

func gauge(t *testing.T, s *Store) float64 { t.Helper(); return value(t, s.m.up) }

func errCount(t *testing.T, s *Store, op string) float64 {
	t.Helper()
	return value(t, s.m.errors.WithLabelValues(op))
}

// series counts the gathered series of the named metric families.
func series(t *testing.T, g prometheus.Gatherer, names ...string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		for _, name := range names {
			if mf.GetName() == name {
				n += len(mf.GetMetric())
			}
		}
	}
	return n
}

// TestUnreachable: New succeeds against a closed port or a server that never
// answers, every call fails within the timeout, and the metrics show the
// server down.
func TestUnreachable(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for name, addr := range map[string]func(*testing.T) string{"closed port": closedAddr, "no answer": blackhole} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			reg := prometheus.NewPedanticRegistry()
			start := time.Now()
			s, err := New(ctx, Options{Addr: addr(t), Timeout: timeout, DialTimeout: timeout, Registerer: reg})
			if err != nil {
				t.Fatalf("New against an unreachable server: %v, want a store that starts down", err)
			}
			defer s.Close()
			// New may spend one dial and one ping.
			if d := time.Since(start); d > 3*timeout {
				t.Errorf("New took %v, want at most %v", d, 3*timeout)
			}
			if g := gauge(t, s); g != 0 {
				t.Errorf("adclick_valkey_up after New = %v, want 0", g)
			}
			calls := map[string]func() error{
				"SetTotals": func() error {
					return s.SetTotals(ctx, []sink.Total{{Ad: "ad_7", StartMs: 60_000, Valid: 1, Epoch: 41}})
				},
				"GetTotal":      func() error { _, _, err := s.GetTotal(ctx, sink.TotalKey{Ad: "ad_7"}); return err },
				"TotalsWritten": func() error { return s.TotalsWritten(ctx, 41, func(sink.TotalKey) error { return nil }) },
				"DeleteTotals":  func() error { return s.DeleteTotals(ctx, []sink.TotalKey{{Ad: "ad_7"}}) },
				"ForgetEpochs":  func() error { return s.ForgetEpochs(ctx, 0, 100) },
				"Ping":          func() error { return s.Ping(ctx) },
				"Wiped":         func() error { _, err := s.Wiped(ctx); return err },
				"BeginRebuild":  func() error { return s.BeginRebuild(ctx) },
				"Arm":           func() error { _, err := s.Arm(ctx); return err },
			}
			for call, f := range calls {
				start := time.Now()
				err := f()
				d := time.Since(start)
				if err == nil {
					t.Errorf("%s against an unreachable server: nil error", call)
				}
				// A dial then one round trip at most.
				if d > 2*timeout+200*time.Millisecond {
					t.Errorf("%s took %v, want at most about %v", call, d, 2*timeout)
				}
			}
			if g := gauge(t, s); g != 0 {
				t.Errorf("adclick_valkey_up = %v, want 0", g)
			}
			if n := errCount(t, s, opSet); n < 1 {
				t.Errorf("adclick_valkey_errors_total{op=set} = %v, want >= 1", n)
			}
			if n := errCount(t, s, opPing); n < 1 {
				t.Errorf("adclick_valkey_errors_total{op=ping} = %v, want >= 1", n)
			}
			if n := series(t, reg, "adclick_valkey_up", "adclick_valkey_errors_total"); n != 8 {
				t.Errorf("registered series: %d, want 8 (up + 7 ops)", n)
			}
		})
	}
}

// TestBadInput: totals the key names cannot hold are refused before any I/O,
// with ErrBadTotal, and do not mark the server down.
func TestBadInput(t *testing.T) {
	s, err := New(context.Background(), Options{Addr: closedAddr(t), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.m.up.Set(1) // pretend it is up: refusals must not change it
	ctx := context.Background()
	bad := sink.Total{Ad: "ad_7", StartMs: 30_000, Epoch: 41}
	if err := s.SetTotals(ctx, []sink.Total{{Ad: "ok", StartMs: 60_000}, bad}); !errors.Is(err, ErrBadTotal) {
		t.Errorf("SetTotals(unaligned) = %v, want ErrBadTotal", err)
	}
	if _, _, err := s.GetTotal(ctx, bad.Key()); !errors.Is(err, ErrBadTotal) {
		t.Errorf("GetTotal(unaligned) = %v, want ErrBadTotal", err)
	}
	if err := s.DeleteTotals(ctx, []sink.TotalKey{{Ad: "a", StartMs: 3_600_000 + 60_000, Hour: true}}); !errors.Is(err, ErrBadTotal) {
		t.Errorf("DeleteTotals(unaligned hour) = %v, want ErrBadTotal", err)
	}
	if g := gauge(t, s); g != 1 {
		t.Errorf("adclick_valkey_up = %v after refused input, want 1", g)
	}
	if n := errCount(t, s, opSet); n != 0 {
		t.Errorf("errors_total{op=set} = %v after refused input, want 0 (nothing was sent)", n)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"no address":    {},
		"braced prefix": {Addr: "127.0.0.1:1", Prefix: "a{b}"},
		"batch size":    {Addr: "127.0.0.1:1", BatchSize: -1},
	} {
		if s, err := New(context.Background(), o); err == nil {
			s.Close()
			t.Errorf("New(%s) = nil error, want one", name)
		}
	}
	if _, err := NewWithClient(nil, Options{}); err == nil {
		t.Error("NewWithClient(nil) = nil error, want one")
	}
}
