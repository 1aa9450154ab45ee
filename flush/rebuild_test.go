package flush

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
	"github.com/adclick/adclick/sink/sinktest"
	"github.com/adclick/adclick/windowing"
)

func TestRebuildDecide(t *testing.T) {
	b := rebuildBounds{
		minuteFrom:  startOf(t, minute("08:00")),
		hourFrom:    startOf(t, hour("07")),
		closedBy:    startOf(t, minute("10:15")) - 1, // 10:14 is the last closed minute, 09 the last closed hour
		oldestEpoch: 30,
	}
	fast := func(bucket string, v, s, ckpt int64) sink.Item {
		return sink.Item{Key: sink.Key{Entity: "ad_7", Bucket: bucket},
			Fast: sink.Tagged{Present: true, Valid: v, SpendMicros: s, Ckpt: ckpt, Gen: 7}}
	}
	total := func(bucket string, v, s, e int64) sink.Total {
		ms, hr, _ := sink.ParseBucket(bucket)
		return sink.Total{Ad: "ad_7", StartMs: ms, Hour: hr, Valid: v, SpendMicros: s, Epoch: e}
	}
	lateOnly := sink.Item{Key: sink.Key{Entity: "ad_7", Bucket: hour("09")},
		Late: sink.Tagged{Present: true, Valid: 3, Ckpt: 40}}
	withLate := fast(hour("09"), 60, 600, 41)
	withLate.Late = sink.Tagged{Present: true, Valid: 3, SpendMicros: 30, Ckpt: 44}
	withLate.Final = sink.FinalAttrs{Present: true, Valid: 70, Gen: 7}
	for _, c := range []struct {
		name string
		it   sink.Item
		want sink.Total
		ok   bool
	}{
		{"closed minute: its row", fast(minute("10:14"), 5, 50, 41), total(minute("10:14"), 5, 50, 41), true},
		{"first minute of the retention", fast(minute("08:00"), 1, 1, 31), total(minute("08:00"), 1, 1, 31), true},
		{"minute before the retention", fast(minute("07:59"), 1, 1, 31), sink.Total{}, false},
		{"open minute", fast(minute("10:15"), 2, 2, 45), sink.Total{}, false},
		{"closed hour: fast only, late and final ignored", withLate, total(hour("09"), 60, 600, 41), true},
		{"first hour of the retention", fast(hour("07"), 9, 9, 35), total(hour("07"), 9, 9, 35), true},
		{"hour before the retention", fast(hour("06"), 9, 9, 35), sink.Total{}, false},
		{"open hour", fast(hour("10"), 14, 140, 45), sink.Total{}, false},
		{"hour with late clicks only", lateOnly, sink.Total{}, false},
		{"tag below the oldest epoch", fast(minute("09:00"), 4, 4, 12), total(minute("09:00"), 4, 4, 29), true},
		{"tag at the oldest epoch", fast(minute("09:01"), 4, 4, 30), total(minute("09:01"), 4, 4, 30), true},
		{"bad bucket", fast("X", 1, 1, 40), sink.Total{}, false},
	} {
		got, ok := rebuildDecide(c.it, b)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	// No watermark yet (math.MinInt64): nothing is closed. The end of
	// input (math.MaxInt64): everything is.
	for _, c := range []struct {
		closedBy int64
		want     bool
	}{{math.MinInt64, false}, {math.MaxInt64, true}} {
		nb := b
		nb.closedBy = c.closedBy
		for _, bucket := range []string{minute("10:14"), hour("09")} {
			if _, ok := rebuildDecide(fast(bucket, 1, 1, 40), nb); ok != c.want {
				t.Errorf("closed by %d, %s: got %v, want %v", c.closedBy, bucket, ok, c.want)
			}
		}
	}
}

// jobRun is what a run of the window operator wrote: rows to a row store,
// and running totals, as the runtime writes them (a row's total with the
// row, in its epoch; early totals at each tick), to a reference store that
// plays Valkey before the wipe.
type jobRun struct {
	minutes *windowing.Minutes
	ref     *sinktest.MemTotals
	wm      int64
	epoch   int64
}

// runJob drives windowing.Minutes over about four hours of clicks for a
// few ads, from 2026-11-29T07:00Z, with a barrier every 30 s and an early
// firing every 5 s, and writes what the runtime would. Some hours also get
// late totals, and one an hour row with late clicks only.
func runJob(t *testing.T, rows sink.Rows, seed uint64) *jobRun {
	t.Helper()
	ctx := context.Background()
	m, err := windowing.NewMinutes(minuteMs)
	if err != nil {
		t.Fatal(err)
	}
	j := &jobRun{minutes: m, ref: sinktest.NewMemTotals(), epoch: 1}
	rng := rand.New(rand.NewPCG(seed, 1))
	ads := []string{"ad_1", "ad_2", "ad_3", "ad_4", "ad_5", "ad_6"}
	var puts []sink.Put
	var tots []sink.Total
	emit := func(r windowing.Row) {
		k := sink.Key{Entity: r.Ad, Bucket: sink.MinuteBucket(r.StartMs)}
		if r.Hour {
			k.Bucket = sink.HourBucket(r.StartMs)
		}
		tots = append(tots, sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.RunValid, SpendMicros: r.RunSpend, Epoch: j.epoch})
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: r.Valid, SpendMicros: r.SpendMicros,
			Epoch: j.epoch, Gen: 7, ClosedRow: !r.Hour})
	}
	running := func(r windowing.Running) {
		tots = append(tots, sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: j.epoch})
	}
	write := func() {
		if len(puts) > 0 {
			mustPut(t, rows, puts...)
		}
		if err := j.ref.SetTotals(ctx, tots); err != nil {
			t.Fatal(err)
		}
		puts, tots = puts[:0], tots[:0]
	}
	start := startOf(t, hour("07"))
	const stepMs = 5_000
	for now := start; now < start+4*hourMs-17*minuteMs; now += stepMs {
		for _, ad := range ads {
			if rng.IntN(3) == 0 {
				continue
			}
			ev := max(start, now-rng.Int64N(20_000)) // up to 20 s late, within the allowance
			ws := ev - ev%minuteMs
			n := 1 + rng.Int64N(4)
			m.Add(ad, ws, n, n*int64(1000+rng.IntN(500)))
		}
		if wm := now - 25_000; wm > j.wm {
			j.wm = wm
			m.Advance(wm, emit)
		}
		m.Early(running)
		write()
		if (now-start)%30_000 == 0 {
			j.epoch++
		}
		if (now-start)%(17*minuteMs) == 0 {
			// The late path: a late total on an hour row.
			ad := ads[rng.IntN(len(ads))]
			h := now - now%hourMs - hourMs
			mustPut(t, rows, sink.Put{Key: sink.Key{Entity: ad, Bucket: sink.HourBucket(h)}, Writer: sink.Late,
				Valid: 1 + rng.Int64N(3), Epoch: j.epoch, Gen: 7})
		}
	}
	// An hour with late clicks only: no running total.
	mustPut(t, rows, sink.Put{Key: sink.Key{Entity: "ad_late", Bucket: hour("05")}, Writer: sink.Late, Valid: 2, Epoch: 3, Gen: 7})
	return j
}

// closedBy reports whether the window of k ended at or before wm.
func closedBy(k sink.TotalKey, wm int64) bool {
	length := minuteMs
	if k.Hour {
		length = hourMs
	}
	return k.StartMs+length-1 <= wm
}

// refTotals returns every total recorded under epochs 0..maxEpoch, by key.
func refTotals(t *testing.T, ref sink.Totals, maxEpoch int64) map[sink.TotalKey]sink.Total {
	t.Helper()
	ctx := context.Background()
	out := map[sink.TotalKey]sink.Total{}
	for e := int64(0); e <= maxEpoch; e++ {
		if err := ref.TotalsWritten(ctx, e, func(k sink.TotalKey) error {
			tot, ok, err := ref.GetTotal(ctx, k)
			if err != nil || !ok {
				return fmt.Errorf("reference total %v: %v, %v", k, ok, err)
			}
			out[k] = tot
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestRebuildTotalsRestoresClosedWindows runs the window operator, wipes
// the running totals, and rebuilds them from the rows: every total of a
// window closed by the watermark comes back as it was (value and epoch),
// no other is written, and the ones left out are exactly those state still
// holds, which the job rewrites itself. Nothing is missing.
func TestRebuildTotalsRestoresClosedWindows(t *testing.T) {
	stores := map[string]func(t *testing.T) (sink.Rows, sink.Totals){
		"memory": func(*testing.T) (sink.Rows, sink.Totals) { return sinktest.NewMemRows(), sinktest.NewMemTotals() },
		"embedded": func(t *testing.T) (sink.Rows, sink.Totals) {
			s, err := embedded.Open(t.TempDir(), embedded.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			return s, s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rows, wiped := open(t)
			j := runJob(t, rows, 1)
			want := refTotals(t, j.ref, j.epoch)
			var closed, held int
			for k := range want {
				if closedBy(k, j.wm) {
					closed++
				} else {
					held++
				}
			}
			if closed < 100 || held < 5 {
				t.Fatalf("the run closed %d windows and left %d open; want a story with both", closed, held)
			}

			reg := prometheus.NewRegistry()
			o := RebuildOptions{ClosedBy: j.wm, WritesPerSec: math.Inf(1), Clock: newFakeClock(), Registerer: reg}
			n, err := RebuildTotals(ctx, rows, wiped, startOf(t, hour("07")), o)
			if err != nil {
				t.Fatalf("rebuild: %v", err)
			}
			if n != closed {
				t.Errorf("rebuilt %d totals, want %d (every closed window)", n, closed)
			}
			got := refTotals(t, wiped, j.epoch)
			for k, w := range want {
				g, ok := got[k]
				switch {
				case closedBy(k, j.wm) && (!ok || g != w):
					t.Errorf("closed %s: got %+v (present %v), want %+v", totalName(k), g, ok, w)
				case !closedBy(k, j.wm) && ok:
					t.Errorf("open %s: rebuilt as %+v, want it left to the job", totalName(k), g)
				case !closedBy(k, j.wm) && !j.minutes.HasTotal(k.Ad, k.StartMs, k.Hour):
					t.Errorf("open %s: neither rebuilt nor held by state: it would stay missing", totalName(k))
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("rebuilt %s = %+v, which the job never wrote", totalName(k), g)
				}
			}
			if v := counterValue(t, reg, "adclick_flush_totals_total", map[string]string{"outcome": "rebuilt"}); v != float64(closed) {
				t.Errorf("adclick_flush_totals_total{outcome=rebuilt}: got %v, want %d", v, closed)
			}
		})
	}
}

// TestRebuildTotalsRetention: only windows at or after fromMs (minutes) and
// o.HourFromMs (hours) are written, and tags below o.OldestEpoch share one
// epoch set just below it.
func TestRebuildTotalsRetention(t *testing.T) {
	ctx := context.Background()
	rows := sinktest.NewMemRows()
	j := runJob(t, rows, 2)
	want := refTotals(t, j.ref, j.epoch)
	minuteFrom, hourFrom := startOf(t, minute("09:30")), startOf(t, hour("08"))
	const oldest = 280 // between the tags of hour 08's row (~240) and of minute 09:30's (~300)
	totals := sinktest.NewMemTotals()
	o := RebuildOptions{ClosedBy: j.wm, HourFromMs: hourFrom, OldestEpoch: oldest, WritesPerSec: math.Inf(1), Clock: newFakeClock()}
	if _, err := RebuildTotals(ctx, rows, totals, minuteFrom, o); err != nil {
		t.Fatal(err)
	}
	got := refTotals(t, totals, j.epoch)
	var wantN int
	for k, w := range want {
		from := minuteFrom
		if k.Hour {
			from = hourFrom
		}
		g, ok := got[k]
		in := closedBy(k, j.wm) && k.StartMs >= from
		if in {
			wantN++
			w.Epoch = max(w.Epoch, oldest-1)
		}
		switch {
		case in && (!ok || g != w):
			t.Errorf("%s: got %+v (present %v), want %+v", totalName(k), g, ok, w)
		case !in && ok:
			t.Errorf("%s: rebuilt as %+v, want it left out", totalName(k), g)
		}
	}
	if len(got) != wantN {
		t.Errorf("rebuilt %d totals, want %d", len(got), wantN)
	}
	below := 0
	if err := totals.TotalsWritten(ctx, oldest-1, func(sink.TotalKey) error { below++; return nil }); err != nil {
		t.Fatal(err)
	}
	if below == 0 {
		t.Errorf("epoch %d (below the oldest): no totals recorded, want those with older tags", oldest-1)
	}
}

// TestRebuildTotalsRateLimited: the writes go through the token bucket.
func TestRebuildTotalsRateLimited(t *testing.T) {
	rows := sinktest.NewMemRows()
	j := runJob(t, rows, 3)
	clk := newFakeClock()
	n, err := RebuildTotals(context.Background(), rows, sinktest.NewMemTotals(), 0, RebuildOptions{ClosedBy: j.wm, WritesPerSec: 100, Burst: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// n writes at 100/s, minus the burst, take at least (n-10)/100 s.
	if want := time.Duration(n-10) * 10 * time.Millisecond; clk.slept < want {
		t.Errorf("slept %v for %d writes at 100/s, want at least %v", clk.slept, n, want)
	}
}

// TestRebuildTotalsFaults: transient row-store errors are waited out (the
// scan starts again), other errors fail the rebuild at once, and so does a
// failing totals store.
func TestRebuildTotalsFaults(t *testing.T) {
	ctx := context.Background()
	rows := sinktest.NewMemRows()
	j := runJob(t, rows, 4)
	clean := sinktest.NewMemTotals()
	want, err := RebuildTotals(ctx, rows, clean, 0, RebuildOptions{ClosedBy: j.wm, WritesPerSec: math.Inf(1), Clock: newFakeClock()})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("transient", func(t *testing.T) {
		totals := sinktest.NewMemTotals()
		faulty := &faultyRows{Rows: rows, n: 40, err: errThrottled{}}
		n, err := RebuildTotals(ctx, faulty, totals, 0, RebuildOptions{ClosedBy: j.wm, WritesPerSec: math.Inf(1), Clock: newFakeClock()})
		if err != nil {
			t.Fatalf("rebuild with 40 transient failures: %v", err)
		}
		if n != want {
			t.Errorf("rebuilt %d, want %d", n, want)
		}
		if got, wantT := refTotals(t, totals, j.epoch), refTotals(t, clean, j.epoch); fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(wantT)) {
			t.Errorf("rebuilt keys differ from a clean rebuild")
		}
	})
	t.Run("other row error", func(t *testing.T) {
		faulty := &faultyRows{Rows: rows, n: 1, err: errCrash}
		_, err := RebuildTotals(ctx, faulty, sinktest.NewMemTotals(), 0, RebuildOptions{ClosedBy: j.wm, Clock: newFakeClock()})
		if !errors.Is(err, errCrash) || faulty.calls.Load() != 1 {
			t.Errorf("rebuild: got %v after %d calls, want the injected error after 1", err, faulty.calls.Load())
		}
	})
	t.Run("totals error", func(t *testing.T) {
		totals := crashingTotals{Totals: sinktest.NewMemTotals(), b: newBudget(2)}
		n, err := RebuildTotals(ctx, rows, totals, 0, RebuildOptions{ClosedBy: j.wm, WritesPerSec: math.Inf(1), Clock: newFakeClock()})
		if !errors.Is(err, errCrash) {
			t.Fatalf("rebuild: got %v, want the totals store's error", err)
		}
		if n != 2*totalsBatch {
			t.Errorf("rebuilt %d before the failure, want %d (two batches)", n, 2*totalsBatch)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		if _, err := RebuildTotals(ctx, rows, clean, 0, RebuildOptions{OldestEpoch: -1, WritesPerSec: -1}); err == nil {
			t.Error("rebuild with a negative oldest epoch and rate: nil error")
		}
		if _, err := RebuildTotals(ctx, nil, clean, 0, RebuildOptions{}); err == nil {
			t.Error("rebuild without rows: nil error")
		}
	})
}

func sortedKeys(m map[sink.TotalKey]sink.Total) []sink.TotalKey {
	ks := make([]sink.TotalKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return compareTotalKeys(ks[i], ks[j]) < 0 })
	return ks
}

// TestRebuildTotalsOwnRangeOnly: two ranges share the running-total store,
// each with its own epoch sets, and each rebuilds after one wipe. A
// range's rebuild records only its own ads' totals in its sets, so its
// next flush (here: deleting everything its sets list under the rebuilt
// epochs, as a flush whose restored state lacks them does) leaves the
// other range's totals in place.
func TestRebuildTotalsOwnRangeOnly(t *testing.T) {
	ctx := context.Background()
	rows := sinktest.NewMemRows()
	j := runJob(t, rows, 2)
	want := refTotals(t, j.ref, j.epoch)
	store := sinktest.NewMemTotals()
	ownsA := func(ad string) bool { return ad < "ad_2" }
	ownsB := func(ad string) bool { return !ownsA(ad) }
	views := map[string]*sinktest.MemTotals{}
	for name, owns := range map[string]func(string) bool{"kg0-64": ownsA, "kg64-128": ownsB} {
		v, err := store.Scoped(name)
		if err != nil {
			t.Fatal(err)
		}
		views[name] = v
		o := RebuildOptions{ClosedBy: j.wm, Owns: owns, WritesPerSec: math.Inf(1), Clock: newFakeClock()}
		if _, err := RebuildTotals(ctx, rows, v, 0, o); err != nil {
			t.Fatal(err)
		}
		for k := range refTotals(t, v, j.epoch) {
			if !owns(k.Ad) {
				t.Errorf("range %s: its epoch sets list %s of the other range", name, totalName(k))
			}
		}
	}
	// Range kg0-64 flushes: its sets' keys go.
	a := views["kg0-64"]
	var drop []sink.TotalKey
	for k := range refTotals(t, a, j.epoch) {
		drop = append(drop, k)
	}
	if err := a.DeleteTotals(ctx, drop); err != nil {
		t.Fatal(err)
	}
	nB := 0
	for k, w := range want {
		if !ownsB(k.Ad) || !closedBy(k, j.wm) {
			continue
		}
		nB++
		if g, ok, err := store.GetTotal(ctx, k); err != nil || !ok || g != w {
			t.Errorf("%s of range kg64-128 after kg0-64's flush: got %+v (present %v, %v), want %+v", totalName(k), g, ok, err, w)
		}
	}
	if nB == 0 || len(drop) == 0 {
		t.Fatalf("the job gave range kg64-128 %d closed totals and kg0-64 %d; want some of each", nB, len(drop))
	}
}
