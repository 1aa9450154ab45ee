package flush

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// branchB builds the table of seed 001's branch B after both versions wrote
// (v1 = gen 7, v2 = gen 8, savepoint 51), with a running total v1 wrote.
func branchB(t testing.TB) (*sinktest.MemRows, *sinktest.MemTotals) {
	t.Helper()
	rows := sinktest.NewMemRows()
	k := func(ad, b string) sink.Key { return sink.Key{Entity: ad, Bucket: b} }
	mustPut(t, rows,
		sink.Put{Key: k("ad_7", minute("10:19")), Writer: sink.Fast, Valid: 9, Epoch: 50, Gen: 7},
		sink.Put{Key: k("ad_9", minute("10:19")), Writer: sink.Fast, Valid: 3, Epoch: 51, Gen: 8},
		sink.Put{Key: k("ad_3", minute("10:20")), Writer: sink.Fast, Valid: 1, Epoch: 52, Gen: 7},
		sink.Put{Key: k("ad_4", minute("10:20")), Writer: sink.Fast, Valid: 1, Epoch: 51, Gen: 7},
		sink.Put{Key: k("ad_7", minute("10:20")), Writer: sink.Fast, Valid: 4, Epoch: 52, Gen: 8},
		sink.Put{Key: k("ad_9", hour("10")), Writer: sink.Late, Valid: 1, Epoch: 51, Gen: 8},
		sink.Put{Key: k("ad_7", hour("10")), Writer: sink.Late, Valid: 1, Epoch: 52, Gen: 7},
		sink.Put{Key: k("ad_7", hour("10")), Writer: sink.Fast, Valid: 30, Epoch: 53, Gen: 8},
		sink.Put{Key: k("ad_5", hour("10")), Writer: sink.Fast, Valid: 12, Epoch: 53, Gen: 7},
	)
	totals := sinktest.NewMemTotals()
	ms, _, _ := sink.ParseBucket(minute("10:20"))
	if err := totals.SetTotals(context.Background(), []sink.Total{{Ad: "ad_3", StartMs: ms, Valid: 1, Epoch: 52}}); err != nil {
		t.Fatal(err)
	}
	return rows, totals
}

func sweepOpts() SweepOptions {
	return SweepOptions{Gen: 7, Since: 51, High: 53, WritesPerSec: math.Inf(1), Clock: newFakeClock()}
}

func TestSweepBranchB(t *testing.T) {
	rows, totals := branchB(t)
	totalsBefore := dumpTotalsOf(t, totals)
	rep, err := Sweep(context.Background(), rows, totals, sweepOpts())
	if err != nil {
		t.Fatal(err)
	}
	// Eight attribute groups are tagged 51..53; ad_7/M10:19 (50) is not read.
	want := Report{ItemsScanned: 8, ItemsDeleted: 2, AttrsRemoved: 2, Epochs: 3}
	if rep != want {
		t.Errorf("report: got %+v, want %+v", rep, want)
	}
	ix := func(e int64, ad, b string) string { return sink.IndexKey(e, sink.Key{Entity: ad, Bucket: b}) }
	wantRows := "ad_5/H10 job_gen=7 (no attributes)\n" +
		"ad_7/H10 job_gen=8 fast{valid=30 spend=0 ckpt=53 ix=" + ix(53, "ad_7", hour("10")) + " gen=8}\n" +
		"ad_7/M10:19 job_gen=7 fast{valid=9 spend=0 ckpt=50 ix=" + ix(50, "ad_7", minute("10:19")) + " gen=7}\n" +
		"ad_7/M10:20 job_gen=8 fast{valid=4 spend=0 ckpt=52 ix=" + ix(52, "ad_7", minute("10:20")) + " gen=8}\n" +
		"ad_9/H10 job_gen=8 late{valid=1 spend=0 ckpt=51 ix=" + ix(51, "ad_9", hour("10")) + " gen=8}\n" +
		"ad_9/M10:19 job_gen=8 fast{valid=3 spend=0 ckpt=51 ix=" + ix(51, "ad_9", minute("10:19")) + " gen=8}\n"
	if got := dumpRows(t, rows); got != wantRows {
		t.Errorf("rows:\ngot:\n%swant:\n%s", got, wantRows)
	}
	if got := dumpTotalsOf(t, totals); got != totalsBefore {
		t.Errorf("totals: got %q, want untouched %q", got, totalsBefore)
	}
}

func TestSweepCrashAnywhere(t *testing.T) {
	ctx := context.Background()
	rows, totals := branchB(t)
	if _, err := Sweep(ctx, rows, totals, sweepOpts()); err != nil {
		t.Fatal(err)
	}
	want := dumpRows(t, rows)
	for n := range 4 { // the clean run makes 4 writes
		t.Run(fmt.Sprintf("after %d writes", n), func(t *testing.T) {
			rows, totals := branchB(t)
			_, err := Sweep(ctx, crashingRows{rows, newBudget(n)}, totals, sweepOpts())
			if !errors.Is(err, errCrash) {
				t.Fatalf("crashing run: got %v, want the injected crash", err)
			}
			if _, err := Sweep(ctx, rows, totals, sweepOpts()); err != nil {
				t.Fatal(err)
			}
			if got := dumpRows(t, rows); got != want {
				t.Errorf("rows:\ngot:\n%swant:\n%s", got, want)
			}
		})
	}
	// Twice is once.
	cnt := &counting{Rows: rows}
	if _, err := Sweep(ctx, cnt, totals, sweepOpts()); err != nil {
		t.Fatal(err)
	}
	if got := dumpRows(t, rows); got != want || cnt.writes != 0 {
		t.Errorf("second sweep: %d writes, rows\n%swant 0 writes, rows\n%s", cnt.writes, got, want)
	}
}

func TestSweepMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	rows, totals := branchB(t)
	o := sweepOpts()
	o.Registerer = reg
	if _, err := Sweep(context.Background(), rows, totals, o); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, reg, "adclick_flush_items_total", map[string]string{"kind": "sweep", "outcome": "removed"}); got != 2 {
		t.Errorf("removed: got %v, want 2", got)
	}
}

func dumpTotalsOf(t testing.TB, totals sink.Totals) string {
	t.Helper()
	ms, _, _ := sink.ParseBucket(minute("10:20"))
	tot, ok, err := totals.GetTotal(context.Background(), sink.TotalKey{Ad: "ad_3", StartMs: ms})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%v %+v", ok, tot)
}
