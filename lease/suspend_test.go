package lease

import (
	"github.com/adclick/adclick/windowing"

	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// suspendable stands for the machine's two clocks: mono stops while the
// machine is suspended (Go's monotonic clock on Linux), boot goes on.
type suspendable struct {
	mu         sync.Mutex
	mono, boot time.Duration
}

func (s *suspendable) readMono() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mono
}

func (s *suspendable) readBoot() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boot, true
}

func (s *suspendable) run(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mono += d
	s.boot += d
}

func (s *suspendable) suspend(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.boot += d
}

// A holder whose machine was suspended for longer than the lease stops
// writing when it resumes, although Go's monotonic clock did not move
// meanwhile: the job lease's and a range claim's Check fail (before, the
// lease was timed on the monotonic clock alone and stayed valid, while
// another worker may have taken it).
func TestSuspendEndsTheLease(t *testing.T) {
	ctx := context.Background()
	s := &suspendable{boot: 5 * time.Hour}
	clk := newSystemClock(s.readMono, s.readBoot)
	l := mustAcquire(t, newTable(t), opts("a", clk))
	w := newWorker(t, newTable(t), testTable, "w", clk)
	r := Range{From: 0, To: 64}
	if err := w.Setup(ctx, []Range{r, {From: 64, To: windowing.MaxParallelism}}); err != nil {
		t.Fatal(err)
	}
	c := mustTake(t, w, itemOf(t, mustScan(t, w), RangeKey(testJob, r)))
	s.run(D / 3)
	if err := l.Check(); err != nil {
		t.Fatalf("job lease Check D/3 after its take: %v, want nil", err)
	}
	if err := c.Check(); err != nil {
		t.Fatalf("claim Check D/3 after its take: %v, want nil", err)
	}
	s.suspend(D)
	if got := clk.Now(); got != D/3+D {
		t.Errorf("Now after a suspend of %v: got %v, want %v", D, got, D/3+D)
	}
	wantLost(t, "job lease Check after a suspend longer than the lease", l.Check())
	wantLost(t, "claim Check after a suspend longer than the lease", c.Check())
}

// The system clock's readings never go back, and they rise with the
// boot-time clock where there is one.
func TestSystemClockRises(t *testing.T) {
	clk := SystemClock()
	a := clk.Now()
	time.Sleep(2 * time.Millisecond)
	b := clk.Now()
	if b < a+2*time.Millisecond {
		t.Errorf("Now: %v then %v after sleeping 2ms, want at least 2ms more", a, b)
	}
	if _, ok := bootClock(); !ok && runtime.GOOS == "linux" {
		t.Error("bootClock: no boot-time clock on this machine")
	}
}
