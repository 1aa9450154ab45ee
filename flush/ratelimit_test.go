package flush

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	tests := []struct {
		name  string
		rate  float64
		burst int
		takes []int
		want  time.Duration // total sleep
	}{
		{"within burst", 10, 5, []int{1, 1, 1, 1, 1}, 0},
		{"one at a time past a burst of 1", 10, 1, repeat(1, 21), 2 * time.Second},
		{"burst then steady", 10, 5, repeat(1, 15), time.Second},
		{"batch larger than the burst goes into debt", 10, 5, []int{25}, 2 * time.Second},
		{"debt is repaid before the next batch", 100, 10, []int{110, 100}, 2 * time.Second},
		{"no limit", math.Inf(1), 1, []int{1000, 1000}, 0},
		{"zero-size take is free", 1, 1, []int{1, 0, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			b := newBucket(clk, tt.rate, tt.burst)
			for _, n := range tt.takes {
				if err := b.take(context.Background(), n); err != nil {
					t.Fatalf("take(%d): %v", n, err)
				}
			}
			if clk.slept != tt.want {
				t.Errorf("slept: got %v, want %v", clk.slept, tt.want)
			}
			if b.slept != tt.want {
				t.Errorf("bucket's own count: got %v, want %v", b.slept, tt.want)
			}
		})
	}
}

func TestBucketRefillsWithTime(t *testing.T) {
	clk := newFakeClock()
	b := newBucket(clk, 10, 5)
	ctx := context.Background()
	if err := b.take(ctx, 5); err != nil {
		t.Fatal(err)
	}
	// Ten seconds idle refill at most the burst (5), not 100 tokens.
	clk.now = clk.now.Add(10 * time.Second)
	if err := b.take(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if clk.slept != 0 {
		t.Fatalf("slept after an idle refill: got %v, want 0", clk.slept)
	}
	if err := b.take(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if want := 100 * time.Millisecond; clk.slept != want {
		t.Errorf("slept once the refill is spent: got %v, want %v", clk.slept, want)
	}
}

func TestBucketCancelled(t *testing.T) {
	clk := newFakeClock()
	b := newBucket(clk, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.take(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := b.take(ctx, 1)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("take after cancel: got %v, want context.Canceled", err)
	}
}

func TestRealClockSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := (RealClock{}).Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep with a cancelled context: got %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("cancelled sleep took %v", el)
	}
	if err := (RealClock{}).Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("short sleep: %v", err)
	}
}

func repeat(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}
