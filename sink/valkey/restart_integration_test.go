//go:build integration

package valkey

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/sink"
)

// ownRedis is a redis-server of the test's own, on a fixed loopback port,
// that the test can kill and start again empty (no RDB, no AOF), as a
// Valkey restart without persistence does.
type ownRedis struct {
	t    *testing.T
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startOwnRedis starts a redis-server on a free loopback port and stops it
// when the test ends.
func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server, or run scripts/test.sh): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := &ownRedis{t: t, addr: addr, dir: t.TempDir()}
	r.start()
	t.Cleanup(r.kill)
	return r
}

// start runs the server and waits, polling with a deadline, until it
// answers PING.
func (r *ownRedis) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	waitUntil(r.t, 15*time.Second, "redis-server on "+r.addr+" answers PING", func() error { return rawPing(r.addr) })
}

// kill stops the server with SIGKILL, as a crash does, and reaps it.
func (r *ownRedis) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// restart kills the server and starts an empty one on the same port.
func (r *ownRedis) restart() {
	r.t.Helper()
	r.kill()
	r.start()
}

// rawPing sends PING on a connection of its own (never one of the store's)
// and expects +PONG.
func rawPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return &unexpectedReply{line}
	}
	return nil
}

type unexpectedReply struct{ line string }

func (e *unexpectedReply) Error() string { return "unexpected reply " + strconv.Quote(e.line) }

// waitUntil polls f every 20 ms until it returns nil, and fails the test
// with f's last error if that takes longer than limit.
func waitUntil(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warm opens every pooled connection of the store: the client spreads
// commands over them at random, so enough reads reach each one.
func warm(t *testing.T, s *Store, k sink.TotalKey) {
	t.Helper()
	for range 64 {
		if _, _, err := s.GetTotal(context.Background(), k); err != nil {
			t.Fatalf("GetTotal with the server up: %v", err)
		}
	}
}

// TestReadAfterRestart: the store's pooled connections all predate a
// restart of the server; once the server answers again, the first calls
// must succeed, not fail once per stale connection: reads, and the writes
// the runtime sends to recover (its rewrite from state, the marker).
func TestReadAfterRestart(t *testing.T) {
	r := startOwnRedis(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Addr: r.addr, Prefix: testPrefix(t), Timeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tot := sink.Total{Ad: "ad_7", StartMs: 60_000, Valid: 5, SpendMicros: 50, Epoch: 41}
	if err := s.SetTotals(ctx, []sink.Total{tot}); err != nil {
		t.Fatal(err)
	}
	warm(t, s, tot.Key())

	r.restart()
	for i := range 32 {
		got, ok, err := s.GetTotal(ctx, tot.Key())
		if err != nil {
			t.Fatalf("GetTotal %d after the restart: %v; want no error (the server is up)", i, err)
		}
		if ok {
			t.Fatalf("GetTotal %d after an empty restart = %+v, want none", i, got)
		}
	}
	if err := s.TotalsWritten(ctx, tot.Epoch, func(sink.TotalKey) error { return nil }); err != nil {
		t.Fatalf("TotalsWritten after the restart: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after the restart: %v", err)
	}

	for _, call := range []struct {
		name string
		f    func() error
	}{
		{"SetTotals", func() error { return s.SetTotals(ctx, []sink.Total{tot}) }},
		{"DeleteTotals", func() error { return s.DeleteTotals(ctx, []sink.TotalKey{tot.Key()}) }},
		{"ForgetEpochs", func() error { return s.ForgetEpochs(ctx, 0, 100) }},
		{"Wiped", func() error { _, err := s.Wiped(ctx); return err }},
		{"BeginRebuild", func() error { return s.BeginRebuild(ctx) }},
	} {
		if err := s.SetTotals(ctx, []sink.Total{tot}); err != nil {
			t.Fatal(err)
		}
		warm(t, s, tot.Key())
		r.restart()
		if err := call.f(); err != nil {
			t.Errorf("%s right after a restart: %v; want no error (the server is up)", call.name, err)
		}
	}
	if n := counterSum(t, s.m.staleRetries); n < 1 {
		t.Errorf("adclick_valkey_stale_retries_total = %v after restarts, want >= 1", n)
	}
	if n := counterSum(t, s.m.errors); n != 0 {
		t.Errorf("adclick_valkey_errors_total = %v, want 0: a retried round trip is not an error", n)
	}
}

// counterSum adds up every series of a counter vector.
func counterSum(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}
