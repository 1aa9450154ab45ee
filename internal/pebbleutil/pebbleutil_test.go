package pebbleutil

import (
	"errors"
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
