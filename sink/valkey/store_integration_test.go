//go:build integration

package valkey

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// run keeps the key prefixes of one test run apart from earlier runs.
var run = fmt.Sprintf("t%d", time.Now().UnixNano())

// testPrefix returns a key prefix unique to the test and the run.
func testPrefix(t *testing.T) string {
	return "adclicktest:" + run + ":" + strings.NewReplacer("{", "(", "}", ")", "*", "_", "?", "_", "[", "(", "]", ")").Replace(t.Name())
}

// rawClient is a plain client for looking at the server behind the store.
func rawClient(t *testing.T, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("raw client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// dropPrefix deletes every key under prefix.
func dropPrefix(t *testing.T, c valkey.Client, prefix string) {
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Errorf("scan %s: %v", prefix, err)
			return
		}
		for _, k := range e.Elements {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

func openStore(t *testing.T, addr string, o Options) *Store {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = testPrefix(t)
	}
	o.Addr = addr
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	raw := rawClient(t, testenv.Valkey(t))
	t.Cleanup(func() {
		s.Close()
		dropPrefix(t, raw, o.Prefix)
	})
	return s
}

func TestConformance(t *testing.T) {
	addr := testenv.Valkey(t)
	sinktest.Totals(t, func(t *testing.T) sink.Totals { return openStore(t, addr, Options{}) })
}

// TestConformanceSmallBatches runs the suite with pipelines of 7 totals, so
// that every call spans several round trips and SSCAN pages.
func TestConformanceSmallBatches(t *testing.T) {
	addr := testenv.Valkey(t)
	sinktest.Totals(t, func(t *testing.T) sink.Totals { return openStore(t, addr, Options{BatchSize: 7}) })
}

func TestScopedConformance(t *testing.T) {
	addr := testenv.Valkey(t)
	sinktest.ScopedTotals(t, func(t *testing.T) (sink.Totals, func(string) (sink.Totals, error)) {
		s := openStore(t, addr, Options{BatchSize: 7})
		return s, func(scope string) (sink.Totals, error) { return s.Scoped(scope) }
	})
}

// TestScopedLayout checks the key names of a view's bookkeeping with a
// plain client: scoped epoch sets and registry, unscoped totals.
func TestScopedLayout(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	s := openStore(t, addr, Options{})
	p := s.opts.Prefix
	raw := rawClient(t, addr)
	a, err := s.Scoped("kg0-16")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 10, 14, 0, 0, time.UTC).UnixMilli()
	if err := a.SetTotals(ctx, []sink.Total{{Ad: "ad_7", StartMs: start, Valid: 5, Epoch: 41}}); err != nil {
		t.Fatal(err)
	}
	total := p + ":m:{ad_7}:2026-11-29T10:14Z"
	members, err := raw.Do(ctx, raw.B().Smembers().Key(p+":ep:kg0-16:41").Build()).AsStrSlice()
	if err != nil || len(members) != 1 || members[0] != total {
		t.Fatalf("SMEMBERS %s:ep:kg0-16:41 = %v, %v; want [%s]", p, members, err, total)
	}
	reg, err := raw.Do(ctx, raw.B().Zrange().Key(p+":epochs:kg0-16").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil || len(reg) != 1 || reg[0] != "41" {
		t.Fatalf("ZRANGE %s:epochs:kg0-16 = %v, %v; want [41]", p, reg, err)
	}
	for _, k := range []string{p + ":ep:41", p + ":epochs"} {
		if n, err := raw.Do(ctx, raw.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("EXISTS %s = %d, %v; want 0 (a view writes no unscoped bookkeeping)", k, n, err)
		}
	}
	if v, err := raw.Do(ctx, raw.B().Hget().Key(total).Field("valid").Build()).ToString(); err != nil || v != "5" {
		t.Fatalf("HGET %s valid = %q, %v; want 5", total, v, err)
	}
	wantTTL(t, raw, p+":ep:kg0-16:41", s.opts.EpochTTL)
	wantTTL(t, raw, p+":epochs:kg0-16", s.opts.EpochTTL)
	// Closing a view leaves the client open.
	a.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after closing a view: %v", err)
	}
}

// TestLayout checks the documented key names, hash fields and expiries with
// a plain client.
func TestLayout(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	const minTTL, hourTTL = time.Hour, 3 * time.Hour
	s := openStore(t, addr, Options{MinuteTTL: minTTL, HourTTL: hourTTL})
	p := s.opts.Prefix
	start := ms("2026-11-29T10:00:00Z")
	if err := s.SetTotals(ctx, []sink.Total{
		{Ad: "ad_7", StartMs: start + 14*60_000, Valid: 5, SpendMicros: 1_500_000, Epoch: 41},
		{Ad: "ad_7", StartMs: start, Hour: true, Valid: 812, SpendMicros: 9, Epoch: 42},
	}); err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, addr)
	for _, tc := range []struct {
		key    string
		fields map[string]string
		ttl    time.Duration
	}{
		{p + ":m:{ad_7}:2026-11-29T10:14Z", map[string]string{"valid": "5", "spend_micros": "1500000", "ckpt": "41", "gen": "0", "fence": "0"}, minTTL},
		{p + ":h:{ad_7}:2026-11-29T10Z", map[string]string{"valid": "812", "spend_micros": "9", "ckpt": "42", "gen": "0", "fence": "0"}, hourTTL},
	} {
		got, err := raw.Do(ctx, raw.B().Hgetall().Key(tc.key).Build()).AsStrMap()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", tc.key, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.fields) {
			t.Errorf("HGETALL %s = %v, want %v", tc.key, got, tc.fields)
		}
		wantTTL(t, raw, tc.key, tc.ttl)
	}
	for e, member := range map[int64]string{41: p + ":m:{ad_7}:2026-11-29T10:14Z", 42: p + ":h:{ad_7}:2026-11-29T10Z"} {
		key := fmt.Sprintf("%s:ep:%d", p, e)
		got, err := raw.Do(ctx, raw.B().Smembers().Key(key).Build()).AsStrSlice()
		if err != nil || len(got) != 1 || got[0] != member {
			t.Errorf("SMEMBERS %s = %v, %v; want [%s]", key, got, err, member)
		}
		wantTTL(t, raw, key, hourTTL)
	}
	got, err := raw.Do(ctx, raw.B().Zrange().Key(p+":epochs").Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil || len(got) != 2 || got[0].Member != "41" || got[0].Score != 41 || got[1].Member != "42" || got[1].Score != 42 {
		t.Errorf("ZRANGE %s:epochs = %+v, %v; want 41 and 42 with their scores", p, got, err)
	}
	wantTTL(t, raw, p+":epochs", hourTTL)
}

func wantTTL(t *testing.T, c valkey.Client, key string, want time.Duration) {
	t.Helper()
	ms, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	got := time.Duration(ms) * time.Millisecond
	if got <= want-time.Minute || got > want {
		t.Errorf("PTTL %s = %v, want about %v", key, got, want)
	}
}

// TestExpiry: totals vanish after their TTL.
func TestExpiry(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	s := openStore(t, addr, Options{MinuteTTL: 200 * time.Millisecond, HourTTL: time.Hour})
	m := sink.Total{Ad: "ad_7", StartMs: 60_000, Valid: 1, Epoch: 1}
	h := sink.Total{Ad: "ad_7", StartMs: 3_600_000, Hour: true, Valid: 2, Epoch: 1}
	if err := s.SetTotals(ctx, []sink.Total{m, h}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if got, ok, err := s.GetTotal(ctx, m.Key()); err != nil || ok {
		t.Errorf("minute total after its TTL: %+v, %v, %v; want gone", got, ok, err)
	}
	if got, ok, err := s.GetTotal(ctx, h.Key()); err != nil || !ok || got != h {
		t.Errorf("hour total: %+v, %v, %v; want %+v", got, ok, err, h)
	}
}

// TestNewWithClient: the store uses the caller's client and leaves it open.
func TestNewWithClient(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	c := rawClient(t, addr)
	prefix := testPrefix(t)
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	s, err := NewWithClient(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	want := sink.Total{Ad: "ad_7", StartMs: 60_000, Valid: 3, SpendMicros: 4, Epoch: 5}
	if err := s.SetTotals(ctx, []sink.Total{want}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("client after the store's Close: %v, want still open", err)
	}
	s2, _ := NewWithClient(c, Options{Prefix: prefix})
	if got, ok, err := s2.GetTotal(ctx, want.Key()); err != nil || !ok || got != want {
		t.Fatalf("GetTotal = %+v, %v, %v; want %+v", got, ok, err, want)
	}
}

// proxy forwards a local port to the server and can be cut and restored on
// the same port, to simulate an outage.
type proxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target, addr: "127.0.0.1:0"}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *proxy) up() {
	var ln net.Listener
	// The port may take a moment to be free again.
	waitUntil(p.t, 10*time.Second, "proxy listen "+p.addr, func() error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err
	})
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
}

// down closes the port and cuts every connection.
func (p *proxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestOutageAndRecovery: with the server gone, calls fail within the timeout
// and the metrics say down; when it is back, the same store recovers without
// help, and the runtime can rewrite its totals.
func TestOutageAndRecovery(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	p := newProxy(t, addr)
	reg := prometheus.NewRegistry()
	s := openStore(t, p.addr, Options{Timeout: timeout, DialTimeout: timeout, Registerer: reg})
	tot := sink.Total{Ad: "ad_7", StartMs: 60_000, Valid: 5, SpendMicros: 50, Epoch: 41}
	if err := s.SetTotals(ctx, []sink.Total{tot}); err != nil {
		t.Fatalf("SetTotals with the server up: %v", err)
	}
	if g := gauge(t, s); g != 1 {
		t.Fatalf("adclick_valkey_up = %v with the server up, want 1", g)
	}
	// The client spreads commands over its pipelined connections at random:
	// enough reads open every one of them, so that all predate the outage.
	for range 64 {
		if _, _, err := s.GetTotal(ctx, tot.Key()); err != nil {
			t.Fatalf("GetTotal with the server up: %v", err)
		}
	}

	p.down()
	tot.Valid, tot.Epoch = 6, 42
	start := time.Now()
	if err := s.SetTotals(ctx, []sink.Total{tot}); err == nil {
		t.Fatal("SetTotals during the outage: nil error")
	}
	if d := time.Since(start); d > 2*timeout+200*time.Millisecond {
		t.Errorf("SetTotals during the outage took %v, want at most about %v", d, 2*timeout)
	}
	start = time.Now()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping during the outage: nil error")
	}
	if d := time.Since(start); d > 2*timeout+200*time.Millisecond {
		t.Errorf("Ping during the outage took %v", d)
	}
	if g := gauge(t, s); g != 0 {
		t.Errorf("adclick_valkey_up during the outage = %v, want 0", g)
	}
	if n := errCount(t, s, opSet); n < 1 {
		t.Errorf("adclick_valkey_errors_total{op=set} = %v, want >= 1", n)
	}

	p.up()
	// The runtime's loop: ping until up, then rewrite the totals from state.
	// Ping is a read: it goes again on another connection when one that
	// predates the outage fails.
	waitUntil(t, 10*time.Second, "Ping after the server came back", func() error { return s.Ping(ctx) })
	if g := gauge(t, s); g != 1 {
		t.Errorf("adclick_valkey_up after recovery = %v, want 1", g)
	}
	// Reads right after recovery must not fail on a pooled connection that
	// predates the outage: each is sent again on another one. Several
	// reads, since the client picks a connection at random. (The first
	// SetTotals during the outage replaced at most two connections.)
	for i := range 16 {
		if _, _, err := s.GetTotal(ctx, tot.Key()); err != nil {
			t.Fatalf("GetTotal %d right after recovery: %v, want no error", i, err)
		}
	}
	// So must the runtime's rewrite, on its first attempt.
	if err := s.SetTotals(ctx, []sink.Total{tot}); err != nil {
		t.Fatalf("SetTotals right after recovery: %v, want no error", err)
	}
	if got, ok, err := s.GetTotal(ctx, tot.Key()); err != nil || !ok || got != tot {
		t.Fatalf("GetTotal after recovery = %+v, %v, %v; want %+v", got, ok, err, tot)
	}
}

// TestStartsDown: a store created while the server is down works once it
// comes up.
func TestStartsDown(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	p := newProxy(t, addr)
	p.down()
	s := openStore(t, p.addr, Options{Timeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with the server down: nil error")
	}
	p.up()
	waitUntil(t, 10*time.Second, "Ping after the server came up", func() error { return s.Ping(ctx) })
	want := sink.Total{Ad: "ad_1", StartMs: 0, Valid: 1, Epoch: 1}
	if err := s.SetTotals(ctx, []sink.Total{want}); err != nil {
		t.Fatalf("SetTotals: %v", err)
	}
	if got, ok, err := s.GetTotal(ctx, want.Key()); err != nil || !ok || got != want {
		t.Fatalf("GetTotal = %+v, %v, %v; want %+v", got, ok, err, want)
	}
}

// BenchmarkSetTotals writes batches of 10,000 minute totals over 1,000 ads,
// with several pipeline sizes.
func BenchmarkSetTotals(b *testing.B) {
	for _, size := range []int{100, 500, 2000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) { benchSetTotals(b, size) })
	}
}

func benchSetTotals(b *testing.B, batch int) {
	addr := testenv.Valkey(b)
	ctx := context.Background()
	prefix := "adclickbench:" + run
	s, err := New(ctx, Options{Addr: addr, Prefix: prefix, BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ts := make([]sink.Total, 10_000)
	for i := range ts {
		ts[i] = sink.Total{Ad: fmt.Sprintf("ad_%d", i%1000), StartMs: int64(i/1000) * 60_000, Valid: int64(i), SpendMicros: int64(i) * 10, Epoch: 7}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.SetTotals(ctx, ts); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*len(ts))/b.Elapsed().Seconds(), "totals/s")
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err == nil {
		for _, t := range ts {
			k, _ := s.k.total(t.Key())
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
		c.Do(ctx, c.B().Del().Key(s.k.epoch(7)).Build())
		c.Do(ctx, c.B().Del().Key(s.k.epochs()).Build())
		c.Close()
	}
}
