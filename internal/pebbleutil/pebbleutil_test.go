package pebbleutil

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestGateCloseWaitsAndRefuses(t *testing.T) {
	errClosed := errors.New("closed")
	g := &Gate{Closed: errClosed}
	if err := g.Enter(); err != nil {
		t.Fatalf("Enter on an open gate: %v", err)
	}
	done := make(chan error)
	go func() { done <- g.Close() }()
	select {
	case <-done:
		t.Fatal("Close returned while an operation was running")
	case <-time.After(50 * time.Millisecond):
	}
	// A nested operation started while Close waits is refused, not blocked.
	if err := g.Enter(); !errors.Is(err, errClosed) {
		t.Fatalf("Enter while closing: got %v, want %v", err, errClosed)
	}
	g.Leave()
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := g.Close(); !errors.Is(err, errClosed) {
		t.Fatalf("second Close: got %v, want %v", err, errClosed)
	}
}

// TestFatalfIsACleanExit: a fatal Pebble error (a full disk fails the
// write-ahead log's commit) goes to Fatal with the error and advice, not to
// a panic and a goroutine dump. Before, Fatalf panicked.
func TestFatalfIsACleanExit(t *testing.T) {
	old := Fatal
	defer func() { Fatal = old }()
	var gotMsg string
	var gotErr error
	type exited struct{}
	Fatal = func(msg string, err error) {
		gotMsg, gotErr = msg, err
		panic(exited{}) // stands in for os.Exit
	}
	enospc := &os.PathError{Op: "write", Path: "wal/000001.log", Err: syscall.ENOSPC}
	func() {
		defer func() {
			if r := recover(); r != (exited{}) {
				t.Fatalf("Fatalf ended with %v, want a call of Fatal", r)
			}
		}()
		Logger{Prefix: "state"}.Fatalf("pebble: fatal commit error: %v", enospc)
	}()
	if !errors.Is(gotErr, syscall.ENOSPC) || !strings.Contains(gotMsg, "fatal commit error") {
		t.Fatalf("Fatal got %q, %v; want the message and the ENOSPC error", gotMsg, gotErr)
	}
	if m := FatalMessage(gotMsg, gotErr); !strings.Contains(m, "disk under --data is full") {
		t.Fatalf("FatalMessage = %q, want advice for a full disk", m)
	}
}

// TestErrorLogIsRateLimited: a repeating Pebble error (2 million "too many
// open files" lines in two minutes, in one audit) passes errorBurst times
// per window, and the next line that passes counts the dropped ones.
func TestErrorLogIsRateLimited(t *testing.T) {
	var l limiter
	t0 := time.Unix(1000, 0)
	passed := 0
	for i := range 1000 {
		if _, ok := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			passed++
		}
	}
	if passed != errorBurst {
		t.Fatalf("%d of 1000 lines in one window passed, want %d", passed, errorBurst)
	}
	dropped, ok := l.allow(t0.Add(errorWindow))
	if !ok || dropped != 1000-errorBurst {
		t.Fatalf("first line of the next window: ok %v, dropped %d; want true, %d", ok, dropped, 1000-errorBurst)
	}
}
