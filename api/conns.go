package api

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Listener wraps ln so that at most Options.MaxConnections of its
// connections are open at once (default DefaultMaxConnections; negative =
// no cap). Serve the http.Server of HTTPServer on it: that server's
// ConnState hook tells the listener which connections are idle between
// requests.
//
// At the cap, a new connection first takes the place of the connection
// that has been idle (keep-alive, between requests) the longest, which is
// closed: an idle connection costs its client only a reconnect (HTTP
// clients retry an idempotent request on a connection closed while idle),
// and a crowd of idle keep-alive connections, such as 20,000 health
// checks that never hang up, cannot lock everyone else out. When no open
// connection is idle (every one is in a request, or silent since it
// connected: ReadHeaderTimeout ends those), the new connection is closed
// as soon as it is accepted and counted in
// adclick_http_connections_refused_total (the first few a window are
// logged). Refusing rather than blocking Accept (as
// golang.org/x/net/netutil.LimitListener does) frees the descriptor at
// once and tells the client at once, instead of leaving connections queued
// in the kernel's backlog with no timeout of ours, behind connections that
// may stay open for IdleTimeout; the refusals show in the metric.
//
// adclick_http_connections_open is the number open. The returned listener
// is safe for concurrent use.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: s.conns, log: s.connLog}
}

// connLimit counts open connections against a cap and knows which are
// idle. It is safe for concurrent use.
type connLimit struct {
	limit int // ≤ 0: no cap
	m     *metrics

	mu   sync.Mutex
	open int
	idle map[*limitConn]uint64 // idle connections, by when they became idle (seq)
	seq  uint64
}

func newConnLimit(limit int, m *metrics) *connLimit {
	return &connLimit{limit: limit, m: m, idle: map[*limitConn]uint64{}}
}

// acquire takes a slot for a new connection: a free one, or that of the
// longest-idle connection, which it closes. It reports false when the cap
// is reached and no connection is idle.
func (l *connLimit) acquire() bool {
	l.mu.Lock()
	if l.limit <= 0 || l.open < l.limit {
		l.open++
		l.mu.Unlock()
		l.m.connsOpen.Inc()
		return true
	}
	var victim *limitConn
	for {
		victim = nil
		for c, at := range l.idle {
			if victim == nil || at < l.idle[victim] {
				victim = c
			}
		}
		if victim == nil {
			break
		}
		delete(l.idle, victim)
		// Take over its slot, unless it is releasing it right now.
		if victim.released.CompareAndSwap(false, true) {
			break
		}
	}
	l.mu.Unlock()
	if victim == nil {
		l.m.connsRefused.Inc()
		return false
	}
	victim.Conn.Close() // its server goroutine sees the error and ends
	l.m.connsIdleClosed.Inc()
	return true
}

// release frees c's slot, once.
func (l *connLimit) release(c *limitConn) {
	if !c.released.CompareAndSwap(false, true) {
		return // released already, or its slot was taken over
	}
	l.mu.Lock()
	l.open--
	delete(l.idle, c)
	l.mu.Unlock()
	l.m.connsOpen.Dec()
}

// state is the http.Server's ConnState hook: it tracks which connections
// are idle between requests.
func (l *connLimit) state(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok || c.l != l {
		return
	}
	switch st {
	case http.StateIdle:
		l.mu.Lock()
		if !c.released.Load() {
			l.seq++
			l.idle[c] = l.seq
		}
		l.mu.Unlock()
	case http.StateActive, http.StateHijacked:
		l.mu.Lock()
		delete(l.idle, c)
		l.mu.Unlock()
	case http.StateClosed:
		l.release(c)
	}
}

// limitListener is the listener of Server.Listener.
type limitListener struct {
	net.Listener
	l   *connLimit
	log *rateLog
}

// Accept returns the next connection that gets a slot; connections that
// get none are closed (see Server.Listener).
func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ln.l.acquire() {
			return &limitConn{Conn: c, l: ln.l}, nil
		}
		ln.log.print("remote", c.RemoteAddr().String(), "max_connections", ln.l.limit)
		c.Close()
	}
}

// limitConn is a connection holding a slot until it is closed.
type limitConn struct {
	net.Conn
	l        *connLimit
	released atomic.Bool // its slot is freed or taken over
}

// Close closes the connection and frees its slot.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.l.release(c)
	return err
}
