package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
)

// readFleetMark: the watermark of a fleet's job is the lowest its ranges
// committed, and unknown while one range has committed nothing; a job
// without a ranges map is not a fleet's.
func TestReadFleetMark(t *testing.T) {
	ctx := context.Background()
	api := leasetest.NewMem()
	if err := lease.CreateTable(ctx, api, "leases"); err != nil {
		t.Fatal(err)
	}
	w, err := lease.NewWorker(api, lease.WorkerOptions{Table: "leases", Job: "job", ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if fm, err := readFleetMark(ctx, w); err != nil || fm != nil {
		t.Fatalf("before setup: %+v, %v; want nil, nil (not a fleet)", fm, err)
	}
	rs, err := lease.EvenRanges(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Setup(ctx, rs); err != nil {
		t.Fatal(err)
	}
	scan, err := w.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims := map[lease.Range]*lease.Claim{}
	for _, it := range scan.Items {
		if it.Kind == lease.KindRange {
			c, err := w.Take(ctx, it)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release(ctx)
			claims[it.Range] = c
		}
	}
	if len(claims) != 3 {
		t.Fatalf("took %d ranges, want 3", len(claims))
	}
	commit := func(r lease.Range, id, wm int64) {
		t.Helper()
		if err := claims[r].Commit(ctx, lease.Checkpoint{ID: id, Key: "k", Watermark: wm}); err != nil {
			t.Fatal(err)
		}
	}
	commit(rs[0], 4, 9_000)
	commit(rs[2], 7, 5_000)
	fm, err := readFleetMark(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kg42-85 (no committed checkpoint yet)"}; len(fm.ranges) != 3 || !slices.Equal(fm.notReady, want) {
		t.Fatalf("ranges %v, not ready %q; want 3 ranges, %q", fm.ranges, fm.notReady, want)
	}
	commit(rs[1], 2, 7_000)
	commit(rs[0], 5, 11_000)
	if fm, err = readFleetMark(ctx, w); err != nil {
		t.Fatal(err)
	}
	if len(fm.notReady) != 0 || fm.watermark != 5_000 || fm.behind != rs[2] || fm.committed[rs[0]].ID != 5 {
		t.Errorf("not ready %q, watermark %d of %v, committed %v; want none, 5000 of %v, checkpoint 5 of %v",
			fm.notReady, fm.watermark, fm.behind, fm.committed, rs[2], rs[0])
	}
	// A fence sweep owed keeps the range's writes in doubt.
	if err := claims[rs[0]].SetSweepsDue(ctx, []lease.SweepDue{{Fence: 1, From: 3, To: 5, NotBefore: time.Unix(1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if fm, err = readFleetMark(ctx, w); err != nil {
		t.Fatal(err)
	}
	if want := []string{"kg0-42 (owes a fence sweep)"}; !slices.Equal(fm.notReady, want) {
		t.Errorf("not ready %q with a sweep owed, want %q", fm.notReady, want)
	}
}
