package flush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

func unlimited() Options {
	return Options{Restored: 41, High: 43, Gen: 7, WritesPerSec: math.Inf(1), Clock: newFakeClock()}
}

// seedOld writes n minute items tagged below 41 (epochs 1..40).
func seedOld(t testing.TB, rows sink.Rows, n int) {
	t.Helper()
	const perPut = 500
	var puts []sink.Put
	for i := range n {
		k := sink.Key{Entity: fmt.Sprintf("old_%d", i/60), Bucket: sink.MinuteBucket(int64(i%60) * 60_000)}
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: int64(1 + i%40), Gen: 7})
		if len(puts) == perPut {
			mustPut(t, rows, puts...)
			puts = puts[:0]
		}
	}
	mustPut(t, rows, puts...)
}

// seedNew writes 80 minute items and 20 hour late totals tagged 41..43;
// the hour items also carry an old roll-up tagged 30.
func seedNew(t testing.TB, rows sink.Rows) {
	t.Helper()
	for i := range 80 {
		k := sink.Key{Entity: fmt.Sprintf("new_%d", i), Bucket: minute("10:14")}
		mustPut(t, rows, sink.Put{Key: k, Writer: sink.Fast, Valid: 3, Epoch: int64(41 + i%3), Gen: 7})
	}
	for i := range 20 {
		k := sink.Key{Entity: fmt.Sprintf("new_%d", i), Bucket: hour("10")}
		mustPut(t, rows,
			sink.Put{Key: k, Writer: sink.Fast, Valid: 60, Epoch: 30, Gen: 7},
			sink.Put{Key: k, Writer: sink.Late, Valid: 1, Epoch: int64(41 + i%3), Gen: 7})
	}
}

// TestFullCostProportionalToWrites: the flush reads and writes only what was
// written since the checkpoint. The counts do not move when the number of
// older items doubles.
func TestFullCostProportionalToWrites(t *testing.T) {
	type cost struct{ queries, results, writes, gets int }
	measure := func(old int) (cost, Report) {
		mem := sinktest.NewMemRows()
		rows := newIndexed(mem)
		seedOld(t, rows, old)
		seedNew(t, rows)
		cnt := &counting{Rows: rows}
		rep, err := Full(context.Background(), cnt, nil, newRestored(), newRestored(), unlimited())
		if err != nil {
			t.Fatalf("flush: %v", err)
		}
		if got, want := mem.Len(), old+20; got != want {
			t.Errorf("items after the flush with %d old: got %d, want %d", old, got, want)
		}
		return cost{cnt.queries, cnt.results, cnt.writes, cnt.gets}, rep
	}
	// 3 epochs × 8 shards × 2 writers queries; 100 results and writes.
	want := cost{queries: 48, results: 100, writes: 100}
	for _, old := range []int{50_000, 100_000} {
		got, rep := measure(old)
		if got != want {
			t.Errorf("%d old items: got cost %+v, want %+v", old, got, want)
		}
		if rep.ItemsScanned != 100 || rep.ItemsDeleted != 80 || rep.AttrsRemoved != 20 {
			t.Errorf("%d old items: got report %+v, want scanned 100, deleted 80, removed 20", old, rep)
		}
	}
}

// story builds a table that exercises every branch of the flush, and the
// restored state for it (restore from c41, high 43).
func story(t testing.TB) (*sinktest.MemRows, *sinktest.MemTotals, *restored) {
	t.Helper()
	rows := sinktest.NewMemRows()
	totals := sinktest.NewMemTotals()
	st := newRestored()
	k := func(ad, b string) sink.Key { return sink.Key{Entity: ad, Bucket: b} }
	mustPut(t, rows,
		sink.Put{Key: k("ad_7", minute("10:13")), Writer: sink.Fast, Valid: 6, Epoch: 39, Gen: 7},
		sink.Put{Key: k("ad_7", minute("10:14")), Writer: sink.Fast, Valid: 5, Epoch: 41, Gen: 7},
		sink.Put{Key: k("ad_9", minute("10:14")), Writer: sink.Fast, Valid: 2, Epoch: 42, Gen: 7},
		sink.Put{Key: k("ad_5", minute("10:15")), Writer: sink.Fast, Valid: 1, Epoch: 43, Gen: 7},
		sink.Put{Key: k("ad_7", hour("10")), Writer: sink.Late, Valid: 2, SpendMicros: 9, Epoch: 41, Gen: 7},
		sink.Put{Key: k("ad_9", hour("10")), Writer: sink.Late, Valid: 1, Epoch: 42, Gen: 7},
		sink.Put{Key: k("ad_9", hour("09")), Writer: sink.Fast, Valid: 50, Epoch: 43, Gen: 7},
		sink.Put{Key: k("ad_9", hour("09")), Writer: sink.Late, Valid: 3, Epoch: 20, Gen: 7},
		sink.Put{Key: k("ad_5", hour("09")), Writer: sink.Late, Valid: 4, Epoch: 43, Gen: 7},
	)
	if _, err := rows.PutFinal(context.Background(), []sink.FinalPut{{Key: k("ad_5", hour("09")), Valid: 70, Gen: 7}}); err != nil {
		t.Fatal(err)
	}
	st.late[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{1, 4}
	st.late[lateKey{"ad_5", startOf(t, hour("09"))}] = [2]int64{3, 0}
	tot := func(ad, b string, v, e int64) sink.Total {
		ms, hr, _ := sink.ParseBucket(b)
		return sink.Total{Ad: ad, StartMs: ms, Hour: hr, Valid: v, Epoch: e}
	}
	if err := totals.SetTotals(context.Background(), []sink.Total{
		tot("ad_7", minute("10:13"), 6, 39),
		tot("ad_7", minute("10:14"), 5, 41),
		tot("ad_9", minute("10:14"), 2, 42),
		tot("ad_5", minute("10:15"), 1, 43),
		tot("ad_7", hour("10"), 11, 43),
	}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []sink.Total{tot("ad_7", minute("10:14"), 4, 0), tot("ad_9", minute("10:14"), 2, 0), tot("ad_7", hour("10"), 10, 0)} {
		st.totals[x.Key()] = x
	}
	return rows, totals, st
}

// dumpTotals prints the totals of the story's keys and the bookkeeping of
// epochs 0..99.
func dumpTotals(t testing.TB, totals sink.Totals) string {
	t.Helper()
	ctx := context.Background()
	var sb strings.Builder
	for _, ad := range []string{"ad_5", "ad_7", "ad_9"} {
		for _, b := range []string{minute("10:13"), minute("10:14"), minute("10:15"), hour("09"), hour("10")} {
			ms, hr, _ := sink.ParseBucket(b)
			k := sink.TotalKey{Ad: ad, StartMs: ms, Hour: hr}
			if tot, ok, err := totals.GetTotal(ctx, k); err != nil {
				t.Fatal(err)
			} else if ok {
				fmt.Fprintf(&sb, "%s: %d@%d\n", totalName(k), tot.Valid, tot.Epoch)
			}
		}
	}
	for e := int64(0); e < 100; e++ {
		n := 0
		if err := totals.TotalsWritten(ctx, e, func(sink.TotalKey) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			fmt.Fprintf(&sb, "epoch %d: %d keys\n", e, n)
		}
	}
	return sb.String()
}

func TestFullStory(t *testing.T) {
	rows, totals, st := story(t)
	rep, err := Full(context.Background(), rows, totals, st, st, unlimited())
	if err != nil {
		t.Fatal(err)
	}
	want := Report{ItemsScanned: 7, ItemsDeleted: 3, AttrsRemoved: 2, LateRewritten: 2,
		TotalsRewritten: 3, TotalsDeleted: 1, Epochs: 3}
	if rep != want {
		t.Errorf("report: got %+v, want %+v", rep, want)
	}
	wantRows := `ad_5/H09 job_gen=7 late{valid=3 spend=0 ckpt=41 ix=` + sink.IndexKey(41, sink.Key{Entity: "ad_5", Bucket: hour("09")}) + ` gen=7} final{valid=70 spend=0 gen=7 at=0}
ad_7/H10 job_gen=7 late{valid=1 spend=4 ckpt=41 ix=` + sink.IndexKey(41, sink.Key{Entity: "ad_7", Bucket: hour("10")}) + ` gen=7}
ad_7/M10:13 job_gen=7 fast{valid=6 spend=0 ckpt=39 ix=` + sink.IndexKey(39, sink.Key{Entity: "ad_7", Bucket: minute("10:13")}) + ` gen=7}
ad_9/H09 job_gen=7 late{valid=3 spend=0 ckpt=20 ix=` + sink.IndexKey(20, sink.Key{Entity: "ad_9", Bucket: hour("09")}) + ` gen=7}
ad_9/H10 job_gen=7 (no attributes)
`
	if got := dumpRows(t, rows); got != wantRows {
		t.Errorf("rows:\ngot:\n%swant:\n%s", got, wantRows)
	}
	wantTotals := `ad_7/M10:13: 6@39
ad_7/M10:14: 4@41
ad_7/H10: 10@41
ad_9/M10:14: 2@41
epoch 39: 1 keys
epoch 41: 3 keys
`
	if got := dumpTotals(t, totals); got != wantTotals {
		t.Errorf("totals:\ngot:\n%swant:\n%s", got, wantTotals)
	}
}

func TestFullTwiceIsOneRun(t *testing.T) {
	rows, totals, st := story(t)
	if _, err := Full(context.Background(), rows, totals, st, st, unlimited()); err != nil {
		t.Fatal(err)
	}
	once, onceTotals := dumpRows(t, rows), dumpTotals(t, totals)
	cnt := &counting{Rows: rows}
	rep, err := Full(context.Background(), cnt, totals, st, st, unlimited())
	if err != nil {
		t.Fatal(err)
	}
	if got := dumpRows(t, rows); got != once {
		t.Errorf("rows after a second run:\ngot:\n%swant:\n%s", got, once)
	}
	if got := dumpTotals(t, totals); got != onceTotals {
		t.Errorf("totals after a second run:\ngot:\n%swant:\n%s", got, onceTotals)
	}
	if cnt.writes != 0 {
		t.Errorf("row writes of the second run: got %d, want 0", cnt.writes)
	}
	if rep.ItemsDeleted+rep.AttrsRemoved+rep.LateRewritten+rep.TotalsDeleted != 0 {
		t.Errorf("second run's report: got %+v, want no deletes, removals or rewrites", rep)
	}
}

// TestFullCrashAnywhere kills the flush after every possible number of
// writes, runs it again, and compares with one clean run.
func TestFullCrashAnywhere(t *testing.T) {
	ctx := context.Background()
	rows, totals, st := story(t)
	cntRows := &counting{Rows: rows}
	if _, err := Full(ctx, cntRows, totals, st, st, unlimited()); err != nil {
		t.Fatal(err)
	}
	wantRows, wantTotals := dumpRows(t, rows), dumpTotals(t, totals)
	// Row writes, plus SetTotals, DeleteTotals and ForgetEpochs calls.
	writes := cntRows.writes + 3
	for n := range writes {
		t.Run(fmt.Sprintf("after %d writes", n), func(t *testing.T) {
			rows, totals, st := story(t)
			b := newBudget(n)
			_, err := Full(ctx, crashingRows{rows, b}, crashingTotals{totals, b}, st, st, unlimited())
			if !errors.Is(err, errCrash) {
				t.Fatalf("crashing run: got error %v, want the injected crash", err)
			}
			if _, err := Full(ctx, rows, totals, st, st, unlimited()); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			if got := dumpRows(t, rows); got != wantRows {
				t.Errorf("rows:\ngot:\n%swant:\n%s", got, wantRows)
			}
			if got := dumpTotals(t, totals); got != wantTotals {
				t.Errorf("totals:\ngot:\n%swant:\n%s", got, wantTotals)
			}
		})
	}
	// One more write than the clean run needs: no crash.
	rows2, totals2, st2 := story(t)
	if _, err := Full(ctx, crashingRows{rows2, newBudget(writes)}, crashingTotals{totals2, newBudget(writes)}, st2, st2, unlimited()); err != nil {
		t.Fatalf("run with a sufficient budget: %v", err)
	}
}

// TestFullFencesNewerGeneration: a restarted older version must not undo
// what a newer one wrote with overlapping ids.
func TestFullFencesNewerGeneration(t *testing.T) {
	rows := sinktest.NewMemRows()
	mine := sink.Key{Entity: "ad_1", Bucket: minute("10:21")}
	theirs := sink.Key{Entity: "ad_2", Bucket: minute("10:21")}
	mustPut(t, rows,
		sink.Put{Key: mine, Writer: sink.Fast, Valid: 1, Epoch: 53, Gen: 7},
		sink.Put{Key: theirs, Writer: sink.Fast, Valid: 2, Epoch: 53, Gen: 8})
	o := unlimited()
	o.Restored, o.High = 52, 53
	rep, err := Full(context.Background(), rows, nil, newRestored(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fenced != 1 || rep.ItemsDeleted != 1 {
		t.Errorf("report: got %+v, want fenced 1, deleted 1", rep)
	}
	if _, ok, _ := rows.Get(context.Background(), mine); ok {
		t.Errorf("gen 7's own item: got present, want deleted")
	}
	if it, ok, _ := rows.Get(context.Background(), theirs); !ok || it.Fast.Valid != 2 {
		t.Errorf("gen 8's item: got %+v (present %v), want untouched", it, ok)
	}
}

func TestFullRewriteRefusedByNewerJobGen(t *testing.T) {
	rows := sinktest.NewMemRows()
	k := sink.Key{Entity: "ad_7", Bucket: hour("10")}
	mustPut(t, rows,
		sink.Put{Key: k, Writer: sink.Late, Valid: 2, Epoch: 41, Gen: 7},
		sink.Put{Key: k, Writer: sink.Fast, Valid: 30, Epoch: 12, Gen: 8})
	st := newRestored()
	st.late[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{1, 0}
	before := dumpRows(t, rows)
	rep, err := Full(context.Background(), rows, nil, st, nil, unlimited())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refused != 1 || rep.LateRewritten != 0 {
		t.Errorf("report: got %+v, want refused 1, rewritten 0", rep)
	}
	if got := dumpRows(t, rows); got != before {
		t.Errorf("rows: got\n%swant unchanged\n%s", got, before)
	}
}

// racing changes the item under the flush: before the first n conditional
// writes it re-tags the item at epoch 42, so the flush's condition fails.
type racing struct {
	sink.Rows
	n     int
	epoch int64
}

func (r *racing) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, bool, error) {
	if r.n > 0 {
		r.n--
		r.epoch++
		if _, err := r.Rows.Put(ctx, []sink.Put{{Key: k, Writer: w, Valid: 9, Epoch: r.epoch, Gen: 7}}); err != nil {
			return false, false, err
		}
	}
	return r.Rows.Delete(ctx, k, w, ckpt)
}

func TestFullRereadsChangedItem(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		races                 int
		wantDeleted, wantRefd int
	}{
		{"changed once: read again and deleted", 1, 1, 0},
		{"changed on every attempt: left and counted", maxAttempts, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := sinktest.NewMemRows()
			k := sink.Key{Entity: "ad_7", Bucket: minute("10:14")}
			mustPut(t, mem, sink.Put{Key: k, Writer: sink.Fast, Valid: 5, Epoch: 41, Gen: 7})
			rows := &racing{Rows: mem, n: tt.races, epoch: 41}
			rep, err := Full(context.Background(), rows, nil, newRestored(), nil, unlimited())
			if err != nil {
				t.Fatal(err)
			}
			if rep.ItemsDeleted != tt.wantDeleted || rep.Refused != tt.wantRefd {
				t.Errorf("report: got %+v, want deleted %d, refused %d", rep, tt.wantDeleted, tt.wantRefd)
			}
			if _, ok, _ := mem.Get(context.Background(), k); ok != (tt.wantDeleted == 0) {
				t.Errorf("item present: got %v, want %v", ok, tt.wantDeleted == 0)
			}
		})
	}
}

func TestFullRateLimited(t *testing.T) {
	rows := sinktest.NewMemRows()
	for i := range 200 {
		k := sink.Key{Entity: fmt.Sprintf("ad_%d", i), Bucket: minute("10:14")}
		mustPut(t, rows, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7})
	}
	clk := newFakeClock()
	o := Options{Restored: 41, High: 41, Gen: 7, WritesPerSec: 100, Burst: 10, Clock: clk}
	rep, err := Full(context.Background(), rows, nil, newRestored(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ItemsDeleted != 200 {
		t.Fatalf("deleted: got %d, want 200", rep.ItemsDeleted)
	}
	// 200 writes at 100/s with 10 free: 190 × 10 ms.
	if want := 1900 * time.Millisecond; clk.slept != want || rep.Duration != want {
		t.Errorf("slept %v, duration %v; want both %v", clk.slept, rep.Duration, want)
	}
}

func TestFullDefaultRate(t *testing.T) {
	o := Options{Restored: 1, High: 1}
	o.EnsureDefaults()
	if o.WritesPerSec != DefaultWritesPerSec || o.Burst != 50 || o.Clock == nil || o.Logger == nil {
		t.Errorf("defaults: got rate %v burst %d clock %v logger %v; want 500, 50, set, set",
			o.WritesPerSec, o.Burst, o.Clock, o.Logger)
	}
}

func TestFullValidate(t *testing.T) {
	mem := sinktest.NewMemRows()
	ctx := context.Background()
	o := Options{Restored: -1, High: -5, Gen: -1, WritesPerSec: math.NaN(), Burst: -1}
	_, err := Full(ctx, mem, nil, newRestored(), nil, o)
	if err == nil {
		t.Fatal("bad options: got nil error")
	}
	for _, want := range []string{"restored checkpoint -1", "high epoch -5", "generation -1", "writes per second", "burst -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not report %q", err, want)
		}
	}
	if _, err := Full(ctx, nil, nil, newRestored(), nil, unlimited()); err == nil {
		t.Error("nil rows: got nil error")
	}
	if _, err := Full(ctx, mem, nil, nil, nil, unlimited()); err == nil {
		t.Error("nil state: got nil error")
	}
	if _, err := Full(ctx, mem, sinktest.NewMemTotals(), newRestored(), nil, unlimited()); err == nil {
		t.Error("totals without restored totals: got nil error")
	}
	so := SweepOptions{Gen: -1, Since: 5, High: 4}
	if _, err := Sweep(ctx, mem, nil, so); err == nil || !strings.Contains(err.Error(), "generation -1") || !strings.Contains(err.Error(), "high epoch 4") {
		t.Errorf("bad sweep options: got %v, want both problems reported", err)
	}
	if _, err := Sweep(ctx, nil, nil, SweepOptions{Gen: 7, Since: 51, High: 51}); err == nil {
		t.Error("sweep with nil rows: got nil error")
	}
}

func TestFullCancelled(t *testing.T) {
	rows, totals, st := story(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Full(ctx, rows, totals, st, st, unlimited()); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestFullMetricsAndLog(t *testing.T) {
	reg := prometheus.NewRegistry()
	var buf bytes.Buffer
	for range 2 {
		rows, totals, st := story(t)
		o := unlimited()
		o.Registerer = reg
		o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
		if _, err := Full(context.Background(), rows, totals, st, st, o); err != nil {
			t.Fatal(err)
		}
	}
	if got := counterValue(t, reg, "adclick_flush_items_total", map[string]string{"kind": "flush", "outcome": "deleted"}); got != 6 {
		t.Errorf("deleted items over two runs: got %v, want 6", got)
	}
	if got := counterValue(t, reg, "adclick_flush_totals_total", map[string]string{"outcome": "deleted"}); got != 2 {
		t.Errorf("deleted totals over two runs: got %v, want 2", got)
	}
	if got := counterValue(t, reg, "adclick_flush_runs_total", map[string]string{"kind": "flush", "result": "ok"}); got != 2 {
		t.Errorf("runs: got %v, want 2", got)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines for two runs: got %d, want 2:\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"flush done", "restored=41", "report.deleted=3", "report.totals_deleted=1"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// plainRows hides the fenced removals of the store it wraps.
type plainRows struct{ sink.Rows }

// A fence above 0 needs a store that takes tokens; fence 0 runs on any
// store, as before fences.
func TestFullFenceNeedsFencedRows(t *testing.T) {
	ctx := context.Background()
	rows, totals, st := story(t)
	o := unlimited()
	o.Fence = 2
	if _, err := Full(ctx, plainRows{rows}, totals, st, st, o); !errors.Is(err, sink.ErrNoFence) {
		t.Fatalf("Full with fence 2 on a store without tokens: err = %v, want sink.ErrNoFence", err)
	}
	if _, err := Sweep(ctx, plainRows{rows}, totals, SweepOptions{Gen: 6, Since: 41, High: 43, FenceGen: 7, Fence: 2, WritesPerSec: math.Inf(1), Clock: newFakeClock()}); !errors.Is(err, sink.ErrNoFence) {
		t.Fatalf("Sweep with fence 2 on a store without tokens: err = %v, want sink.ErrNoFence", err)
	}
	want, _, _ := story(t)
	if _, err := Full(ctx, want, totals, st, st, unlimited()); err != nil {
		t.Fatal(err)
	}
	rows, totals, st = story(t)
	if _, err := Full(ctx, plainRows{rows}, totals, st, st, unlimited()); err != nil {
		t.Fatalf("Full with fence 0 on a store without tokens: %v", err)
	}
	if got, want := dumpRows(t, rows), dumpRows(t, want); got != want {
		t.Errorf("rows:\ngot:\n%swant:\n%s", got, want)
	}
	o.Fence = -1
	if _, err := Full(ctx, rows, totals, st, st, o); err == nil {
		t.Errorf("Full with fence -1: nil error")
	}
}

// With RewriteEpoch the run's own writes (a late total rewritten from
// state, the running totals) carry that tag instead of the restored
// checkpoint's: a range holder writes above every epoch a predecessor may
// have used, so a later fence sweep of [Restored, High] never finds them.
func TestFullRewriteEpochTagsTheRunsOwnWrites(t *testing.T) {
	ctx := context.Background()
	rows := sinktest.NewMemRows()
	totals := sinktest.NewMemTotals()
	k := sink.Key{Entity: "ad_7", Bucket: hour("10")}
	mustPut(t, rows, sink.Put{Key: k, Writer: sink.Late, Valid: 9, Epoch: 42, Gen: 7})
	st := newRestored()
	st.late[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{4, 40}
	tk := sink.TotalKey{Ad: "ad_7", StartMs: startOf(t, hour("10")), Hour: true}
	st.totals[tk] = sink.Total{Ad: tk.Ad, StartMs: tk.StartMs, Hour: true, Valid: 4, SpendMicros: 40}
	o := unlimited()
	o.RewriteEpoch = 44
	rep, err := Full(ctx, rows, totals, st, st, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LateRewritten != 1 || rep.TotalsRewritten != 1 {
		t.Errorf("report %+v, want one late total and one running total rewritten", rep)
	}
	if it, ok, _ := rows.Get(ctx, k); !ok || it.Late.Valid != 4 || it.Late.Ckpt != 44 {
		t.Errorf("late total after the flush: %+v (present %v); want 4 tagged 44", it.Late, ok)
	}
	var at []int64
	for e := int64(40); e <= 45; e++ {
		if err := totals.TotalsWritten(ctx, e, func(got sink.TotalKey) error {
			if got == tk {
				at = append(at, e)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(at) != 1 || at[0] != 44 {
		t.Errorf("the running total is recorded under epochs %v, want [44]", at)
	}
	o.RewriteEpoch = 40
	if _, err := Full(ctx, rows, totals, st, st, o); err == nil || !strings.Contains(err.Error(), "rewrite epoch 40") {
		t.Errorf("a rewrite epoch below the restored checkpoint: got %v, want it refused", err)
	}
}

// A fence sweep (StaleTotalsOnly) leaves the running totals state holds as
// the store has them (the live job's early firings rewrite them) and
// deletes only those recorded in the swept epochs that state lacks.
func TestFullStaleTotalsOnly(t *testing.T) {
	ctx := context.Background()
	rows := sinktest.NewMemRows()
	totals := sinktest.NewMemTotals()
	open := sink.TotalKey{Ad: "ad_1", StartMs: startOf(t, minute("10:21"))}
	stale := sink.TotalKey{Ad: "ad_2", StartMs: startOf(t, minute("10:21"))}
	if err := totals.SetTotals(ctx, []sink.Total{
		{Ad: open.Ad, StartMs: open.StartMs, Valid: 9, Epoch: 42},
		{Ad: stale.Ad, StartMs: stale.StartMs, Valid: 3, Epoch: 42},
	}); err != nil {
		t.Fatal(err)
	}
	st := newRestored()
	st.totals[open] = sink.Total{Ad: open.Ad, StartMs: open.StartMs, Valid: 5}
	o := unlimited()
	o.RewriteEpoch, o.StaleTotalsOnly = 44, true
	rep, err := Full(ctx, rows, totals, st, st, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TotalsRewritten != 0 || rep.TotalsDeleted != 1 {
		t.Errorf("report %+v, want no total rewritten and one deleted", rep)
	}
	if got, ok, _ := totals.GetTotal(ctx, open); !ok || got.Valid != 9 {
		t.Errorf("the total state holds: %+v (present %v), want it left at 9", got, ok)
	}
	if _, ok, _ := totals.GetTotal(ctx, stale); ok {
		t.Error("the total state lacks is still there; want it deleted")
	}
}
