package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/lease/leasetest"
)

func TestAcquireFree(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	o := opts("a", noSleepClock{clk, t})
	l := mustAcquire(t, api, o)
	if got, want := l.Key(), "s3-bucket/checkpoints/gen-1#kg0-128"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
	if got := l.Counter(); got != 1 {
		t.Errorf("Counter() = %d, want 1", got)
	}
	if err := l.Check(); err != nil {
		t.Errorf("Check() after Acquire = %v, want nil", err)
	}
	raw := rawItem(t, api, o)
	for attr, want := range map[string]string{
		attrKey: "s3-bucket/checkpoints/gen-1#kg0-128", attrOwner: "a", attrCounter: "1", attrJob: "s3-bucket/checkpoints/gen-1",
		attrFrom: "0", attrTo: "128", attrDurationMs: "30000", attrRenewedAt: "2026-11-29T10:00:00Z",
	} {
		var got string
		switch v := raw[attr].(type) {
		case *types.AttributeValueMemberS:
			got = v.Value
		case *types.AttributeValueMemberN:
			got = v.Value
		}
		if got != want {
			t.Errorf("item attribute %s = %q, want %q", attr, got, want)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// The holder renews every D/3; a second owner watches for D, sees the
// counter move and is refused with a HeldError naming the holder.
func TestAcquireRefusedWhileHolderRenews(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	a := mustAcquire(t, api, opts("a", clk))
	run := startRun(a)
	clk.waitSleepers(t, 1) // a's Run waits for its first renewal

	b := startAcquire(api, opts("b", clk))
	clk.waitSleepers(t, 2) // and b watches
	for i := 1; i <= 3; i++ {
		if b.finished() {
			t.Fatalf("Acquire returned after %d × D/3, before watching for D", i-1)
		}
		clk.Advance(D / 3)
		if i < 3 {
			clk.waitSleepers(t, 2) // a renewed and sleeps again; b still watches
		}
	}
	_, err := b.wait(t)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: got %v, want a *HeldError", err)
	}
	if held.Owner != "a" || held.Watched != D || held.RenewedAt.IsZero() || held.Key != a.Key() {
		t.Errorf("HeldError = %+v, want owner a, watched %v, a renewed_at, key %s", *held, D, a.Key())
	}
	if !strings.Contains(err.Error(), "held by a") {
		t.Errorf("error %q does not name the holder", err)
	}
	if err := a.Check(); err != nil {
		t.Errorf("holder's Check() = %v, want nil", err)
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run after cancel: %v, want nil", err)
	}
	if got := decoded(t, api, opts("a", clk)).owner; got != "a" {
		t.Errorf("owner after the refused Acquire = %q, want a", got)
	}
}

// A holder that stops renewing is taken over after D: counter unchanged
// for D → counter+1, new owner. The old holder's Check has failed since
// 2D/3 and its next renewal finds the lease lost.
func TestTakeoverAfterHolderStops(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	oa := opts("a", clk)
	a := mustAcquire(t, api, oa) // no Run: a is "dead"
	ob := opts("b", clk)
	ob.Registerer = reg
	b := startAcquire(api, ob)
	clk.waitSleepers(t, 1)
	clk.Advance(D - time.Nanosecond)
	if b.finished() {
		t.Fatal("Acquire returned before watching for D")
	}
	clk.Advance(time.Nanosecond)
	lb, err := b.wait(t)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if got := lb.Counter(); got != 2 {
		t.Errorf("taker's counter %d, want 2 (holder's 1 + 1)", got)
	}
	it := decoded(t, api, ob)
	if it.owner != "b" || it.counter != 2 {
		t.Errorf("item owner %q counter %d, want b 2", it.owner, it.counter)
	}
	if got := counterValue(t, lb.m.takeovers); got != 1 {
		t.Errorf("takeovers = %v, want 1", got)
	}
	if err := a.Check(); !errors.Is(err, ErrLost) {
		t.Errorf("old holder's Check() after D = %v, want ErrLost", err)
	}
	err = startRun(a).wait(t) // the renewal is overdue: Run renews at once
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "taken over by b") {
		t.Errorf("old holder's Run = %v, want ErrLost naming b", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Error("Lost() not closed after the lease was lost")
	}
	if got := counterValue(t, a.m.lost); got != 1 {
		t.Errorf("old holder's lost = %v, want 1", got)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Errorf("Release of a lost lease = %v, want nil (nothing to release)", err)
	}
	if got := decoded(t, api, ob).owner; got != "b" {
		t.Errorf("owner after the old holder's Release = %q, want b", got)
	}
	if err := lb.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// Check passes for 2D/3 after the last renewal was sent, and then fails
// with ErrLost, even with no renewal attempted.
func TestCheckExpiresAtTwoThirds(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration
		ok      bool
	}{
		{0, true},
		{D / 3, true},
		{2*D/3 - time.Nanosecond, true},
		{2 * D / 3, false},
		{D, false},
	} {
		t.Run(tc.elapsed.String(), func(t *testing.T) {
			api := newTable(t)
			clk := newFakeClock()
			l := mustAcquire(t, api, opts("a", clk))
			clk.Advance(tc.elapsed)
			err := l.Check()
			if tc.ok && err != nil {
				t.Errorf("Check() after %v = %v, want nil", tc.elapsed, err)
			}
			if !tc.ok && !errors.Is(err, ErrLost) {
				t.Errorf("Check() after %v = %v, want ErrLost", tc.elapsed, err)
			}
		})
	}
}

// Renewals every D/3 keep Check passing and raise the counter each time.
func TestRenewalKeepsLease(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	o := opts("a", clk)
	o.Registerer = reg
	l := mustAcquire(t, api, o)
	run := startRun(l)
	for i := 1; i <= 9; i++ {
		clk.waitSleepers(t, 1)
		clk.Advance(D/3 - time.Nanosecond) // just before the renewal: the last is D/3 old
		if err := l.Check(); err != nil {
			t.Fatalf("before renewal %d: Check() = %v", i, err)
		}
		clk.Advance(time.Nanosecond)
		clk.waitSleepers(t, 1)
		if got, want := l.Counter(), int64(1+i); got != want {
			t.Fatalf("after %d renewals: counter %d, want %d", i, got, want)
		}
		if got := decoded(t, api, o).counter; got != int64(1+i) {
			t.Fatalf("after %d renewals: item counter %d, want %d", i, got, 1+i)
		}
	}
	if got := counterValue(t, l.m.renewals); got != 9 {
		t.Errorf("renewals = %v, want 9", got)
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Release frees the lease at once: another owner acquires it without
// watching.
func TestReleaseLetsAnotherAcquireAtOnce(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	a := mustAcquire(t, api, opts("a", clk))
	run := startRun(a)
	clk.waitSleepers(t, 1)
	clk.Advance(D / 3)
	clk.waitSleepers(t, 1) // renewed: counter 2
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := run.wait(t); err != nil {
		t.Errorf("Run after Release = %v, want nil", err)
	}
	if err := a.Check(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "released") {
		t.Errorf("Check() after Release = %v, want ErrLost (released)", err)
	}
	it := decoded(t, api, opts("a", clk))
	if it.owner != "" || it.counter != 3 {
		t.Errorf("released item: owner %q counter %d, want none 3", it.owner, it.counter)
	}
	b := mustAcquire(t, api, opts("b", noSleepClock{clk, t}))
	if got := b.Counter(); got != 4 {
		t.Errorf("counter after acquiring a released lease %d, want 4", got)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	if got := decoded(t, api, opts("b", clk)).owner; got != "b" {
		t.Errorf("owner %q after a's second Release, want b", got)
	}
}

// Several takers at once: the conditional write lets exactly one win; the
// others get a HeldError naming the winner.
func TestConcurrentTakersOneWins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dead     bool // a holder that stopped renewing exists: the takers watch it first
		released bool // a holder that released the lease exists
	}{
		{name: "new item"},
		{name: "released item", released: true},
		{name: "takeover of a dead holder", dead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newTable(t)
			clk := newFakeClock()
			if tc.dead || tc.released {
				h := mustAcquire(t, api, opts("holder", clk))
				if tc.released {
					if err := h.Release(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			const n = 8
			var takers []*acquiring
			for i := range n {
				takers = append(takers, startAcquire(api, opts(fmt.Sprintf("taker-%d", i), clk)))
			}
			// settle waits until every taker has returned or watches.
			settle := func(extra int) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					finished := 0
					for _, a := range takers {
						if a.finished() {
							finished++
						}
					}
					if finished+clk.sleeping() == n+extra {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d takers returned and %d goroutines sleep, want %d in all", finished, clk.sleeping(), n+extra)
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			if tc.dead {
				clk.waitSleepers(t, n) // every taker watches the dead holder
				clk.Advance(D)
			} else if settle(0); clk.sleeping() > 0 {
				// Takers that read the lease after the winner took it watch
				// it: the winner renews, so they must be refused.
				var winner *Lease
				for _, a := range takers {
					if a.finished() && a.err == nil {
						winner = a.l
					}
				}
				if winner == nil {
					t.Fatal("some takers watch, but none has won")
				}
				run := startRun(winner)
				defer run.stop(t)
				settle(1)
				for range 3 {
					clk.Advance(D / 3)
					settle(1)
				}
			}
			var won []*Lease
			var heldBy []string
			for _, a := range takers {
				l, err := a.wait(t)
				var held *HeldError
				switch {
				case err == nil:
					won = append(won, l)
				case errors.As(err, &held):
					heldBy = append(heldBy, held.Owner)
				default:
					t.Errorf("Acquire: %v, want success or a HeldError", err)
				}
			}
			if len(won) != 1 {
				t.Fatalf("%d takers won, want exactly 1", len(won))
			}
			for _, h := range heldBy {
				if h != won[0].Owner() {
					t.Errorf("a loser was told the lease is held by %q, want the winner %q", h, won[0].Owner())
				}
			}
			if got := decoded(t, api, opts("x", clk)).owner; got != won[0].Owner() {
				t.Errorf("item owner %q, want the winner %q", got, won[0].Owner())
			}
			if err := won[0].Check(); err != nil {
				t.Errorf("winner's Check() = %v", err)
			}
		})
	}
}

// A taker watches at least the holder's own duration, when it is longer.
func TestWatchUsesHolderDuration(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	oa := opts("a", clk)
	oa.Duration = 2 * D
	mustAcquire(t, api, oa)
	b := startAcquire(api, opts("b", clk))
	clk.waitSleepers(t, 1)
	clk.Advance(D)
	time.Sleep(5 * time.Millisecond) // let a wrongly woken watcher act
	if b.finished() || clk.sleeping() != 1 {
		t.Fatal("the taker stopped watching after its own duration, before the holder's")
	}
	clk.Advance(D)
	if _, err := b.wait(t); err != nil {
		t.Fatalf("takeover after the holder's duration: %v", err)
	}
}

// Failed renewals are retried within the validity and keep the lease.
func TestRenewalRetriesTransientErrors(t *testing.T) {
	mem := newTable(t)
	api := &faultAPI{API: mem}
	clk := newFakeClock()
	o := opts("a", clk)
	o.Registerer = prometheus.NewRegistry()
	l := mustAcquire(t, api, o)
	fails := 5
	api.setUpdate(func(context.Context, *dynamodb.UpdateItemInput) (bool, error) {
		if fails > 0 {
			fails--
			return true, errTransient
		}
		return false, nil
	})
	run := startRun(l)
	clk.waitSleepers(t, 1)
	clk.Advance(D / 3) // the renewal fails, and is retried every D/30
	for range 5 {
		clk.waitSleepers(t, 1)
		if err := l.Check(); err != nil {
			t.Fatalf("Check() while retrying within the validity: %v", err)
		}
		clk.Advance(D / 30)
	}
	clk.waitSleepers(t, 1)
	if got := l.Counter(); got != 2 {
		t.Errorf("counter after the retried renewal %d, want 2", got)
	}
	if got := counterValue(t, l.m.failures); got != 5 {
		t.Errorf("renewal failures = %v, want 5", got)
	}
	if err := l.Check(); err != nil {
		t.Errorf("Check() after the retried renewal: %v", err)
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Renewals failing for the whole validity lose the lease (ErrLost), which
// Release still frees, since nobody took it.
func TestRenewalFailingPastValidityLoses(t *testing.T) {
	mem := newTable(t)
	api := &faultAPI{API: mem}
	clk := newFakeClock()
	o := opts("a", clk)
	l := mustAcquire(t, api, o)
	api.setUpdate(func(context.Context, *dynamodb.UpdateItemInput) (bool, error) { return true, errTransient })
	run := startRun(l)
	guarded, cancel := l.Guard(context.Background())
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-run.done:
			if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "no renewal succeeded") {
				t.Errorf("Run = %v, want ErrLost (not renewed in time)", err)
			}
			if now := clk.Now(); now < 2*D/3 {
				t.Errorf("lost at %v, before the validity (%v) was over", now, 2*D/3)
			}
			select {
			case <-guarded.Done():
				if !errors.Is(context.Cause(guarded), ErrLost) {
					t.Errorf("guarded context's cause %v, want ErrLost", context.Cause(guarded))
				}
			case <-time.After(5 * time.Second):
				t.Error("a guarded context outlived the lease")
			}
			api.setUpdate(nil)
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("Release after expiry: %v", err)
			}
			mustAcquire(t, api, opts("b", noSleepClock{clk, t}))
			return
		default:
		}
		switch {
		case clk.Now() > D:
			run.stop(t)
			t.Fatal("Run kept the lease for D without a successful renewal")
		case time.Now().After(deadline):
			t.Fatal("Run neither slept nor returned")
		case clk.sleeping() == 1:
			clk.Advance(D / 30)
		default:
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// A write applied by DynamoDB whose answer was lost is recognised as this
// holder's own (its owner string) and adopted, not taken for a takeover.
func TestLostAnswerAdopted(t *testing.T) {
	mem := newTable(t)
	api := &faultAPI{API: mem}
	clk := newFakeClock()
	o := opts("a", clk)
	lose := 1
	lostAnswer := func(ctx context.Context, in *dynamodb.UpdateItemInput) (bool, error) {
		if lose > 0 {
			lose--
			if _, err := mem.UpdateItem(ctx, in); err != nil {
				return true, err
			}
			return true, errTransient // applied, but the caller hears an error
		}
		return false, nil
	}
	api.setUpdate(lostAnswer)
	l, err := Acquire(context.Background(), api, o)
	if err != nil {
		t.Fatalf("Acquire whose answer was lost: %v", err)
	}
	if got, want := l.Counter(), decoded(t, mem, o).counter; got != want || got != 2 {
		t.Errorf("counter %d, item counter %d, want both 2 (take + confirmation)", got, want)
	}

	lose = 1
	run := startRun(l)
	clk.waitSleepers(t, 1)
	clk.Advance(D / 3) // the renewal applies but fails; the retry is refused, adopted, renewed
	clk.waitSleepers(t, 1)
	clk.Advance(D / 30)
	clk.waitSleepers(t, 1)
	if err := l.Check(); err != nil {
		t.Fatalf("Check() after an adopted renewal: %v", err)
	}
	if got, want := l.Counter(), decoded(t, mem, o).counter; got != want || got != 4 {
		t.Errorf("counter %d, item counter %d, want both 4", got, want)
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	lose = 1
	if err := l.Release(context.Background()); err == nil {
		t.Error("Release whose answer was lost reported success") // errTransient is not retried by Release
	}
	if err := l.Release(context.Background()); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if it := decoded(t, mem, o); it.owner != "" {
		t.Errorf("owner %q after Release, want none", it.owner)
	}
}

func TestRunTwice(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	l := mustAcquire(t, api, opts("a", clk))
	run := startRun(l)
	clk.waitSleepers(t, 1)
	if err := l.Run(context.Background()); err == nil {
		t.Error("a second concurrent Run returned nil, want an error")
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// A cancelled Acquire stops watching and returns the context's error.
func TestAcquireCancelledWhileWatching(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	mustAcquire(t, api, opts("a", clk))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Acquire(ctx, api, opts("b", clk))
		done <- err
	}()
	clk.waitSleepers(t, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire = %v, want context.Canceled", err)
	}
}

// Metrics of a lease key registered by an earlier Acquire are reused.
func TestMetricsReused(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	o := opts("a", clk)
	o.Registerer = reg
	a := mustAcquire(t, api, o)
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	o.Owner = "a2"
	mustAcquire(t, api, o)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "adclick_lease_") {
			got = append(got, fmt.Sprintf("%s{lease=%s}", mf.GetName(), mf.GetMetric()[0].GetLabel()[0].GetValue()))
		}
	}
	want := []string{"adclick_lease_lost_total{lease=" + a.Key() + "}", "adclick_lease_renewal_failures_total{lease=" + a.Key() + "}",
		"adclick_lease_renewals_total{lease=" + a.Key() + "}", "adclick_lease_takeovers_total{lease=" + a.Key() + "}"}
	if !slices.Equal(got, want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
}

// Errors Acquire cannot handle are returned wrapped, and typed errors stay
// matchable.
func TestAcquireReadError(t *testing.T) {
	_, err := Acquire(context.Background(), leasetest.NewMem(), opts("a", newFakeClock()))
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.HasPrefix(err.Error(), "lease: ") {
		t.Errorf("Acquire on a missing table = %v, want a lease: error wrapping ResourceNotFoundException", err)
	}
}

// Many renewals and Checks at once, for the race detector.
func TestConcurrentChecks(t *testing.T) {
	api := newTable(t)
	clk := newFakeClock()
	l := mustAcquire(t, api, opts("a", clk))
	run := startRun(l)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.Check(); err != nil {
					t.Errorf("Check: %v", err)
					return
				}
				_, cancel := l.Guard(context.Background())
				cancel()
				_ = l.Counter()
			}
		})
	}
	for range 20 {
		clk.waitSleepers(t, 1)
		clk.Advance(D / 3)
	}
	clk.waitSleepers(t, 1)
	close(stop)
	wg.Wait()
	if err := run.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := l.Counter(); got != 21 {
		t.Errorf("counter %d, want 21", got)
	}
}
