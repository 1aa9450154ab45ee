package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
)

// countingListener counts the connections it accepted that are not yet
// closed, and the most there ever were: the descriptors the server holds.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for {
		p := l.peak.Load()
		if n <= p || l.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// serve runs s on a loopback listener the way cmd/adclick does (HTTPServer
// over Listener) and returns the counting listener under the cap and the
// base URL. The server is closed when the test ends.
func serve(t *testing.T, s *Server) (*countingListener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := &countingListener{Listener: ln}
	srv := s.HTTPServer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(s.Listener(inner))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		// Close does not wait for the connections' goroutines; one that
		// answered an error lingers up to 500 ms before it closes.
		waitFor(t, 5*time.Second, "server connections close", func() bool { return inner.open.Load() == 0 })
	})
	return inner, "http://" + ln.Addr().String()
}

// waitFor polls cond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newClient returns a client with its own connection pool.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestConnectionCapRefusesBeyondIt fills the cap with silent connections
// (connected, no request: none is idle, so none can make room) and checks
// that the connections beyond the cap are closed at once, that the server
// never holds more than the cap, and that it answers again once the silent
// connections go away.
func TestConnectionCapRefusesBeyondIt(t *testing.T) {
	const limit = 8
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, MaxConnections: limit, IdleTimeout: time.Minute})
	inner, base := serve(t, s)
	var silent []net.Conn
	closeAll := func() {
		for _, c := range silent {
			c.Close()
		}
		silent = nil
	}
	defer closeAll()
	for i := range limit + 20 {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
		if i < limit {
			waitFor(t, 2*time.Second, "server accepts a connection under the cap", func() bool { return inner.open.Load() == int64(i+1) })
			continue
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("connection %d beyond the cap of %d: got %v, want the server to close it", i+1, limit, err)
		}
	}
	if got := inner.peak.Load(); got > limit+1 {
		t.Errorf("peak of open server connections: got %d, want at most %d (the cap, plus one being refused)", got, limit+1)
	}
	if got := inner.open.Load(); got != limit {
		t.Errorf("open server connections: got %d, want %d", got, limit)
	}
	if got := counterValue(t, s.m.connsRefused); got != 20 {
		t.Errorf("refused connections: got %v, want 20", got)
	}
	if got := gaugeValue(t, s.m.connsOpen); got != limit {
		t.Errorf("adclick_http_connections_open: got %v, want %d", got, limit)
	}
	if _, err := get(t, newClient(t), base+"/healthz"); err == nil {
		t.Errorf("GET /healthz with the cap taken by silent connections: got an answer, want a refusal")
	}
	closeAll()
	waitFor(t, 2*time.Second, "server closes the silent connections", func() bool { return inner.open.Load() == 0 })
	if code, err := get(t, newClient(t), base+"/healthz"); err != nil || code != 200 {
		t.Fatalf("GET /healthz after the silent connections closed: got %d, %v; want 200", code, err)
	}
}

// TestConnectionCapClosesIdleForNew opens three times the cap of keep-alive
// connections, each left idle after a request: every new client is
// answered, the longest-idle connection being closed to make room, and the
// server never holds more than the cap.
func TestConnectionCapClosesIdleForNew(t *testing.T) {
	const limit = 8
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, MaxConnections: limit, IdleTimeout: time.Minute})
	inner, base := serve(t, s)
	for i := range 3 * limit {
		if code, err := get(t, newClient(t), base+"/healthz"); err != nil || code != 200 {
			t.Fatalf("client %d: got %d, %v; want 200", i+1, code, err)
		}
		if got := inner.open.Load(); got > limit {
			t.Fatalf("after client %d: %d open server connections, want at most %d", i+1, got, limit)
		}
	}
	if got := inner.peak.Load(); got > limit+1 {
		t.Errorf("peak of open server connections: got %d, want at most %d", got, limit+1)
	}
	if got := counterValue(t, s.m.connsIdleClosed); got < 2*limit {
		t.Errorf("idle connections closed to make room: got %v, want at least %d", got, 2*limit)
	}
	waitFor(t, 2*time.Second, "the open-connections gauge matches", func() bool {
		return gaugeValue(t, s.m.connsOpen) == float64(inner.open.Load())
	})
}

// TestConnectionCapUnderConcurrency runs many keep-alive clients at once
// against a small cap: requests may be refused, but the server never holds
// more than the cap, and when the clients hang up every slot is free again
// (the gauge returns to zero).
func TestConnectionCapUnderConcurrency(t *testing.T) {
	const limit = 4
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, MaxConnections: limit, IdleTimeout: time.Minute})
	inner, base := serve(t, s)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 24 {
		c := newClient(t)
		wg.Go(func() {
			for range 10 {
				if code, err := get(t, c, base+"/healthz"); err == nil && code == 200 {
					ok.Add(1)
				}
			}
			c.CloseIdleConnections()
		})
	}
	wg.Wait()
	if got := inner.peak.Load(); got > limit+1 {
		t.Errorf("peak of open server connections: got %d, want at most %d", got, limit+1)
	}
	if ok.Load() == 0 {
		t.Errorf("no request was answered")
	}
	waitFor(t, 3*time.Second, "every connection closed", func() bool { return inner.open.Load() == 0 })
	waitFor(t, 3*time.Second, "adclick_http_connections_open back to 0", func() bool { return gaugeValue(t, s.m.connsOpen) == 0 })
	t.Logf("%d of 240 requests answered; %v connections refused, %v idle ones closed for new ones",
		ok.Load(), counterValue(t, s.m.connsRefused), counterValue(t, s.m.connsIdleClosed))
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

// TestIdleTimeoutClosesKeepAlive checks that the server closes a keep-alive
// connection idle for IdleTimeout.
func TestIdleTimeoutClosesKeepAlive(t *testing.T) {
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, IdleTimeout: 200 * time.Millisecond})
	inner, base := serve(t, s)
	c := newClient(t)
	for range 3 {
		if code, err := get(t, c, base+"/healthz"); err != nil || code != 200 {
			t.Fatalf("GET /healthz: got %d, %v; want 200", code, err)
		}
	}
	if got := inner.peak.Load(); got != 1 {
		t.Errorf("keep-alive: %d connections for 3 requests, want 1", got)
	}
	start := time.Now()
	waitFor(t, 3*time.Second, "server closes the idle keep-alive connection", func() bool { return inner.open.Load() == 0 })
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("idle connection closed after %v, before IdleTimeout (200ms)", d)
	}
	if code, err := get(t, c, base+"/healthz"); err != nil || code != 200 {
		t.Fatalf("GET /healthz after the idle close: got %d, %v; want 200", code, err)
	}
}

// slowJob delays savepoints and blocks row reads until their context ends.
type slowJob struct {
	*fakeJob
	delay time.Duration
}

func (j slowJob) Savepoint(ctx context.Context) (runtime.Meta, string, error) {
	select {
	case <-time.After(j.delay):
	case <-ctx.Done():
		return runtime.Meta{}, "", ctx.Err()
	}
	return j.fakeJob.Savepoint(ctx)
}

func (j slowJob) Rows() sink.Rows { return blockingRows{j.fakeJob.Rows()} }

type blockingRows struct{ sink.Rows }

func (blockingRows) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	<-ctx.Done()
	return sink.Item{}, false, ctx.Err()
}

// TestWriteTimeoutSpareLongRequests checks the two kinds of long request
// under a short WriteTimeout: an operator action may take OperatorTimeout
// and still gets its answer; a read that cannot finish in time answers 504
// before the connection's deadline instead of losing the connection.
func TestWriteTimeoutSpareLongRequests(t *testing.T) {
	f := newFakeJob(t)
	s := newTestServer(t, slowJob{fakeJob: f, delay: 600 * time.Millisecond},
		Options{AdminToken: adminTok, WriteTimeout: 300 * time.Millisecond, OperatorTimeout: 5 * time.Second})
	_, base := serve(t, s)
	c := newClient(t)

	req, _ := http.NewRequest("POST", base+"/v1/savepoints", nil)
	req.Header.Set("Authorization", "Bearer "+adminTok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/savepoints taking 600ms under a 300ms WriteTimeout: %v; want its answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /v1/savepoints: got %d, want 201", resp.StatusCode)
	}

	resp, err = c.Get(base + "/v1/ads/ad_7/hours/2026-11-29T09Z")
	if err != nil {
		t.Fatalf("GET of a row whose read never ends: %v; want a 504 answer", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), codeTimeout) {
		t.Errorf("GET of a row whose read never ends: got %d %s, want 504 %s", resp.StatusCode, body, codeTimeout)
	}
}

// TestHTTPServerSettings checks the defaults and overrides of the server's
// limits, and that an oversized header is refused.
func TestHTTPServerSettings(t *testing.T) {
	type limits struct {
		readHeader, read, write, idle time.Duration
		maxHeaderBytes                int
	}
	for _, tc := range []struct {
		name string
		o    Options
		want limits
	}{
		{"defaults", Options{}, limits{DefaultReadHeaderTimeout, DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout, DefaultMaxHeaderBytes}},
		{"set", Options{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
			IdleTimeout: 4 * time.Second, MaxHeaderBytes: 5000},
			limits{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5000}},
		// Negative turns a timeout off; an IdleTimeout of its own is kept
		// (http.Server would fall back to ReadTimeout on 0).
		{"off", Options{ReadTimeout: -1, WriteTimeout: -1, IdleTimeout: -1},
			limits{DefaultReadHeaderTimeout, 0, 0, -1, DefaultMaxHeaderBytes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.AdminToken = adminTok
			srv := newTestServer(t, newFakeJob(t), tc.o).HTTPServer()
			got := limits{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes}
			if got != tc.want {
				t.Errorf("ReadHeader, Read, Write, Idle timeouts and MaxHeaderBytes: got %v, want %v", got, tc.want)
			}
			if srv.ErrorLog == nil || srv.ConnState == nil {
				t.Errorf("ErrorLog %v, ConnState set %v: want both", srv.ErrorLog, srv.ConnState != nil)
			}
		})
	}
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok})
	_, base := serve(t, s)
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 2*DefaultMaxHeaderBytes))
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET with a %d-byte header: got %d, want 431", 2*DefaultMaxHeaderBytes, resp.StatusCode)
	}
}

// TestErrorLogIsRateLimited floods the server's ErrorLog (as an accept loop
// out of descriptors does) and checks that only a few lines a window reach
// the logger, that the next window reports how many were dropped, and
// that the metric counts them all.
func TestErrorLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	vc := clock.NewVirtual(1_000_000)
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok, Clock: vc,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))})
	srv := s.HTTPServer()
	for range 50 {
		srv.ErrorLog.Printf("http: Accept error: accept tcp 127.0.0.1:8080: accept4: too many open files; retrying in 5ms")
	}
	lines := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}
	if got := len(lines()); got != errorLogBurst {
		t.Errorf("50 errors in one window: got %d log lines, want %d:\n%s", got, errorLogBurst, buf.String())
	}
	if !strings.Contains(lines()[0], "too many open files") {
		t.Errorf("log line: got %q, want the server's message", lines()[0])
	}
	vc.Set(1_000_000 + errorLogWindow.Milliseconds())
	srv.ErrorLog.Printf("http: one more")
	l := lines()
	if len(l) != errorLogBurst+2 || !strings.Contains(l[errorLogBurst], "suppressed=40") || !strings.Contains(l[errorLogBurst+1], "one more") {
		t.Errorf("next window: got lines\n%s\nwant a count of the 40 suppressed, then the message", strings.Join(l[errorLogBurst:], "\n"))
	}
	if got := counterValue(t, s.m.serverErrors); got != 51 {
		t.Errorf("server errors counted: got %v, want 51", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
