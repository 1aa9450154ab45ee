// Package pebbleutil holds what the project's two Pebble users (the state
// backend and the embedded row store) share: a logger for Pebble, and a
// gate that lets Close wait for running operations.
package pebbleutil

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Logger drops Pebble's informational logs and sends its errors to slog,
// prefixed; Fatalf still stops the process, as Pebble requires.
type Logger struct{ Prefix string }

// Infof implements pebble.Logger.
func (Logger) Infof(string, ...any) {}

// Errorf implements pebble.Logger.
func (l Logger) Errorf(format string, args ...any) {
	slog.Error(l.Prefix + ": pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf implements pebble.Logger.
func (l Logger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(l.Prefix+": pebble fatal: "+format, args...))
}

// Gate lets operations run until Close, and lets Close wait for the
// running ones. Unlike a read-write mutex it allows an operation's callback
// to start another operation while Close is waiting: that one fails with
// the closed error instead of deadlocking. The zero value is open; Closed
// is the error returned once it is closed.
type Gate struct {
	Closed error

	mu     sync.Mutex
	idle   sync.Cond
	active int
	closed bool
	// shut mirrors closed for IsClosed: a load that does not write the
	// shared cache line the mutex lives on.
	shut atomic.Bool
}

// IsClosed reports whether Close has been called (it may still be waiting
// for running operations). An operation that touches
// only its caller's memory may use it instead of Enter and Leave: the
// answer can be stale by the time it returns, so anything that reaches the
// store must still Enter.
func (g *Gate) IsClosed() bool { return g.shut.Load() }

// Enter admits an operation; the caller must call Leave if it returns nil.
func (g *Gate) Enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.Closed
	}
	g.active++
	return nil
}

// Leave ends an operation admitted by Enter.
func (g *Gate) Leave() {
	g.mu.Lock()
	g.active--
	if g.active == 0 && g.closed {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

// Close refuses new operations and waits for the running ones. It returns
// the closed error if the gate was already closed.
func (g *Gate) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.Closed
	}
	g.closed = true
	g.shut.Store(true)
	if g.idle.L == nil {
		g.idle.L = &g.mu
	}
	for g.active > 0 {
		g.idle.Wait()
	}
	return nil
}
