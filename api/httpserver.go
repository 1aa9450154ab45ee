package api

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/clock"
)

// Defaults of the Options that configure the http.Server of HTTPServer and
// the listener of Listener.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 30 * time.Second
	DefaultMaxHeaderBytes    = 32 << 10
	// DefaultMaxConnections is the default connection cap: far above what
	// dashboards, probes, Prometheus and operators use (tens), far below a
	// process's descriptor limit (often 1,024 soft, which Pebble shares).
	DefaultMaxConnections = 256
)

// The ErrorLog's rate limit: at most errorLogBurst lines per errorLogWindow.
const (
	errorLogBurst  = 10
	errorLogWindow = 10 * time.Second
)

// HTTPServer returns an http.Server that serves s with the limits of its
// Options: ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout and
// MaxHeaderBytes, an ErrorLog that goes to Options.Logger at most
// errorLogBurst lines per errorLogWindow (every line is counted in
// adclick_http_server_errors_total), and a ConnState hook that lets the
// listener of Listener close idle connections to make room. Serve it on
// s.Listener(ln):
//
//	srv := s.HTTPServer()
//	go srv.Serve(s.Listener(ln))
//
// Each call returns a new http.Server; all share s's connection cap.
func (s *Server) HTTPServer() *http.Server {
	o := &s.opts
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       max(o.ReadTimeout, 0),
		WriteTimeout:      max(o.WriteTimeout, 0),
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          log.New(s.errLog, "", 0),
		ConnState:         s.conns.state,
	}
}

// readBudget is the context deadline of a read endpoint: WriteTimeout less
// a fifth (at most 2 s) for writing the answer, or 0 for none.
func (s *Server) readBudget() time.Duration {
	w := s.opts.WriteTimeout
	if w <= 0 {
		return 0
	}
	return w - min(w/5, 2*time.Second)
}

// readDeadline gives a read request a context deadline inside the
// server's WriteTimeout, so that a slow store read ends with a 504 answer
// the client receives, rather than with an answer the expired connection
// can no longer carry.
func (s *Server) readDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := s.readBudget(); d > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// operatorDeadline extends an operator request's write deadline by
// OperatorTimeout: a savepoint, sweep or stop may take that long, and its
// answer must still reach the caller.
func (s *Server) operatorDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.WriteTimeout > 0 {
			err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.OperatorTimeout + s.opts.WriteTimeout))
			if err != nil && !errors.Is(err, http.ErrNotSupported) {
				s.opts.Logger.Warn("api: extend the write deadline of an operator request", "err", err)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// rateLog passes at most errorLogBurst messages per errorLogWindow to a
// logger, at level Warn, and drops the rest; the first message of the next
// window that has any is preceded by the count dropped. As an io.Writer
// (for log.Logger) each Write is one message. It is safe for concurrent
// use.
type rateLog struct {
	log   *slog.Logger
	msg   string
	clock clock.Clock
	count prometheus.Counter // every message; nil = not counted

	mu         sync.Mutex
	windowMs   int64 // start of the current window, Unix ms
	passed     int   // messages passed in the window
	suppressed int   // messages dropped in the window
}

func newRateLog(l *slog.Logger, c clock.Clock, msg string, count prometheus.Counter) *rateLog {
	return &rateLog{log: l, msg: msg, clock: c, count: count, windowMs: -errorLogWindow.Milliseconds()}
}

// Write logs p (one message, trailing newlines dropped) as the attribute
// err.
func (l *rateLog) Write(p []byte) (int, error) {
	l.print("err", string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// print logs the message with the attributes args (slog's key-value
// pairs), unless the window's quota is used up.
func (l *rateLog) print(args ...any) {
	if l.count != nil {
		l.count.Inc()
	}
	now := l.clock.NowMs()
	l.mu.Lock()
	dropped := 0
	if now-l.windowMs >= errorLogWindow.Milliseconds() || now < l.windowMs {
		dropped = l.suppressed
		l.windowMs, l.passed, l.suppressed = now, 0, 0
	}
	pass := l.passed < errorLogBurst
	if pass {
		l.passed++
	} else {
		l.suppressed++
	}
	l.mu.Unlock()
	if dropped > 0 {
		l.log.Warn(l.msg+": messages dropped by the log's rate limit", "suppressed", dropped, "window", errorLogWindow)
	}
	if pass {
		l.log.Warn(l.msg, args...)
	}
}
