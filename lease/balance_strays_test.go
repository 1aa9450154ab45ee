package lease

import (
	"github.com/adclick/adclick/lease/leasetest"
	"github.com/adclick/adclick/windowing"

	"context"
	"strings"
	"testing"
	"time"
)

// Only the ranges the ranges map lists are taken: a job lease 0-128 left
// by a single process beside ranges set up later is never taken, though it
// looks like a free range.
func TestBalanceTakesOnlyMappedRanges(t *testing.T) {
	s := snapshot(t, slots("a"), free(2))
	s.Map = &RangesMap{Ranges: []Range{s.Leases[0].Range, s.Leases[1].Range}, Version: 1}
	all := Range{From: 0, To: windowing.MaxParallelism}
	s.Leases = append(s.Leases, Watched{Item: Item{Key: RangeKey("j", all), Kind: KindRange, Exists: true, Range: all,
		Counter: 4, State: StateActive, Duration: D}, Since: bnow - 3*D, HandoffSince: bnow - 3*D})
	p := Balance(s, "a", bnow, BalanceOptions{Duration: D})
	if len(p.Take) != 2 {
		t.Fatalf("took %s, want the two mapped ranges", describe(s, p.Take))
	}
	for _, it := range p.Take {
		if it.Range == all {
			t.Errorf("took %s, which the ranges map does not list", it.Key)
		}
	}
	if p.Target != 2 {
		t.Errorf("target %d, want 2 (the unmapped item does not count)", p.Target)
	}
}

// A range free for the handoff timeout is taken whatever the target (its
// would-be taker may be gone, or be the worker it fails on); one free for
// less is taken only below the target.
func TestBalanceTakesAStrayRangeAboveTarget(t *testing.T) {
	o := BalanceOptions{Duration: D}
	for _, tc := range []struct {
		name     string
		freeFor  time.Duration
		wantTake bool
	}{
		{"just freed", 0, false},
		{"free for less than the handoff timeout", 2*D - time.Millisecond, false},
		{"free for the handoff timeout", 2 * D, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two workers, three ranges: a holds two (its target), b one and
			// the last is free; b is the one it keeps failing on.
			s := snapshot(t, slots("a", "b"), held("a", 2), held("b", 1), []rv{{watched: tc.freeFor}})
			if tc.freeFor == 0 {
				s.Leases[3].Since = bnow
			}
			p := Balance(s, "a", bnow, o)
			took := len(p.Take) == 1 && p.Take[0].Key == s.Leases[3].Key
			if took != tc.wantTake || (!tc.wantTake && len(p.Take) > 0) {
				t.Errorf("a at its target took %s; want the stray taken: %v", describe(s, p.Take), tc.wantTake)
			}
		})
	}
}

// Setup refuses a job that ran as a single process, and a single process
// refuses a job set up as a fleet: the two lease models must not share a
// job's ads.
func TestFleetAndSingleProcessExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	mem := leasetest.NewMem()
	if err := CreateTable(ctx, mem, "leases"); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(ctx, mem, Options{Table: "leases", Job: "single"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	w, err := NewWorker(mem, WorkerOptions{Table: "leases", Job: "single"})
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := EvenRanges(4)
	if err := w.Setup(ctx, rs); err == nil || !strings.Contains(err.Error(), "ran as a single process") {
		t.Errorf("setup of a single process's job: %v, want a refusal", err)
	}
	fw, err := NewWorker(mem, WorkerOptions{Table: "leases", Job: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Setup(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := fw.Setup(ctx, rs); err != nil {
		t.Errorf("setup again with the same ranges: %v, want it idempotent", err)
	}
	if _, err := Acquire(ctx, mem, Options{Table: "leases", Job: "fleet"}); err == nil || !strings.Contains(err.Error(), "is a fleet") {
		t.Errorf("a single process on a fleet's job: %v, want a refusal", err)
	}
}
