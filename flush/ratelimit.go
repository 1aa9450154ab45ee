package flush

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/adclick/adclick/clock"
)

// Clock is the time source of the drivers: the duration in the Report and
// the waits of the rate limit. Implementations must be safe for use by one
// goroutine at a time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, in which case it returns
	// ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock. It is safe for concurrent use.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx is done.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }

// bucket is a token bucket: rate tokens a second, holding at most burst.
// One token pays for one write. A request larger than what the bucket holds
// is granted by going into debt and sleeping until the debt is repaid, so
// any batch size works. Not safe for concurrent use.
type bucket struct {
	clk    Clock
	rate   float64 // tokens per second; +Inf means no limit
	burst  float64
	tokens float64
	last   time.Time
	slept  time.Duration
}

func newBucket(clk Clock, rate float64, burst int) *bucket {
	return &bucket{clk: clk, rate: rate, burst: float64(burst), tokens: float64(burst), last: clk.Now()}
}

// take waits until n writes may go ahead.
func (b *bucket) take(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n <= 0 || math.IsInf(b.rate, 1) {
		return nil
	}
	now := b.clk.Now()
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(b.burst, b.tokens+el.Seconds()*b.rate)
	}
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return nil
	}
	wait := time.Duration(math.Ceil(-b.tokens / b.rate * float64(time.Second)))
	if err := b.clk.Sleep(ctx, wait); err != nil {
		// The writes do not go ahead: give the tokens back.
		b.tokens += float64(n)
		return fmt.Errorf("flush: rate limit: %w", err)
	}
	b.slept += wait
	// The sleep repaid the debt; account from the clock's new time.
	b.last = b.clk.Now()
	b.tokens = 0
	return nil
}
