// Package clock supplies processing time to the runtime. The deterministic
// core never reads a clock: the runtime reads one and passes the value in.
package clock

import (
	"context"
	"sync/atomic"
	"time"
)

// Clock returns processing time in Unix milliseconds.
type Clock interface {
	NowMs() int64
}

// Real is the wall clock.
type Real struct{}

// NowMs returns the wall-clock time in Unix milliseconds.
func (Real) NowMs() int64 { return time.Now().UnixMilli() }

// Virtual is a clock that only moves when told; a file replay drives it from
// each record's arrival time. It is safe for concurrent use.
type Virtual struct{ ms atomic.Int64 }

// NewVirtual returns a virtual clock set to ms.
func NewVirtual(ms int64) *Virtual {
	v := &Virtual{}
	v.ms.Store(ms)
	return v
}

// NowMs returns the clock's time.
func (v *Virtual) NowMs() int64 { return v.ms.Load() }

// Set moves the clock to ms if ms is later than its time; it never goes back.
func (v *Virtual) Set(ms int64) {
	for {
		cur := v.ms.Load()
		if ms <= cur || v.ms.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// Sleep waits for d of real time or until ctx is done, and returns ctx's
// error in that case (or at once, for d <= 0, if ctx is done).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
