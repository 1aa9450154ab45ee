package sinktest

import (
	"testing"

	"github.com/adclick/adclick/sink"
)

// FencedTotals runs the conformance suite of sink.FencedTotals against the
// stores that open returns (empty ones, as for Totals). It pins down:
//
//   - A write under a token below the stored one (a lower generation, or
//     the same generation and a lower fence) is refused and counted: the
//     stored total stays, whatever order the writes arrive in. A write
//     under an equal or higher token replaces it and its token.
//   - A refused write still records its key under its epoch.
//   - A delete under a token below the stored one is refused and counted:
//     the total stays, and stays listed. Under an equal or higher token it
//     deletes, and unlists, as DeleteTotals does.
//   - The plain SetTotals and DeleteTotals act under the zero token: they
//     replace a total stored without a token and leave one stored under a
//     higher token as it is.
//   - sink.TotalsUnder's view writes and deletes under its token.
func FencedTotals(t *testing.T, open func(t *testing.T) sink.FencedTotals) {
	t.Run("LateOlderFenceRefused", func(t *testing.T) { testFencedLateOlderFence(t, open(t)) })
	t.Run("Generations", func(t *testing.T) { testFencedGenerations(t, open(t)) })
	t.Run("Delete", func(t *testing.T) { testFencedDelete(t, open(t)) })
	t.Run("Plain", func(t *testing.T) { testFencedPlain(t, open(t)) })
	t.Run("View", func(t *testing.T) { testFencedTotalsView(t, open(t)) })
}

// fencedSet writes ts under tok and checks the number refused.
func fencedSet(t *testing.T, s sink.FencedTotals, tok sink.Token, wantRefused int, ts ...sink.Total) {
	t.Helper()
	got, err := s.SetTotalsFenced(totCtx(t), ts, tok)
	if err != nil {
		t.Fatalf("SetTotalsFenced(%d totals, %+v): %v", len(ts), tok, err)
	}
	if got != wantRefused {
		t.Fatalf("SetTotalsFenced(%d totals, %+v) refused %d, want %d", len(ts), tok, got, wantRefused)
	}
}

// fencedDelete deletes ks under tok and checks the number refused.
func fencedDelete(t *testing.T, s sink.FencedTotals, tok sink.Token, wantRefused int, ks ...sink.TotalKey) {
	t.Helper()
	got, err := s.DeleteTotalsFenced(totCtx(t), ks, tok)
	if err != nil {
		t.Fatalf("DeleteTotalsFenced(%d keys, %+v): %v", len(ks), tok, err)
	}
	if got != wantRefused {
		t.Fatalf("DeleteTotalsFenced(%d keys, %+v) refused %d, want %d", len(ks), tok, got, wantRefused)
	}
}

// testFencedLateOlderFence is a takeover: holder 1 (fence 3) wrote a
// total, holder 2 (fence 4) took the range and rewrote it, and holder 1,
// paused past its lease check, sends its late write.
func testFencedLateOlderFence(t *testing.T, s sink.FencedTotals) {
	ctx := totCtx(t)
	old, cur := sink.Token{Gen: 1, Fence: 3}, sink.Token{Gen: 1, Fence: 4}
	fencedSet(t, s, old, 0, totMinute("ad_7", 14, 5, 50, 41), totMinute("ad_9", 14, 1, 10, 41))
	fencedSet(t, s, cur, 0, totMinute("ad_7", 14, 4, 40, 41))
	fencedSet(t, s, old, 1, totMinute("ad_7", 14, 6, 60, 42), totMinute("ad_9", 14, 2, 20, 42))
	totWant(t, ctx, s, totMinute("ad_7", 14, 4, 40, 41))
	// ad_9 was never written by holder 2: holder 1's write lands.
	totWant(t, ctx, s, totMinute("ad_9", 14, 2, 20, 42))
	// The refused write is recorded under its epoch all the same.
	totWantWritten(t, ctx, s, 42, totMinute("ad_7", 14, 0, 0, 0).Key(), totMinute("ad_9", 14, 0, 0, 0).Key())
	// The same token again, and a higher one, write.
	fencedSet(t, s, cur, 0, totMinute("ad_7", 14, 7, 70, 43))
	totWant(t, ctx, s, totMinute("ad_7", 14, 7, 70, 43))
	fencedSet(t, s, sink.Token{Gen: 1, Fence: 9}, 0, totMinute("ad_7", 14, 8, 80, 44))
	fencedSet(t, s, cur, 1, totMinute("ad_7", 14, 9, 90, 44))
	totWant(t, ctx, s, totMinute("ad_7", 14, 8, 80, 44))
}

// testFencedGenerations: a newer job version wins whatever the fences; an
// older one is refused whatever its fence.
func testFencedGenerations(t *testing.T, s sink.FencedTotals) {
	ctx := totCtx(t)
	h := totHour("ad_7", 0, 10, 100, 41)
	fencedSet(t, s, sink.Token{Gen: 1, Fence: 12}, 0, h)
	fencedSet(t, s, sink.Token{Gen: 2, Fence: 0}, 0, totHour("ad_7", 0, 11, 110, 5))
	fencedSet(t, s, sink.Token{Gen: 1, Fence: 99}, 1, totHour("ad_7", 0, 12, 120, 42))
	totWant(t, ctx, s, totHour("ad_7", 0, 11, 110, 5))
	// Large generations and fences compare as numbers, not as strings.
	fencedSet(t, s, sink.Token{Gen: 10, Fence: 1 << 60}, 0, totHour("ad_7", 0, 13, 130, 6))
	fencedSet(t, s, sink.Token{Gen: 9, Fence: 1<<62 + 1}, 1, totHour("ad_7", 0, 14, 140, 6))
	fencedSet(t, s, sink.Token{Gen: 10, Fence: 1<<60 - 1}, 1, totHour("ad_7", 0, 15, 150, 6))
	totWant(t, ctx, s, totHour("ad_7", 0, 13, 130, 6))
}

func testFencedDelete(t *testing.T, s sink.FencedTotals) {
	ctx := totCtx(t)
	a, b := totMinute("ad_7", 14, 4, 40, 41), totMinute("ad_9", 14, 2, 20, 41)
	fencedSet(t, s, sink.Token{Gen: 1, Fence: 3}, 0, a, b)
	// An older holder's flush deletes neither; a missing key is no refusal.
	missing := sink.TotalKey{Ad: "ad_404", StartMs: totBase}
	fencedDelete(t, s, sink.Token{Gen: 1, Fence: 2}, 2, a.Key(), b.Key(), missing)
	totWant(t, ctx, s, a)
	totWant(t, ctx, s, b)
	totWantWritten(t, ctx, s, 41, a.Key(), b.Key())
	// The holder itself deletes a; a newer one deletes b.
	fencedDelete(t, s, sink.Token{Gen: 1, Fence: 3}, 0, a.Key())
	fencedDelete(t, s, sink.Token{Gen: 1, Fence: 4}, 0, b.Key())
	totWantMissing(t, ctx, s, a.Key())
	totWantMissing(t, ctx, s, b.Key())
	totWantWritten(t, ctx, s, 41)
	// A deleted total keeps no token: an older write lands again.
	fencedSet(t, s, sink.Token{Gen: 1, Fence: 1}, 0, a)
	totWant(t, ctx, s, a)
}

func testFencedPlain(t *testing.T, s sink.FencedTotals) {
	ctx := totCtx(t)
	plain, fenced := totMinute("ad_1", 1, 1, 10, 41), totMinute("ad_2", 1, 2, 20, 41)
	totSet(t, ctx, s, plain)
	fencedSet(t, s, sink.Token{}, 0, totMinute("ad_1", 1, 3, 30, 42))
	totWant(t, ctx, s, totMinute("ad_1", 1, 3, 30, 42))
	fencedSet(t, s, sink.Token{Gen: 1}, 0, fenced)
	totSet(t, ctx, s, totMinute("ad_2", 1, 5, 50, 42), totMinute("ad_1", 1, 4, 40, 42))
	totWant(t, ctx, s, fenced)
	totWant(t, ctx, s, totMinute("ad_1", 1, 4, 40, 42))
	if err := s.DeleteTotals(ctx, []sink.TotalKey{fenced.Key(), plain.Key()}); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	totWant(t, ctx, s, fenced)
	totWantMissing(t, ctx, s, plain.Key())
}

func testFencedTotalsView(t *testing.T, s sink.FencedTotals) {
	ctx := totCtx(t)
	newer, err := sink.TotalsUnder(s, sink.Token{Gen: 3, Fence: 8})
	if err != nil {
		t.Fatalf("TotalsUnder: %v", err)
	}
	older, err := sink.TotalsUnder(newer, sink.Token{Gen: 3, Fence: 7})
	if err != nil {
		t.Fatalf("TotalsUnder of a view: %v", err)
	}
	x := totMinute("ad_7", 14, 4, 40, 41)
	totSet(t, ctx, newer, x)
	totSet(t, ctx, older, totMinute("ad_7", 14, 9, 90, 42))
	totWant(t, ctx, s, x)
	if err := older.DeleteTotals(ctx, []sink.TotalKey{x.Key()}); err != nil {
		t.Fatalf("DeleteTotals through the older view: %v", err)
	}
	totWant(t, ctx, s, x)
	if err := newer.DeleteTotals(ctx, []sink.TotalKey{x.Key()}); err != nil {
		t.Fatalf("DeleteTotals through the newer view: %v", err)
	}
	totWantMissing(t, ctx, s, x.Key())
	if _, err := sink.TotalsUnder(s, sink.Token{Gen: 1, Fence: -1}); err == nil {
		t.Fatalf("TotalsUnder with fence -1: no error")
	}
}
