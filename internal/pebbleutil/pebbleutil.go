// Package pebbleutil holds what the project's two Pebble users (the state
// backend and the embedded row store) share: a logger for Pebble, and a
// gate that lets Close wait for running operations.
package pebbleutil

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Logger drops Pebble's informational logs and sends its errors to slog,
// prefixed; Fatalf still stops the process, as Pebble requires, through
// Fatal.
type Logger struct{ Prefix string }

// Fatal ends the process after a fatal Pebble error (a failed commit to the
// write-ahead log, for example on a full disk): Pebble cannot go on, and
// must not be returned to. msg is the whole message; err is the error among
// Pebble's arguments, if any. The default prints one line — with what to do
// when the disk is full — and exits with status 1: a clean error exit that
// a supervisor restarts, and that a restart repairs like any crash (the
// state is restored from the last checkpoint). Tests replace it.
var Fatal = func(msg string, err error) {
	fmt.Fprintln(os.Stderr, "adclick: fatal:", FatalMessage(msg, err))
	os.Exit(1)
}

// FatalMessage returns msg with advice for the errors an operator can act
// on.
func FatalMessage(msg string, err error) string {
	if errors.Is(err, syscall.ENOSPC) {
		return msg + " (the disk under --data is full: free space there and start again; the job resumes from its last checkpoint)"
	}
	return msg
}

// Infof implements pebble.Logger.
func (Logger) Infof(string, ...any) {}

// Errorf implements pebble.Logger. A failure that repeats (a background
// compaction retrying while descriptors are exhausted) is logged at most
// errorBurst times per errorWindow, process-wide; the next line that passes
// says how many were dropped.
func (l Logger) Errorf(format string, args ...any) {
	if n, ok := errorLimit.allow(time.Now()); ok {
		msg := l.Prefix + ": pebble: " + fmt.Sprintf(format, args...)
		if n > 0 {
			slog.Error(msg, "dropped_since_last", n)
			return
		}
		slog.Error(msg)
	}
}

const (
	errorBurst  = 10
	errorWindow = 10 * time.Second
)

var errorLimit limiter

// limiter passes at most errorBurst events per errorWindow and counts the
// ones it drops.
type limiter struct {
	mu      sync.Mutex
	start   time.Time
	n       int
	dropped int
}

// allow reports whether an event at now passes, and how many were dropped
// before it.
func (l *limiter) allow(now time.Time) (dropped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= errorWindow {
		l.start, l.n = now, 0
	}
	if l.n >= errorBurst {
		l.dropped++
		return 0, false
	}
	l.n++
	dropped, l.dropped = l.dropped, 0
	return dropped, true
}

// Fatalf implements pebble.Logger: it calls Fatal, which does not return.
func (l Logger) Fatalf(format string, args ...any) {
	var err error
	for _, a := range args {
		if e, ok := a.(error); ok {
			err = e
			break
		}
	}
	msg := fmt.Sprintf(l.Prefix+": pebble fatal: "+format, args...)
	slog.Error(msg)
	Fatal(msg, err)
	panic(msg) // Fatal must not return; if a replacement does, stop here
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
