package sinktest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/adclick/adclick/sink"
)

// The scopes of the scope suites: two ranges of key groups.
const (
	scopeA = "kg0-16"
	scopeB = "kg17-33"
)

// badScopes are scopes every store's Scoped must refuse.
var badScopes = []string{"kg0/16", "kg0#16", "kg0:16", "{kg0}", "kg 0", "-kg"}

// ScopedRows runs the conformance suite of index scopes (sink.ValidateScope)
// over one row store. open returns a fresh, empty store for the subtest
// (registering its own cleanup) and scoped, which returns the store's view
// with a scope, "" included (the adapter's Scoped method). Subtests run one
// after another.
//
// The suite pins down:
//   - A view with scope S writes <w>_ix = sink.IndexKeyIn(S, epoch, key),
//     and its QueryIndex(w, ix), ix unscoped, returns exactly the items
//     whose <w>_ix is sink.ScopedIndexKey(S, ix): never another scope's
//     items, nor unscoped ones, even with the same epoch and shard.
//   - The store itself, and its view with scope "", write and query the
//     unscoped key "<epoch>#<shard>", byte for byte as before scopes.
//   - Items are shared: Get, Scan, QueryBucket, Remove and Delete of any
//     view see and change the same items. A write through one view moves
//     the item's <w>_ix into that view's scope.
//   - Scoped refuses an invalid scope with an error.
func ScopedRows(t *testing.T, open func(t *testing.T) (base sink.Rows, scoped func(scope string) (sink.Rows, error))) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, base sink.Rows, scoped func(string) (sink.Rows, error))
	}{
		{"IndexApart", testScopedIndexApart},
		{"Unscoped", testScopedUnscoped},
		{"SharedItems", testScopedSharedItems},
		{"BadScope", testScopedBadScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, scoped := open(t)
			if base == nil || scoped == nil {
				t.Fatalf("open returned a nil store or scoped")
			}
			tc.fn(t, base, scoped)
		})
	}
}

func view(t *testing.T, scoped func(string) (sink.Rows, error), scope string) sink.Rows {
	t.Helper()
	v, err := scoped(scope)
	if err != nil {
		t.Fatalf("Scoped(%q): %v", scope, err)
	}
	if v == nil {
		t.Fatalf("Scoped(%q) returned a nil view", scope)
	}
	return v
}

// queryScoped is queryKeys for a view with scope: it returns the keys that
// s.QueryIndex(w, ix) finds, checking that each carries the scoped key.
func queryScoped(t *testing.T, s sink.Rows, scope string, w sink.Writer, ix string) []sink.Key {
	t.Helper()
	want := sink.ScopedIndexKey(scope, ix)
	var keys []sink.Key
	err := s.QueryIndex(context.Background(), w, ix, func(it sink.Item) error {
		if got := it.Attrs(w).Ix; got != want {
			return fmt.Errorf("QueryIndex(%v, %q) in scope %q returned %v with %s_ix %q, want %q", w, ix, scope, it.Key, w, got, want)
		}
		keys = append(keys, it.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex(%v, %q) in scope %q: %v", w, ix, scope, err)
	}
	sortKeys(keys)
	return keys
}

func testScopedIndexApart(t *testing.T, base sink.Rows, scoped func(string) (sink.Rows, error)) {
	a, b := view(t, scoped, scopeA), view(t, scoped, scopeB)
	// Range A and range B write minutes and hours of their own ads with
	// the same epoch numbers, the minutes in the same index shard.
	ka := keysInShard("a", 3, 2, 0)
	kb := keysInShard("b", 3, 2, 0)
	hourOf := func(k sink.Key) sink.Key { return sink.Key{Entity: k.Entity, Bucket: "H2026-11-29T10Z"} }
	type entry struct {
		w sink.Writer
		k sink.Key
	}
	written := map[string][]entry{}
	for _, c := range []struct {
		s     sink.Rows
		scope string
		ks    []sink.Key
	}{{a, scopeA, ka}, {b, scopeB, kb}} {
		for _, k := range c.ks {
			put(t, c.s, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7},
				sink.Put{Key: hourOf(k), Writer: sink.Late, Valid: 2, Epoch: 41, Gen: 7})
			written[c.scope] = append(written[c.scope], entry{sink.Fast, k}, entry{sink.Late, hourOf(k)})
			// The items carry the scoped keys, byte for byte.
			if got, want := getIx(t, base, k, sink.Fast), c.scope+"/"+sink.IndexKey(41, k); got != want {
				t.Fatalf("%v written in scope %q: fast_ix %q, want %q", k, c.scope, got, want)
			}
			if got, want := getIx(t, base, hourOf(k), sink.Late), c.scope+"/"+sink.IndexKey(41, hourOf(k)); got != want {
				t.Fatalf("%v written in scope %q: late_ix %q, want %q", hourOf(k), c.scope, got, want)
			}
		}
	}
	ix := sink.IndexKeyOf(41, 3)
	wantKeys(t, "A's fast index", queryScoped(t, a, scopeA, sink.Fast, ix), ka)
	wantKeys(t, "B's fast index", queryScoped(t, b, scopeB, sink.Fast, ix), kb)
	wantKeys(t, "unscoped fast index", queryKeys(t, base, sink.Fast, ix), nil)
	// What the flush of each range reads, every shard of epochs 40..42,
	// is exactly what that range wrote; the unscoped store reads nothing.
	found := map[string][]entry{}
	for e := int64(40); e <= 42; e++ {
		for n := range sink.IndexShards {
			ix := sink.IndexKeyOf(e, n)
			for _, w := range sink.TaggedWriters {
				if keys := queryKeys(t, base, w, ix); len(keys) != 0 {
					t.Fatalf("unscoped QueryIndex(%v, %q) = %v, want none", w, ix, keys)
				}
				for _, k := range queryScoped(t, a, scopeA, w, ix) {
					found[scopeA] = append(found[scopeA], entry{w, k})
				}
				for _, k := range queryScoped(t, b, scopeB, w, ix) {
					found[scopeB] = append(found[scopeB], entry{w, k})
				}
			}
		}
	}
	for _, scope := range []string{scopeA, scopeB} {
		got, want := found[scope], written[scope]
		if len(got) != len(want) {
			t.Fatalf("the index queries of scope %q found %v, want %v", scope, got, want)
		}
		for _, x := range want {
			if !slices.Contains(got, x) {
				t.Fatalf("the index queries of scope %q found %v, want %v", scope, got, want)
			}
		}
	}
}

func testScopedUnscoped(t *testing.T, base sink.Rows, scoped func(string) (sink.Rows, error)) {
	none, a := view(t, scoped, ""), view(t, scoped, scopeA)
	// The view with scope "" writes today's key, byte for byte.
	put(t, none, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 70, Epoch: 41, Gen: 7},
		sink.Put{Key: hour1, Writer: sink.Late, Valid: 2, Epoch: 42, Gen: 7})
	put(t, base, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 3, Epoch: 41, Gen: 7})
	wantItem(t, base, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 5, 70, 41, 7)})
	wantItem(t, base, sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Late: tagged(hour1, 2, 0, 42, 7)})
	if got, want := getIx(t, base, minute1, sink.Fast), fmt.Sprintf("41#%d", sink.IndexShard(minute1)); got != want {
		t.Fatalf("fast_ix written through Scoped(\"\") = %q, want %q", got, want)
	}
	for _, s := range []struct {
		name string
		v    sink.Rows
	}{{"the store", base}, {"Scoped(\"\")", none}} {
		wantKeys(t, s.name+": fast index 41", queryKeys(t, s.v, sink.Fast, sink.IndexKey(41, minute1)),
			keysWithIx(sink.IndexKey(41, minute1), 41, minute1, minute2))
		wantKeys(t, s.name+": late index 42", queryKeys(t, s.v, sink.Late, sink.IndexKey(42, hour1)), []sink.Key{hour1})
	}
	// A scoped view sees none of the unscoped keys.
	wantKeys(t, "A's fast index 41", queryScoped(t, a, scopeA, sink.Fast, sink.IndexKey(41, minute1)), nil)
	wantKeys(t, "A's fast index 41", queryScoped(t, a, scopeA, sink.Fast, sink.IndexKey(41, minute2)), nil)
	wantKeys(t, "A's late index 42", queryScoped(t, a, scopeA, sink.Late, sink.IndexKey(42, hour1)), nil)
}

func getIx(t *testing.T, s sink.Rows, k sink.Key, w sink.Writer) string {
	t.Helper()
	it, ok := get(t, s, k)
	if !ok {
		t.Fatalf("Get(%v): missing", k)
	}
	return it.Attrs(w).Ix
}

func testScopedSharedItems(t *testing.T, base sink.Rows, scoped func(string) (sink.Rows, error)) {
	a, b := view(t, scoped, scopeA), view(t, scoped, scopeB)
	ix := func(k sink.Key, e int64) string { return sink.IndexKey(e, k) }
	put(t, a, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 41, Gen: 7})
	put(t, b, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 6, Epoch: 41, Gen: 7})
	put(t, base, sink.Put{Key: hour2, Writer: sink.Fast, Valid: 9, Epoch: 41, Gen: 7})

	// Every view reads the same items.
	for _, v := range []sink.Rows{base, a, b} {
		if got, ok := get(t, v, minute2); !ok || got.Fast.Valid != 6 {
			t.Fatalf("Get(%v) = %+v, %v; want B's write", minute2, got, ok)
		}
		n := 0
		if err := v.Scan(context.Background(), func(sink.Item) error { n++; return nil }); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if n != 3 {
			t.Fatalf("Scan saw %d items, want 3", n)
		}
		if got := bucketEntities(t, v, minute1.Bucket, "", 0); !slices.Equal(got, []string{"ad_7", "ad_9"}) {
			t.Fatalf("QueryBucket = %v, want [ad_7 ad_9]", got)
		}
	}

	// A rewrite moves the item's key into the writing view's scope: an
	// unscoped item written again by A leaves the unscoped index.
	put(t, a, sink.Put{Key: hour2, Writer: sink.Fast, Valid: 10, Epoch: 42, Gen: 7})
	wantKeys(t, "unscoped fast index 41 after A's rewrite", queryKeys(t, base, sink.Fast, ix(hour2, 41)), nil)
	wantKeys(t, "A's fast index 42", queryScoped(t, a, scopeA, sink.Fast, ix(hour2, 42)), []sink.Key{hour2})
	// Retagged within A: the old key of A goes.
	put(t, a, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 6, Epoch: 43, Gen: 7})
	wantKeys(t, "A's fast index 41 after retag", queryScoped(t, a, scopeA, sink.Fast, ix(minute1, 41)), nil)
	wantKeys(t, "A's fast index 43", queryScoped(t, a, scopeA, sink.Fast, ix(minute1, 43)), []sink.Key{minute1})

	// Delete through A takes the item out of A's index; B's stays.
	if deleted, ok, err := a.Delete(context.Background(), minute1, sink.Fast, 43); err != nil || !deleted || !ok {
		t.Fatalf("Delete through A = %v, %v, %v; want deleted", deleted, ok, err)
	}
	wantKeys(t, "A's fast index 43 after Delete", queryScoped(t, a, scopeA, sink.Fast, ix(minute1, 43)), nil)
	wantMissing(t, b, minute1)
	wantKeys(t, "B's fast index 41", queryScoped(t, b, scopeB, sink.Fast, ix(minute2, 41)), []sink.Key{minute2})
	// Remove through A of B's item, conditioned on its ckpt, works on the
	// shared item (conditions are per item, not per scope).
	if ok, err := a.Remove(context.Background(), minute2, sink.Fast, 41); err != nil || !ok {
		t.Fatalf("Remove through A of B's item = %v, %v; want ok", ok, err)
	}
	wantKeys(t, "B's fast index 41 after Remove", queryScoped(t, b, scopeB, sink.Fast, ix(minute2, 41)), nil)
}

func testScopedBadScope(t *testing.T, _ sink.Rows, scoped func(string) (sink.Rows, error)) {
	for _, s := range badScopes {
		if v, err := scoped(s); err == nil {
			t.Errorf("Scoped(%q) = %v, nil; want an error", s, v)
		}
	}
}

// ScopedTotals runs the conformance suite of index scopes over one
// running-total store. open returns a fresh, empty store for the subtest
// (registering its own cleanup) and scoped, which returns its view with a
// scope, "" included.
//
// The suite pins down:
//   - The totals are shared: GetTotal of any view sees every view's
//     writes, and a DeleteTotals through any view deletes the value.
//   - The epoch bookkeeping is per scope: TotalsWritten(e) of a view lists
//     only what SetTotals of views with the same scope recorded under e;
//     ForgetEpochs and DeleteTotals of a view drop only its scope's
//     records (another scope listing a deleted key keeps its record, which
//     costs its flush a needless delete at worst).
//   - The store itself and its view with scope "" share the unscoped
//     bookkeeping, as before scopes.
//   - Scoped refuses an invalid scope with an error.
func ScopedTotals(t *testing.T, open func(t *testing.T) (base sink.Totals, scoped func(scope string) (sink.Totals, error))) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error))
	}{
		{"EpochsApart", testScopedEpochsApart},
		{"ForgetApart", testScopedForgetApart},
		{"DeleteApart", testScopedDeleteApart},
		{"Unscoped", testScopedTotalsUnscoped},
		{"BadScope", testScopedTotalsBadScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, scoped := open(t)
			if base == nil || scoped == nil {
				t.Fatalf("open returned a nil store or scoped")
			}
			tc.fn(t, base, scoped)
		})
	}
}

func totView(t *testing.T, scoped func(string) (sink.Totals, error), scope string) sink.Totals {
	t.Helper()
	v, err := scoped(scope)
	if err != nil {
		t.Fatalf("Scoped(%q): %v", scope, err)
	}
	if v == nil {
		t.Fatalf("Scoped(%q) returned a nil view", scope)
	}
	return v
}

// wantListed checks that s.TotalsWritten(epoch) lists exactly the keys of
// want.
func wantListed(t *testing.T, ctx context.Context, what string, s sink.Totals, epoch int64, want ...sink.Total) {
	t.Helper()
	got := totListed(t, ctx, s, epoch)
	ok := len(got) == len(want)
	for _, x := range want {
		ok = ok && got[x.Key()]
	}
	if !ok {
		t.Fatalf("%s: TotalsWritten(%d) = %v, want %v", what, epoch, got, totKeys(want...))
	}
}

func testScopedEpochsApart(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error)) {
	ctx := totCtx(t)
	a, b := totView(t, scoped, scopeA), totView(t, scoped, scopeB)
	a41, a41h := totMinute("ad_a", 0, 5, 50, 41), totHour("ad_a", 0, 7, 70, 41)
	a42 := totMinute("ad_a", 1, 2, 20, 42)
	b41, b41h := totMinute("ad_b", 0, 3, 30, 41), totHour("ad_b", 0, 4, 40, 41)
	b43 := totMinute("ad_b", 2, 1, 10, 43)
	totSet(t, ctx, a, a41, a41h, a42)
	totSet(t, ctx, b, b41, b41h, b43)
	wantListed(t, ctx, "A", a, 41, a41, a41h)
	wantListed(t, ctx, "A", a, 42, a42)
	wantListed(t, ctx, "A", a, 43)
	wantListed(t, ctx, "B", b, 41, b41, b41h)
	wantListed(t, ctx, "B", b, 42)
	wantListed(t, ctx, "B", b, 43, b43)
	for e := int64(40); e <= 44; e++ {
		wantListed(t, ctx, "the unscoped store", base, e)
	}
	// A second view of the same scope shares its bookkeeping.
	wantListed(t, ctx, "A again", totView(t, scoped, scopeA), 41, a41, a41h)
	// Every view reads every total.
	for _, v := range []sink.Totals{base, a, b} {
		for _, x := range []sink.Total{a41, a41h, a42, b41, b41h, b43} {
			totWant(t, ctx, v, x)
		}
	}
}

func testScopedForgetApart(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error)) {
	ctx := totCtx(t)
	a, b := totView(t, scoped, scopeA), totView(t, scoped, scopeB)
	a41, a42 := totMinute("ad_a", 0, 5, 50, 41), totMinute("ad_a", 1, 2, 20, 42)
	b41, b42 := totMinute("ad_b", 0, 3, 30, 41), totMinute("ad_b", 1, 1, 10, 42)
	u41 := totMinute("ad_u", 0, 9, 90, 41)
	totSet(t, ctx, a, a41, a42)
	totSet(t, ctx, b, b41, b42)
	totSet(t, ctx, base, u41)
	// A's flush after restoring 41 forgets (41, 42]: B's and the unscoped
	// records of the same epochs stay.
	if err := a.ForgetEpochs(ctx, 42, 43); err != nil {
		t.Fatalf("ForgetEpochs: %v", err)
	}
	wantListed(t, ctx, "A", a, 41, a41)
	wantListed(t, ctx, "A", a, 42)
	wantListed(t, ctx, "B", b, 41, b41)
	wantListed(t, ctx, "B", b, 42, b42)
	if err := a.ForgetEpochs(ctx, 0, 100); err != nil {
		t.Fatalf("ForgetEpochs: %v", err)
	}
	wantListed(t, ctx, "A", a, 41)
	wantListed(t, ctx, "B", b, 41, b41)
	wantListed(t, ctx, "the unscoped store", base, 41, u41)
	// B's and the store's forgetting leaves nothing, and values stay.
	if err := base.ForgetEpochs(ctx, 0, 100); err != nil {
		t.Fatalf("ForgetEpochs: %v", err)
	}
	wantListed(t, ctx, "B after the store's ForgetEpochs", b, 42, b42)
	wantListed(t, ctx, "the unscoped store", base, 41)
	for _, x := range []sink.Total{a41, a42, b41, b42, u41} {
		totWant(t, ctx, b, x)
	}
}

func testScopedDeleteApart(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error)) {
	ctx := totCtx(t)
	a, b := totView(t, scoped, scopeA), totView(t, scoped, scopeB)
	a41 := totMinute("ad_a", 0, 5, 50, 41)
	b41, b42 := totMinute("ad_b", 0, 3, 30, 41), totMinute("ad_b", 1, 1, 10, 42)
	totSet(t, ctx, a, a41)
	totSet(t, ctx, b, b41, b42)
	// A's flush deletes a total its state lacks: only A's.
	if err := a.DeleteTotals(ctx, []sink.TotalKey{a41.Key()}); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	totWantMissing(t, ctx, base, a41.Key())
	wantListed(t, ctx, "A", a, 41)
	wantListed(t, ctx, "B", b, 41, b41)
	wantListed(t, ctx, "B", b, 42, b42)
	totWant(t, ctx, a, b41)
	totWant(t, ctx, a, b42)

	// A key both scopes recorded (an ad that moved between ranges): A's
	// delete takes the value and A's record only.
	shared := totMinute("ad_s", 3, 8, 80, 41)
	totSet(t, ctx, a, shared)
	totSet(t, ctx, b, shared)
	if err := a.DeleteTotals(ctx, []sink.TotalKey{shared.Key()}); err != nil {
		t.Fatalf("DeleteTotals: %v", err)
	}
	totWantMissing(t, ctx, b, shared.Key())
	wantListed(t, ctx, "A", a, 41)
	wantListed(t, ctx, "B", b, 41, b41, shared)
}

func testScopedTotalsUnscoped(t *testing.T, base sink.Totals, scoped func(string) (sink.Totals, error)) {
	ctx := totCtx(t)
	none, a := totView(t, scoped, ""), totView(t, scoped, scopeA)
	x, y := totMinute("ad_x", 0, 5, 50, 41), totHour("ad_y", 0, 6, 60, 41)
	totSet(t, ctx, none, x)
	totSet(t, ctx, base, y)
	wantListed(t, ctx, "the store", base, 41, x, y)
	wantListed(t, ctx, "Scoped(\"\")", none, 41, x, y)
	wantListed(t, ctx, "A", a, 41)
	if err := none.ForgetEpochs(ctx, 41, 42); err != nil {
		t.Fatalf("ForgetEpochs: %v", err)
	}
	wantListed(t, ctx, "the store after Scoped(\"\").ForgetEpochs", base, 41)
	totWant(t, ctx, a, x)
	totWant(t, ctx, a, y)
}

func testScopedTotalsBadScope(t *testing.T, _ sink.Totals, scoped func(string) (sink.Totals, error)) {
	for _, s := range badScopes {
		if v, err := scoped(s); err == nil {
			t.Errorf("Scoped(%q) = %v, nil; want an error", s, v)
		}
	}
}
