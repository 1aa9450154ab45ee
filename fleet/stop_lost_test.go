package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
)

// stallingLeases is the lease table whose writes hang while stalled is
// set: a lease store too loaded to answer.
type stallingLeases struct {
	*leasetest.Mem
	stalled atomic.Bool
}

func (s *stallingLeases) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for s.stalled.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return s.Mem.UpdateItem(ctx, in, opt...)
}

// A range whose lease lapses while its worker stops ends without its final
// checkpoint, undrained: that is a lost range, counted and logged as one,
// and the worker's Run returns an error for it (before, it was logged at
// info as a range "stopped with the worker before it was running", not
// counted, and the worker exited as if every range had stopped cleanly).
func TestRangeLostWhileStoppingIsCounted(t *testing.T) {
	w := newWorld(t, 1, 1, kinesis.ReadPoll)
	stall := &stallingLeases{Mem: w.leases}
	w.leaseAPI = stall
	a := w.start("a")
	waitFor(t, "a to run the range", 20*time.Second, func() bool { return len(a.f.Status()) == 1 })
	stall.stalled.Store(true)
	a.cancel()
	// Past the lease's validity (400 ms): the final checkpoint cannot be
	// committed, the renewals time out, the range is lost.
	time.Sleep(1500 * time.Millisecond)
	stall.stalled.Store(false)
	if err := stopped(t, a); !errors.Is(err, lease.ErrLost) {
		t.Errorf("worker a's Run returned %v; want an error for the range that did not stop cleanly", err)
	}
	if got := counter(t, a.f.m.lost); got != 1 {
		t.Errorf("adclick_fleet_ranges_lost_total = %v after the range's lease lapsed during the stop, want 1", got)
	}
}

// A range whose source is still opening when the worker stops (an EFO
// consumer being registered, say) has read nothing: it stops as one that
// was not running yet, and the stop is clean (before, it was an error
// "did not stop cleanly", and the worker exited non-zero).
func TestRangeStoppedWhileItsSourceOpensStopsCleanly(t *testing.T) {
	w := newWorld(t, 1, 1, kinesis.ReadPoll)
	opening := make(chan struct{}, 1)
	w.openSource = func(ctx context.Context, _ source.Start) (source.Source, error) {
		opening <- struct{}{}
		<-ctx.Done()
		return nil, fmt.Errorf("test: register the consumer: %w", ctx.Err())
	}
	a := w.start("a")
	select {
	case <-opening:
	case <-time.After(20 * time.Second):
		t.Fatal("the range's source was never opened")
	}
	a.cancel()
	if err := stopped(t, a); err != nil {
		t.Errorf("worker a's Run = %v after a stop while its source opened; want nil", err)
	}
	if got := counter(t, a.f.m.failures); got != 0 {
		t.Errorf("adclick_fleet_range_failures_total = %v, want 0", got)
	}
}

// stopped waits for the worker's Run to return, and returns its error.
func stopped(t *testing.T, wk *worker) error {
	t.Helper()
	select {
	case err := <-wk.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop", wk.id)
		return nil
	}
}
