//go:build integration

package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The conditional writes of range leases against dynalite: the same
// scenario as TestRangeWritesOnMem, so that Mem and DynamoDB's stand-in
// are held to the same conditions.
func TestDynaliteRangeWrites(t *testing.T) {
	c := localClient(t)
	runWritesScenario(t, c, freshTable(t, c))
}

// A malformed item is left out of a scan of dynalite as of Mem.
func TestDynaliteScanSkipsAMalformedItem(t *testing.T) {
	c := localClient(t)
	runMalformedScan(t, c, freshTable(t, c))
}

// A scan of several pages, with the job's filter, and other jobs' items
// beside.
func TestDynaliteRangeScan(t *testing.T) {
	ctx := context.Background()
	c := localClient(t)
	table := freshTable(t, c)
	clk := newFakeClock()
	w := newWorker(t, c, table, "a", clk)
	other, err := NewWorker(c, WorkerOptions{Table: table, Job: testJob + "-other", ID: "b", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ranges, _ := EvenRanges(16)
	if err := w.Setup(ctx, ranges); err != nil {
		t.Fatal(err)
	}
	if err := other.Setup(ctx, []Range{AllKeyGroups}); err != nil {
		t.Fatal(err)
	}
	paged := &pagingAPI{RangeAPI: c, limit: 3}
	s := mustScan(t, newWorker(t, paged, table, "c", clk))
	if len(s.Items) != 16 || s.Map == nil || len(s.Map.Ranges) != 16 || paged.pages < 6 {
		t.Errorf("paged scan: %d items, map %v, %d pages; want 16 items, 16 ranges, at least 6 pages", len(s.Items), s.Map, paged.pages)
	}
	seen := map[Range]bool{}
	for _, it := range s.Items {
		seen[it.Range] = true
	}
	for _, r := range ranges {
		if !seen[r] {
			t.Errorf("range %v missing from the scan", r)
		}
	}
}

// On the real clock: a worker holding both ranges renews them with Run;
// a second worker asks for one, the holder hands it off when its balancer
// says so, and the asker takes it at once.
func TestDynaliteRangeHandoff(t *testing.T) {
	ctx := context.Background()
	c := localClient(t)
	table := freshTable(t, c)
	mk := func(id string) *Worker {
		w, err := NewWorker(c, WorkerOptions{Table: table, Job: testJob, ID: id, Duration: dynaliteD})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b := mk("a"), mk("b")
	if err := a.Setup(ctx, []Range{{From: 0, To: 64}, {From: 64, To: 128}}); err != nil {
		t.Fatal(err)
	}
	o := BalanceOptions{Duration: dynaliteD}
	wa, wb := NewWatcher(), NewWatcher()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	slots := make(chan error, 2)
	// Each worker takes a slot first: a worker without one is not live to
	// the others, and its requests are removed rather than honoured.
	var slotClaims []*Claim
	takeSlot := func(w *Worker) {
		t.Helper()
		s, err := w.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		it, ok := ChooseSlot(NewWatcher().Observe(s), testJob, s.At, 4, o)
		if !ok {
			t.Fatal("no slot")
		}
		sl, err := w.Take(ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		slotClaims = append(slotClaims, sl)
		go func() { slots <- sl.Run(runCtx) }()
	}
	takeSlot(a)
	s, err := a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan := Balance(wa.Observe(s), "a", s.At, o)
	if len(plan.Take) != 2 {
		t.Fatalf("a's first plan %+v, want both ranges", plan)
	}
	held := map[string]*Claim{}
	for _, it := range plan.Take {
		cl, err := a.Take(ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		held[it.Key] = cl
		go func() { done <- cl.Run(runCtx) }()
	}
	takeSlot(b)
	time.Sleep(2 * dynaliteD) // renewals keep the claims
	for k, cl := range held {
		if err := cl.Check(); err != nil {
			t.Fatalf("Check of %s after 2D of renewals: %v", k, err)
		}
	}
	s, err = b.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan = Balance(wb.Observe(s), "b", s.At, o)
	if plan.Ask == nil || len(plan.Take) != 0 {
		t.Fatalf("b's plan %+v, want one ask and nothing to take", plan)
	}
	if err := b.AskHandoff(ctx, *plan.Ask); err != nil {
		t.Fatal(err)
	}
	asked := plan.Ask.Key
	// The holder sees the request at its next renewal.
	deadline := time.Now().Add(2 * dynaliteD)
	for held[asked].HandoffTo() != "b" {
		if time.Now().After(deadline) {
			t.Fatalf("the holder did not see the request within 2D")
		}
		time.Sleep(dynaliteD / 10)
	}
	s, err = a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan = Balance(wa.Observe(s), "a", s.At, o)
	if len(plan.HandOff) != 1 || plan.HandOff[0].Key != asked {
		t.Fatalf("a's plan %+v, want %s handed off", plan, asked)
	}
	if err := held[asked].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run after Release: %v", err)
	}
	start := time.Now()
	s, err = b.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan = Balance(wb.Observe(s), "b", s.At, o)
	if len(plan.Take) != 1 || plan.Take[0].Key != asked {
		t.Fatalf("b's plan %+v, want %s taken", plan, asked)
	}
	cb, err := b.Take(ctx, plan.Take[0])
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > dynaliteD/2 {
		t.Errorf("the handoff took %v after the release, want no wait", d)
	}
	if cb.Fence() <= held[asked].Fence() {
		t.Errorf("the asker's fence %d, want above the holder's %d", cb.Fence(), held[asked].Fence())
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	for k, cl := range held {
		if k != asked {
			if err := cl.Release(ctx); err != nil {
				t.Errorf("Release %s: %v", k, err)
			}
		}
	}
	if err := cb.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	for range slotClaims {
		if err := <-slots; err != nil {
			t.Errorf("a slot's Run: %v", err)
		}
	}
	for _, sl := range slotClaims {
		if err := sl.Release(ctx); err != nil {
			t.Errorf("slot Release: %v", err)
		}
	}
}
