package sinktest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/sink"
)

// Totals runs the conformance suite of sink.Totals against the stores that
// open returns. open is called once per subtest and must return an empty
// store; it registers its own cleanup on t (t.Cleanup).
//
// The suite pins down these semantics, which every implementation shares:
//
//   - SetTotals writes absolute values: a second write of a key replaces
//     Valid, SpendMicros and Epoch, it never adds. Within one call the last
//     total for a key wins. A total is written atomically: a reader sees all
//     three fields of one write.
//   - GetTotal of a key never written (or deleted) returns ok false, a zero
//     Total and no error. Minute and hour totals of the same ad and start are
//     different keys, as are totals of different ads.
//   - TotalsWritten(e) lists, once each, every key that SetTotals wrote with
//     Epoch e and that neither DeleteTotals nor ForgetEpochs has dropped since.
//     A key rewritten under a later epoch stays listed under the earlier one
//     too: the flush after restoring checkpoint c must find every key written
//     under any epoch >= c, and recording every epoch a key was written under
//     is the answer that holds whatever order epochs arrive in (two job
//     versions, a flush rewriting with tag c). Listing a key too often costs
//     the flush a needless rewrite; listing it too rarely would leave a value
//     ahead of restored state.
//   - TotalsWritten stops at the first error fn returns and returns it
//     (errors.Is holds). fn may call SetTotals and DeleteTotals on the same
//     store, as the flush does; every key listed when the call began and not
//     deleted by fn is still visited.
//   - DeleteTotals deletes the values and drops the keys from every epoch
//     they are listed under. Deleting a missing key is not an error.
//   - ForgetEpochs(from, to) drops the listings of the epochs in [from, to)
//     and leaves the values, and the listings of other epochs, in place.
//   - Every method is safe for concurrent use.
//
// Starts are whole minutes (hour totals: whole hours), UTC.
func Totals(t *testing.T, open func(t *testing.T) sink.Totals) {
	t.Run("SetGet", func(t *testing.T) { testTotalsSetGet(t, open(t)) })
	t.Run("Missing", func(t *testing.T) { testTotalsMissing(t, open(t)) })
	t.Run("Overwrite", func(t *testing.T) { testTotalsOverwrite(t, open(t)) })
	t.Run("LastInBatchWins", func(t *testing.T) { testTotalsLastInBatchWins(t, open(t)) })
	t.Run("DistinctKeys", func(t *testing.T) { testTotalsDistinctKeys(t, open(t)) })
	t.Run("AdNames", func(t *testing.T) { testTotalsAdNames(t, open(t)) })
	t.Run("Empty", func(t *testing.T) { testTotalsEmpty(t, open(t)) })
	t.Run("TotalsWritten", func(t *testing.T) { testTotalsTotalsWritten(t, open(t)) })
	t.Run("TotalsWrittenError", func(t *testing.T) { testTotalsTotalsWrittenError(t, open(t)) })
	t.Run("TotalsWrittenReentrant", func(t *testing.T) { testTotalsTotalsWrittenReentrant(t, open(t)) })
	t.Run("DeleteTotals", func(t *testing.T) { testTotalsDeleteTotals(t, open(t)) })
	t.Run("ForgetEpochs", func(t *testing.T) { testTotalsForgetEpochs(t, open(t)) })
	t.Run("FlushPattern", func(t *testing.T) { testTotalsFlushPattern(t, open(t)) })
	t.Run("LargeBatch", func(t *testing.T) { testTotalsLargeBatch(t, open(t)) })
	t.Run("Concurrent", func(t *testing.T) { testTotalsConcurrent(t, open(t)) })
}

// totBase is 2026-11-29T10:00Z, the start of an hour.
var totBase = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()

func totCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func totMinute(ad string, i int, valid, spend, epoch int64) sink.Total {
	return sink.Total{Ad: ad, StartMs: totBase + int64(i)*eventtime.MinuteMs, Valid: valid, SpendMicros: spend, Epoch: epoch}
}

func totHour(ad string, i int, valid, spend, epoch int64) sink.Total {
	return sink.Total{Ad: ad, StartMs: totBase + int64(i)*eventtime.HourMs, Hour: true, Valid: valid, SpendMicros: spend, Epoch: epoch}
}

func totSet(t *testing.T, ctx context.Context, s sink.Totals, ts ...sink.Total) {
	t.Helper()
	if err := s.SetTotals(ctx, ts); err != nil {
		t.Fatalf("SetTotals(%d totals): %v", len(ts), err)
	}
}

// totWant checks that GetTotal returns exactly want.
func totWant(t *testing.T, ctx context.Context, s sink.Totals, want sink.Total) {
	t.Helper()
	got, ok, err := s.GetTotal(ctx, want.Key())
	if err != nil {
		t.Fatalf("GetTotal(%+v): %v", want.Key(), err)
	}
	if !ok {
		t.Fatalf("GetTotal(%+v): ok false, want %+v", want.Key(), want)
	}
	if got != want {
		t.Fatalf("GetTotal(%+v) = %+v, want %+v", want.Key(), got, want)
	}
}

// totWantMissing checks that GetTotal finds nothing at k.
func totWantMissing(t *testing.T, ctx context.Context, s sink.Totals, k sink.TotalKey) {
	t.Helper()
	got, ok, err := s.GetTotal(ctx, k)
	if err != nil {
		t.Fatalf("GetTotal(%+v): %v", k, err)
	}
	if ok {
		t.Fatalf("GetTotal(%+v) = %+v, ok true; want no total", k, got)
	}
	if got != (sink.Total{}) {
		t.Fatalf("GetTotal(%+v) with ok false returned %+v, want the zero Total", k, got)
	}
}

// written returns the keys TotalsWritten lists under epoch, failing on a
// key listed twice.
func totListed(t *testing.T, ctx context.Context, s sink.Totals, epoch int64) map[sink.TotalKey]bool {
	t.Helper()
	got := map[sink.TotalKey]bool{}
	err := s.TotalsWritten(ctx, epoch, func(k sink.TotalKey) error {
		if got[k] {
			return fmt.Errorf("key %+v listed twice", k)
		}
		got[k] = true
		return nil
	})
	if err != nil {
		t.Fatalf("TotalsWritten(%d): %v", epoch, err)
	}
	return got
}

// totWantWritten checks that TotalsWritten(epoch) lists exactly want.
func totWantWritten(t *testing.T, ctx context.Context, s sink.Totals, epoch int64, want ...sink.TotalKey) {
	t.Helper()
	got := totListed(t, ctx, s, epoch)
	wantSet := map[sink.TotalKey]bool{}
	for _, k := range want {
		wantSet[k] = true
	}
	var missing, extra []string
	for k := range wantSet {
		if !got[k] {
			missing = append(missing, fmt.Sprintf("%+v", k))
		}
	}
	for k := range got {
		if !wantSet[k] {
			extra = append(extra, fmt.Sprintf("%+v", k))
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("TotalsWritten(%d): got %d keys, want %d; missing %v; unexpected %v",
			epoch, len(got), len(wantSet), missing, extra)
	}
}

func totKeys(ts ...sink.Total) []sink.TotalKey {
	ks := make([]sink.TotalKey, len(ts))
	for i, x := range ts {
		ks[i] = x.Key()
	}
	return ks
}

func testTotalsSetGet(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	ts := []sink.Total{
		totMinute("ad_7", 14, 5, 5_000_000, 41),
		totMinute("ad_9", 14, 2, 1_250, 41),
		totHour("ad_7", 0, 812, 1<<50, 42),
		totMinute("ad_1", 0, 0, 0, 0),
		totMinute("ad_2", 59, math.MaxInt64, math.MaxInt64, math.MaxInt64/2),
	}
	totSet(t, ctx, s, ts...)
	for _, want := range ts {
		totWant(t, ctx, s, want)
	}
}

func testTotalsMissing(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	totWantMissing(t, ctx, s, sink.TotalKey{Ad: "ad_7", StartMs: totBase})
	totSet(t, ctx, s, totMinute("ad_7", 14, 5, 50, 41))
	// Neighbours of a written key are still missing.
	totWantMissing(t, ctx, s, sink.TotalKey{Ad: "ad_7", StartMs: totBase + 13*eventtime.MinuteMs})
	totWantMissing(t, ctx, s, sink.TotalKey{Ad: "ad_7", StartMs: totBase + 15*eventtime.MinuteMs})
	totWantMissing(t, ctx, s, sink.TotalKey{Ad: "ad_70", StartMs: totBase + 14*eventtime.MinuteMs})
	totWantMissing(t, ctx, s, sink.TotalKey{Ad: "ad_", StartMs: totBase + 14*eventtime.MinuteMs})
	totWantWritten(t, ctx, s, 40)
}

func testTotalsOverwrite(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	// The running totals of one minute, as early firings send them: each
	// write is the absolute value, so the last one is the answer (5, not
	// 1+3+4+5 = 13). The dip after a restore (5 -> 4) is also a plain set.
	for i, v := range []int64{1, 3, 4, 5, 4} {
		totSet(t, ctx, s, totMinute("ad_7", 14, v, v*100, 41+int64(i/3)))
	}
	totWant(t, ctx, s, totMinute("ad_7", 14, 4, 400, 42))
	// Setting zero is a value, not a delete.
	totSet(t, ctx, s, totMinute("ad_7", 14, 0, 0, 43))
	totWant(t, ctx, s, totMinute("ad_7", 14, 0, 0, 43))
}

func testTotalsLastInBatchWins(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	totSet(t, ctx, s,
		totMinute("ad_7", 14, 2, 20, 41),
		totMinute("ad_9", 14, 1, 10, 41),
		totMinute("ad_7", 14, 3, 30, 41),
		totMinute("ad_7", 14, 6, 60, 42),
	)
	totWant(t, ctx, s, totMinute("ad_7", 14, 6, 60, 42))
	totWant(t, ctx, s, totMinute("ad_9", 14, 1, 10, 41))
	totWantWritten(t, ctx, s, 41, totMinute("ad_7", 14, 0, 0, 0).Key(), totMinute("ad_9", 14, 0, 0, 0).Key())
	totWantWritten(t, ctx, s, 42, totMinute("ad_7", 14, 0, 0, 0).Key())
}

func testTotalsDistinctKeys(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	// Minute 10:00 and hour 10 of ad_7 start at the same millisecond.
	m := totMinute("ad_7", 0, 6, 60, 41)
	h := totHour("ad_7", 0, 812, 8120, 41)
	other := totMinute("ad_9", 0, 1, 10, 41)
	totSet(t, ctx, s, m, h, other)
	totWant(t, ctx, s, m)
	totWant(t, ctx, s, h)
	totWant(t, ctx, s, other)
	// Rewriting one leaves the others alone.
	m2 := totMinute("ad_7", 0, 7, 70, 42)
	totSet(t, ctx, s, m2)
	totWant(t, ctx, s, m2)
	totWant(t, ctx, s, h)
	totWant(t, ctx, s, other)
	// Deleting one leaves the others alone.
	if err := s.DeleteTotals(ctx, []sink.TotalKey{h.Key()}); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	totWantMissing(t, ctx, s, h.Key())
	totWant(t, ctx, s, m2)
	totWant(t, ctx, s, other)
}

// testAdNames writes ads whose ids contain separators that a store might use
// in its own key names.
func testTotalsAdNames(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	ads := []string{"ad:7", "{ad_7}", "ad}:7", "ad_7}:M2026", "a|d/7 x", "anzeige-ü-7", "ad\n7", "ad_7:"}
	var ts []sink.Total
	for i, ad := range ads {
		ts = append(ts, totMinute(ad, 14, int64(i+1), int64(i+1)*10, 41), totHour(ad, 0, int64(i+100), 0, 41))
	}
	totSet(t, ctx, s, ts...)
	for _, want := range ts {
		totWant(t, ctx, s, want)
	}
	totWantWritten(t, ctx, s, 41, totKeys(ts...)...)
	if err := s.DeleteTotals(ctx, totKeys(ts[:4]...)); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	for _, x := range ts[:4] {
		totWantMissing(t, ctx, s, x.Key())
	}
	totWantWritten(t, ctx, s, 41, totKeys(ts[4:]...)...)
}

func testTotalsEmpty(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	if err := s.SetTotals(ctx, nil); err != nil {
		t.Fatalf("SetTotals(nil): %v", err)
	}
	if err := s.DeleteTotals(ctx, nil); err != nil {
		t.Fatalf("DeleteTotals(nil): %v", err)
	}
	if err := s.ForgetEpochs(ctx, 0, math.MaxInt64); err != nil {
		t.Fatalf("ForgetEpochs on an empty store: %v", err)
	}
	if err := s.ForgetEpochs(ctx, 10, 5); err != nil {
		t.Fatalf("ForgetEpochs with an empty range: %v", err)
	}
	totWantWritten(t, ctx, s, 0)
	totWantWritten(t, ctx, s, 41)
}

func testTotalsTotalsWritten(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	a := totMinute("ad_7", 14, 4, 40, 41)
	b := totMinute("ad_9", 14, 2, 20, 41)
	c := totHour("ad_7", 0, 1, 10, 41)
	totSet(t, ctx, s, a, b, c)
	totWantWritten(t, ctx, s, 41, a.Key(), b.Key(), c.Key())
	totWantWritten(t, ctx, s, 40)
	totWantWritten(t, ctx, s, 42)

	// a is rewritten under 42 and a new key d is written under 42: a is now
	// listed under both epochs; rewriting it again under 42 lists it once.
	a2 := totMinute("ad_7", 14, 5, 50, 42)
	d := totMinute("ad_7", 15, 1, 10, 42)
	totSet(t, ctx, s, a2, d)
	totSet(t, ctx, s, a2)
	totWantWritten(t, ctx, s, 41, a.Key(), b.Key(), c.Key())
	totWantWritten(t, ctx, s, 42, a.Key(), d.Key())

	// A write under a lower epoch after a higher one (two job versions, or
	// the flush rewriting with the restored id) is recorded under it too.
	d2 := totMinute("ad_7", 15, 3, 30, 41)
	totSet(t, ctx, s, d2)
	totWant(t, ctx, s, d2)
	totWantWritten(t, ctx, s, 41, a.Key(), b.Key(), c.Key(), d.Key())
	totWantWritten(t, ctx, s, 42, a.Key(), d.Key())

	// Epoch 0 and large epochs are ordinary epochs.
	e := totMinute("ad_1", 1, 1, 1, 0)
	f := totMinute("ad_1", 2, 1, 1, math.MaxInt64-1)
	totSet(t, ctx, s, e, f)
	totWantWritten(t, ctx, s, 0, e.Key())
	totWantWritten(t, ctx, s, math.MaxInt64-1, f.Key())
}

func testTotalsTotalsWrittenError(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	var ts []sink.Total
	for i := range 20 {
		ts = append(ts, totMinute(fmt.Sprintf("ad_%d", i), 14, 1, 1, 41))
	}
	totSet(t, ctx, s, ts...)
	stop := errors.New("stop here")
	calls := 0
	err := s.TotalsWritten(ctx, 41, func(sink.TotalKey) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("TotalsWritten with fn failing: got error %v, want one wrapping %v", err, stop)
	}
	if calls != 3 {
		t.Fatalf("TotalsWritten called fn %d times after it failed on call 3, want 3", calls)
	}
}

// testTotalsWrittenReentrant calls SetTotals and DeleteTotals from inside the
// TotalsWritten callback, as the flush does.
func testTotalsTotalsWrittenReentrant(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	var ts []sink.Total
	for i := range 300 {
		ts = append(ts, totMinute(fmt.Sprintf("ad_%d", i), i%60, int64(i), int64(i)*10, 43))
	}
	totSet(t, ctx, s, ts...)
	seen := map[sink.TotalKey]bool{}
	err := s.TotalsWritten(ctx, 43, func(k sink.TotalKey) error {
		seen[k] = true
		if k.StartMs%(2*eventtime.MinuteMs) == 0 {
			return s.DeleteTotals(ctx, []sink.TotalKey{k})
		}
		return s.SetTotals(ctx, []sink.Total{{Ad: k.Ad, StartMs: k.StartMs, Valid: 1, SpendMicros: 2, Epoch: 43}})
	})
	if err != nil {
		t.Fatalf("TotalsWritten: %v", err)
	}
	var kept []sink.TotalKey
	for _, x := range ts {
		if !seen[x.Key()] {
			t.Fatalf("TotalsWritten(43) did not visit %+v", x.Key())
		}
		if x.StartMs%(2*eventtime.MinuteMs) == 0 {
			totWantMissing(t, ctx, s, x.Key())
			continue
		}
		kept = append(kept, x.Key())
		totWant(t, ctx, s, sink.Total{Ad: x.Ad, StartMs: x.StartMs, Valid: 1, SpendMicros: 2, Epoch: 43})
	}
	totWantWritten(t, ctx, s, 43, kept...)
}

func testTotalsDeleteTotals(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	a := totMinute("ad_7", 14, 4, 40, 41)
	b := totMinute("ad_9", 14, 2, 20, 41)
	h := totHour("ad_7", 0, 9, 90, 41)
	a2 := totMinute("ad_7", 14, 5, 50, 42)
	c := totMinute("ad_7", 15, 1, 10, 42)
	totSet(t, ctx, s, a, b, h)
	totSet(t, ctx, s, a2, c)

	// a was written under 41 and 42; deleting it drops it from both. The
	// missing key in the same call is no error.
	missing := sink.TotalKey{Ad: "ad_404", StartMs: totBase}
	if err := s.DeleteTotals(ctx, []sink.TotalKey{a.Key(), missing}); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	totWantMissing(t, ctx, s, a.Key())
	totWantMissing(t, ctx, s, missing)
	totWant(t, ctx, s, b)
	totWant(t, ctx, s, h)
	totWant(t, ctx, s, c)
	totWantWritten(t, ctx, s, 41, b.Key(), h.Key())
	totWantWritten(t, ctx, s, 42, c.Key())

	// Deleting again is harmless; a later write brings the key back under
	// its new epoch only.
	if err := s.DeleteTotals(ctx, []sink.TotalKey{a.Key()}); err != nil {
		t.Fatalf("DeleteTotals of a deleted key: %v", err)
	}
	a3 := totMinute("ad_7", 14, 4, 40, 43)
	totSet(t, ctx, s, a3)
	totWant(t, ctx, s, a3)
	totWantWritten(t, ctx, s, 41, b.Key(), h.Key())
	totWantWritten(t, ctx, s, 42, c.Key())
	totWantWritten(t, ctx, s, 43, a.Key())
}

func testTotalsForgetEpochs(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	var all []sink.Total
	byEpoch := map[int64][]sink.TotalKey{}
	for e := int64(38); e <= 44; e++ {
		x := totMinute("ad_7", int(e), e, e*10, e)
		y := totHour(fmt.Sprintf("ad_%d", e), 1, e, e*10, e)
		totSet(t, ctx, s, x, y)
		all = append(all, x, y)
		byEpoch[e] = []sink.TotalKey{x.Key(), y.Key()}
	}
	// [40, 43) goes: 40, 41, 42; 39 and 43 stay.
	if err := s.ForgetEpochs(ctx, 40, 43); err != nil {
		t.Fatalf("ForgetEpochs(40, 43): %v", err)
	}
	for e := int64(38); e <= 44; e++ {
		if e >= 40 && e < 43 {
			totWantWritten(t, ctx, s, e)
		} else {
			totWantWritten(t, ctx, s, e, byEpoch[e]...)
		}
	}
	// The values stay.
	for _, x := range all {
		totWant(t, ctx, s, x)
	}
	// An open-ended range.
	if err := s.ForgetEpochs(ctx, 44, math.MaxInt64); err != nil {
		t.Fatalf("ForgetEpochs(44, max): %v", err)
	}
	totWantWritten(t, ctx, s, 44)
	totWantWritten(t, ctx, s, 43, byEpoch[43]...)
	// Everything below 39.
	if err := s.ForgetEpochs(ctx, 0, 39); err != nil {
		t.Fatalf("ForgetEpochs(0, 39): %v", err)
	}
	totWantWritten(t, ctx, s, 38)
	totWantWritten(t, ctx, s, 39, byEpoch[39]...)
	for _, x := range all {
		totWant(t, ctx, s, x)
	}
	// A forgotten epoch records new writes again.
	z := totMinute("ad_z", 0, 1, 1, 41)
	totSet(t, ctx, s, z)
	totWantWritten(t, ctx, s, 41, z.Key())
}

// testFlushPattern runs the Valkey part of seed 001's full flush: after a
// restore from c = 41, every key written under an epoch >= 41 is rewritten
// from restored state (tag 41) or deleted when state lacks it.
func testTotalsFlushPattern(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	before := totMinute("ad_7", 13, 6, 60, 39) // finished before c41
	totSet(t, ctx, s, before)
	totSet(t, ctx, s, totMinute("ad_7", 14, 4, 40, 41), totMinute("ad_9", 14, 2, 20, 41))
	totSet(t, ctx, s, totMinute("ad_7", 14, 5, 50, 42), totMinute("ad_9", 14, 3, 30, 42), totHour("ad_7", 0, 1, 10, 42))

	state := map[sink.TotalKey]sink.Total{ // restored from c41
		totMinute("ad_7", 14, 0, 0, 0).Key(): totMinute("ad_7", 14, 4, 40, 41),
		totMinute("ad_9", 14, 0, 0, 0).Key(): totMinute("ad_9", 14, 2, 20, 41),
	}
	const c = 41
	for e := int64(c); e <= 42; e++ {
		var keep []sink.Total
		var drop []sink.TotalKey
		err := s.TotalsWritten(ctx, e, func(k sink.TotalKey) error {
			if x, ok := state[k]; ok {
				keep = append(keep, x)
			} else {
				drop = append(drop, k)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("TotalsWritten(%d): %v", e, err)
		}
		totSet(t, ctx, s, keep...)
		if err := s.DeleteTotals(ctx, drop); err != nil {
			t.Fatalf("DeleteTotals: %v", err)
		}
	}
	if err := s.ForgetEpochs(ctx, c+1, math.MaxInt64); err != nil {
		t.Fatalf("ForgetEpochs: %v", err)
	}
	totWant(t, ctx, s, before)
	totWant(t, ctx, s, totMinute("ad_7", 14, 4, 40, 41)) // the dip: 5 -> 4
	totWant(t, ctx, s, totMinute("ad_9", 14, 2, 20, 41))
	totWantMissing(t, ctx, s, totHour("ad_7", 0, 0, 0, 0).Key())
	totWantWritten(t, ctx, s, 39, before.Key())
	totWantWritten(t, ctx, s, 41, totKeys(state[totMinute("ad_7", 14, 0, 0, 0).Key()], state[totMinute("ad_9", 14, 0, 0, 0).Key()])...)
	totWantWritten(t, ctx, s, 42)
}

func testTotalsLargeBatch(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	const n = 10_000
	ts := make([]sink.Total, 0, n)
	for i := range n {
		ad := fmt.Sprintf("ad_%04d", i/10)
		if i%10 == 9 {
			ts = append(ts, totHour(ad, 0, int64(i), int64(i)*7, 50))
		} else {
			ts = append(ts, totMinute(ad, i%10, int64(i), int64(i)*7, 50))
		}
	}
	totSet(t, ctx, s, ts...)
	totWantWritten(t, ctx, s, 50, totKeys(ts...)...)
	for i := 0; i < n; i += 997 {
		totWant(t, ctx, s, ts[i])
	}
	totWant(t, ctx, s, ts[n-1])
	// Overwrite all with new values under a new epoch.
	for i := range ts {
		ts[i].Valid, ts[i].Epoch = ts[i].Valid+1, 51
	}
	totSet(t, ctx, s, ts...)
	for i := 0; i < n; i += 991 {
		totWant(t, ctx, s, ts[i])
	}
	if err := s.DeleteTotals(ctx, totKeys(ts[:n/2]...)); err != nil {
		t.Fatalf("DeleteTotals(%d keys): %v", n/2, err)
	}
	totWantWritten(t, ctx, s, 50, totKeys(ts[n/2:]...)...)
	totWantWritten(t, ctx, s, 51, totKeys(ts[n/2:]...)...)
	totWantMissing(t, ctx, s, ts[0].Key())
	totWantMissing(t, ctx, s, ts[n/2-1].Key())
	totWant(t, ctx, s, ts[n/2])
}

// testConcurrent writes, reads, lists and deletes from several goroutines.
// Every total written has SpendMicros = Valid*1000 and Epoch = Valid, so a
// reader can tell a torn total (fields of two writes) from a whole one.
func testTotalsConcurrent(t *testing.T, s sink.Totals) {
	ctx := totCtx(t)
	const (
		writers = 8
		rounds  = 40
	)
	shared := sink.TotalKey{Ad: "ad_shared", StartMs: totBase}
	whole := func(x sink.Total) bool { return x.SpendMicros == x.Valid*1000 && x.Epoch == x.Valid }

	var wg sync.WaitGroup
	errs := make(chan error, 4*writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := fmt.Sprintf("ad_w%d", w)
			for r := 1; r <= rounds; r++ {
				v := int64(r)
				ts := []sink.Total{
					{Ad: own, StartMs: totBase, Valid: v, SpendMicros: v * 1000, Epoch: v},
					{Ad: own, StartMs: totBase, Hour: true, Valid: v, SpendMicros: v * 1000, Epoch: v},
					{Ad: shared.Ad, StartMs: shared.StartMs, Valid: v, SpendMicros: v * 1000, Epoch: v},
					{Ad: own, StartMs: totBase + eventtime.MinuteMs*int64(1+r%5), Valid: v, SpendMicros: v * 1000, Epoch: v},
				}
				if err := s.SetTotals(ctx, ts); err != nil {
					errs <- fmt.Errorf("writer %d: SetTotals: %w", w, err)
					return
				}
				got, ok, err := s.GetTotal(ctx, shared)
				if err != nil || !ok || !whole(got) {
					errs <- fmt.Errorf("writer %d: GetTotal(shared) = %+v, %v, %v; want a whole total", w, got, ok, err)
					return
				}
				if err := s.TotalsWritten(ctx, v, func(sink.TotalKey) error { return nil }); err != nil {
					errs <- fmt.Errorf("writer %d: TotalsWritten: %w", w, err)
					return
				}
				if r%10 == 0 {
					if err := s.DeleteTotals(ctx, []sink.TotalKey{ts[3].Key()}); err != nil {
						errs <- fmt.Errorf("writer %d: DeleteTotals: %w", w, err)
						return
					}
				}
				if r%13 == 0 {
					if err := s.ForgetEpochs(ctx, 1000, 2000); err != nil {
						errs <- fmt.Errorf("writer %d: ForgetEpochs: %w", w, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for w := range writers {
		own := fmt.Sprintf("ad_w%d", w)
		totWant(t, ctx, s, sink.Total{Ad: own, StartMs: totBase, Valid: rounds, SpendMicros: rounds * 1000, Epoch: rounds})
		totWant(t, ctx, s, sink.Total{Ad: own, StartMs: totBase, Hour: true, Valid: rounds, SpendMicros: rounds * 1000, Epoch: rounds})
	}
	got, ok, err := s.GetTotal(ctx, shared)
	if err != nil || !ok || !whole(got) || got.Valid < 1 || got.Valid > rounds {
		t.Fatalf("GetTotal(shared) = %+v, %v, %v; want a whole total from one write", got, ok, err)
	}
	// Every writer wrote the shared key under every epoch 1..rounds.
	for e := int64(1); e <= rounds; e++ {
		if !totListed(t, ctx, s, e)[shared] {
			t.Fatalf("TotalsWritten(%d) does not list the shared key", e)
		}
	}
}
