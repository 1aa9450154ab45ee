package sinktest

import (
	"context"
	"slices"
	"testing"

	"github.com/adclick/adclick/sink"
)

// fencedRows returns s as a sink.FencedRows: every row store of the suite
// must take fence tokens.
func fencedRows(t *testing.T, s sink.Rows) sink.FencedRows {
	t.Helper()
	fr, ok := s.(sink.FencedRows)
	if !ok {
		t.Fatalf("%T is not a sink.FencedRows", s)
	}
	return fr
}

func testLeaseFence(t *testing.T, s sink.Rows) {
	// Owner 2 of generation 7 writes the item.
	wantRefused(t, "gen 7 fence 2 on a new item", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7, Fence: 2}), 0)
	want := sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Fence: 2, Fast: tagged(hour1, 5, 50, 41, 7)}
	wantItem(t, s, want)

	// Owner 1 of the same generation, late: refused, for either writer
	// (the fence is per item), the item unchanged.
	wantRefused(t, "fast gen 7 fence 1 over wf 2", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 9, Epoch: 42, Gen: 7, Fence: 1}), 1)
	wantRefused(t, "late gen 7 fence 1 over wf 2", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 9, Epoch: 42, Gen: 7, Fence: 1}), 1)
	wantRefused(t, "gen 7 fence 0 over wf 2", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 9, Epoch: 42, Gen: 7}), 1)
	wantItem(t, s, want)

	// The same fence passes; a higher one passes and raises wf.
	wantRefused(t, "gen 7 fence 2 over wf 2", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 7, Fence: 2}), 0)
	want.Late = tagged(hour1, 1, 10, 42, 7)
	wantItem(t, s, want)
	wantRefused(t, "gen 7 fence 3 over wf 2", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 6, SpendMicros: 60, Epoch: 43, Gen: 7, Fence: 3}), 0)
	want.Fast, want.Fence = tagged(hour1, 6, 60, 43, 7), 3
	wantItem(t, s, want)
	// Now owner 2 is refused too.
	wantRefused(t, "gen 7 fence 2 over wf 3", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 2, Epoch: 44, Gen: 7, Fence: 2}), 1)
	wantItem(t, s, want)

	// A newer version wins whatever its fence: fences of two generations
	// are not compared.
	wantRefused(t, "gen 8 fence 1 over gen 7 wf 3", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 3, SpendMicros: 30, Epoch: 5, Gen: 8, Fence: 1}), 0)
	want.Late, want.JobGen, want.Fence = tagged(hour1, 3, 30, 5, 8), 8, 1
	wantItem(t, s, want)
	// An older version is refused whatever its fence.
	wantRefused(t, "gen 7 fence 99 over gen 8", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 7, Epoch: 45, Gen: 7, Fence: 99}), 1)
	wantItem(t, s, want)

	// A newer version without a lease (fence 0) clears wf: the old
	// version's fence does not outlive its job_gen, and the next write of
	// fence 0 passes.
	wantRefused(t, "gen 9 fence 0 over gen 8 wf 1", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 8, SpendMicros: 80, Epoch: 6, Gen: 9}), 0)
	want.Fast, want.JobGen, want.Fence = tagged(hour1, 8, 80, 6, 9), 9, 0
	wantItem(t, s, want)
	wantRefused(t, "gen 9 fence 0 again", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 4, SpendMicros: 40, Epoch: 7, Gen: 9}), 0)
	want.Late = tagged(hour1, 4, 40, 7, 9)
	wantItem(t, s, want)

	// The closed-row condition still holds beside the fence: both must pass.
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 4, Epoch: 40, Gen: 7, Fence: 2})
	wantRefused(t, "closed row ckpt 40 < 41, fence 3", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 42, Gen: 7, Fence: 3, ClosedRow: true, RestoredCkpt: 41}), 1)
	wantRefused(t, "closed row ckpt 40 >= 40, fence 1", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 42, Gen: 7, Fence: 1, ClosedRow: true, RestoredCkpt: 40}), 1)
	wantRefused(t, "closed row ckpt 40 >= 40, fence 3", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 42, Gen: 7, Fence: 3, ClosedRow: true, RestoredCkpt: 40}), 0)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 3, Fast: tagged(minute1, 5, 0, 42, 7)})

	// A batch is judged write by write.
	refused := put(t, s,
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 43, Gen: 7, Fence: 2}, // refused: wf 3
		sink.Put{Key: minute2, Writer: sink.Fast, Valid: 1, Epoch: 43, Gen: 7, Fence: 2}, // applied: new item
		sink.Put{Key: minute1, Writer: sink.Late, Valid: 1, Epoch: 43, Gen: 7, Fence: 4}, // applied: raises wf
	)
	wantRefused(t, "mixed fenced batch", refused, 1)
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 7, HasJobGen: true, Fence: 2, Fast: tagged(minute2, 1, 0, 43, 7)})
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 4, Fast: tagged(minute1, 5, 0, 42, 7), Late: tagged(minute1, 1, 0, 43, 7)})

	// A negative fence is an error, and nothing is written.
	if _, err := s.Put(context.Background(), []sink.Put{{Key: hour2, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 7, Fence: -1}}); err == nil {
		t.Fatalf("Put with fence -1: nil error")
	}
	wantMissing(t, s, hour2)
}

func testLeaseFenceZero(t *testing.T, s sink.Rows) {
	// Items written without a lease carry no wf (Fence 0) and behave as
	// before fences: job_gen alone decides.
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 41, Gen: 7})
	want := sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 5, 0, 41, 7)}
	wantItem(t, s, want)
	wantRefused(t, "gen 7 fence 0 over gen 7", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 6, Epoch: 42, Gen: 7}), 0)
	want.Fast = tagged(minute1, 6, 0, 42, 7)
	wantItem(t, s, want)
	wantRefused(t, "gen 6 fence 0 over gen 7", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 43, Gen: 6}), 1)
	wantItem(t, s, want)
	// An item without wf takes any fence of its generation.
	wantRefused(t, "gen 7 fence 5 over no wf", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 7, Epoch: 43, Gen: 7, Fence: 5}), 0)
	want.Fast, want.Fence = tagged(minute1, 7, 0, 43, 7), 5
	wantItem(t, s, want)

	// Remove and Delete without a token ignore wf, as before fences.
	ctx := context.Background()
	if ok, err := s.Remove(ctx, minute1, sink.Fast, 43); err != nil || !ok {
		t.Fatalf("Remove of an item with wf 5 = %v, %v; want true, nil", ok, err)
	}
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 5})
	put(t, s, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7, Fence: 5})
	if deleted, ok, err := s.Delete(ctx, minute2, sink.Fast, 41); err != nil || !deleted || !ok {
		t.Fatalf("Delete of an item with wf 5 = %v, %v, %v; want true, true, nil", deleted, ok, err)
	}
	wantMissing(t, s, minute2)

	// Fenced removals with fence 0 of items without wf work as before too.
	fr := fencedRows(t, s)
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 2, Epoch: 50, Gen: 7})
	put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 3, Epoch: 51, Gen: 7})
	if ok, err := fr.RemoveFenced(ctx, hour1, sink.Late, 50, sink.Token{Gen: 7}); err != nil || !ok {
		t.Fatalf("RemoveFenced(fence 0) of an item without wf = %v, %v; want true, nil", ok, err)
	}
	if deleted, ok, err := fr.DeleteFenced(ctx, hour1, sink.Fast, 51, sink.Token{Gen: 7}); err != nil || !deleted || !ok {
		t.Fatalf("DeleteFenced(fence 0) of an item without wf = %v, %v, %v; want true, true, nil", deleted, ok, err)
	}
	wantMissing(t, s, hour1)
}

func testRemoveFenced(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	fr := fencedRows(t, s)
	remove := func(k sink.Key, w sink.Writer, ckpt int64, tok sink.Token, wantOK bool) {
		t.Helper()
		ok, err := fr.RemoveFenced(ctx, k, w, ckpt, tok)
		if err != nil || ok != wantOK {
			t.Fatalf("RemoveFenced(%v, %v, %d, %+v) = %v, %v; want %v, nil", k, w, ckpt, tok, ok, err, wantOK)
		}
	}
	put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7, Fence: 3})
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 7, Fence: 3})
	want := sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Fence: 3, Fast: tagged(hour1, 5, 50, 41, 7), Late: tagged(hour1, 1, 10, 42, 7)}

	// A fence below wf, of the item's generation: not applied.
	remove(hour1, sink.Late, 42, sink.Token{Gen: 7, Fence: 2}, false)
	remove(hour1, sink.Late, 42, sink.Token{Gen: 7}, false)
	wantItem(t, s, want)
	// The ckpt condition still holds.
	remove(hour1, sink.Late, 41, sink.Token{Gen: 7, Fence: 3}, false)
	wantItem(t, s, want)
	// Fence equal to wf: applied, wf stays.
	remove(hour1, sink.Late, 42, sink.Token{Gen: 7, Fence: 3}, true)
	want.Late = sink.Tagged{}
	wantItem(t, s, want)
	wantKeys(t, "late index after RemoveFenced", queryKeys(t, s, sink.Late, sink.IndexKey(42, hour1)), nil)
	// A higher fence: applied, and wf rises to it, so that a write of the
	// older owner is refused from then on.
	remove(hour1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 5}, true)
	want.Fast, want.Fence = sink.Tagged{}, 5
	wantItem(t, s, want)
	wantRefused(t, "gen 7 fence 3 after a removal under fence 5", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 9, Epoch: 43, Gen: 7, Fence: 3}), 1)
	wantItem(t, s, want)

	// An item last written by another generation: fences are not
	// compared, the removal goes on <w>_ckpt alone and leaves wf as it is.
	put(t, s, sink.Put{Key: hour2, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 6, Fence: 1})
	put(t, s, sink.Put{Key: hour2, Writer: sink.Fast, Valid: 2, SpendMicros: 20, Epoch: 3, Gen: 8, Fence: 9})
	remove(hour2, sink.Late, 42, sink.Token{Gen: 6, Fence: 1}, true)
	wantItem(t, s, sink.Item{Key: hour2, JobGen: 8, HasJobGen: true, Fence: 9, Fast: tagged(hour2, 2, 20, 3, 8)})
	put(t, s, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 1, Epoch: 4, Gen: 6, Fence: 9})
	remove(minute2, sink.Fast, 4, sink.Token{Gen: 7, Fence: 1}, true)
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 6, HasJobGen: true, Fence: 9})

	// Missing item, and a writer without tagged attributes.
	remove(minute1, sink.Fast, 1, sink.Token{Gen: 7, Fence: 3}, false)
	wantMissing(t, s, minute1)
	for _, w := range []sink.Writer{0, sink.Final} {
		if _, err := fr.RemoveFenced(ctx, minute1, w, 1, sink.Token{Gen: 7, Fence: 3}); err == nil {
			t.Errorf("RemoveFenced with writer %v: got nil error, want an error", w)
		}
		if _, _, err := fr.DeleteFenced(ctx, minute1, w, 1, sink.Token{Gen: 7, Fence: 3}); err == nil {
			t.Errorf("DeleteFenced with writer %v: got nil error, want an error", w)
		}
	}
}

func testDeleteFenced(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	fr := fencedRows(t, s)
	del := func(k sink.Key, w sink.Writer, ckpt int64, tok sink.Token, wantDeleted, wantOK bool) {
		t.Helper()
		deleted, ok, err := fr.DeleteFenced(ctx, k, w, ckpt, tok)
		if err != nil || deleted != wantDeleted || ok != wantOK {
			t.Fatalf("DeleteFenced(%v, %v, %d, %+v) = %v, %v, %v; want %v, %v, nil", k, w, ckpt, tok, deleted, ok, err, wantDeleted, wantOK)
		}
	}
	// A minute item with only fast_*: a fence below wf keeps it.
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7, Fence: 3})
	onlyFast := sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 3, Fast: tagged(minute1, 5, 50, 41, 7)}
	del(minute1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 2}, false, false)
	wantItem(t, s, onlyFast)
	del(minute1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 3}, true, true)
	wantMissing(t, s, minute1)
	wantKeys(t, "fast index after DeleteFenced", queryKeys(t, s, sink.Fast, sink.IndexKey(41, minute1)), nil)

	// Another generation's item goes on <w>_ckpt alone.
	put(t, s, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 6, Fence: 9})
	del(minute2, sink.Fast, 41, sink.Token{Gen: 7, Fence: 1}, true, true)
	wantMissing(t, s, minute2)

	// With another writer's attributes: the fallback removal is fenced
	// too, and raises wf.
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, Epoch: 41, Gen: 7, Fence: 3})
	put(t, s, sink.Put{Key: minute1, Writer: sink.Late, Valid: 1, Epoch: 42, Gen: 7, Fence: 3})
	del(minute1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 2}, false, false)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 3, Fast: tagged(minute1, 5, 0, 41, 7), Late: tagged(minute1, 1, 0, 42, 7)})
	del(minute1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 4}, false, true)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 4, Late: tagged(minute1, 1, 0, 42, 7)})
	wantRefused(t, "gen 7 fence 3 after a fenced delete under fence 4", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 9, Epoch: 43, Gen: 7, Fence: 3}), 1)

	// Missing item.
	del(hour2, sink.Late, 1, sink.Token{Gen: 7, Fence: 3}, false, false)
}

func testFencedView(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	v, err := sink.Fenced(s, sink.Token{Gen: 7, Fence: 4})
	if err != nil {
		t.Fatalf("Fenced: %v", err)
	}
	// Puts without a fence take the view's; one with its own keeps it.
	// The caller's slice is left as it was.
	puts := []sink.Put{
		{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7},
		{Key: minute2, Writer: sink.Fast, Valid: 2, Epoch: 41, Gen: 7, Fence: 6},
	}
	orig := slices.Clone(puts)
	if n, err := v.Put(ctx, puts); err != nil || n != 0 {
		t.Fatalf("Put through the view = %d, %v; want 0, nil", n, err)
	}
	if !slices.Equal(puts, orig) {
		t.Errorf("Put through the view changed the caller's puts: %+v", puts)
	}
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 4, Fast: tagged(minute1, 1, 0, 41, 7)})
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 7, HasJobGen: true, Fence: 6, Fast: tagged(minute2, 2, 0, 41, 7)})
	// The view's Remove and Delete are fenced by its token.
	if ok, err := v.Remove(ctx, minute2, sink.Fast, 41); err != nil || ok {
		t.Fatalf("Remove under fence 4 of an item with wf 6 = %v, %v; want false, nil", ok, err)
	}
	if deleted, ok, err := v.Delete(ctx, minute2, sink.Fast, 41); err != nil || deleted || ok {
		t.Fatalf("Delete under fence 4 of an item with wf 6 = %v, %v, %v; want false, false, nil", deleted, ok, err)
	}
	// A view of the view replaces the token.
	v6, err := sink.Fenced(v, sink.Token{Gen: 7, Fence: 6})
	if err != nil {
		t.Fatalf("Fenced of a view: %v", err)
	}
	if deleted, ok, err := v6.Delete(ctx, minute2, sink.Fast, 41); err != nil || !deleted || !ok {
		t.Fatalf("Delete under fence 6 of an item with wf 6 = %v, %v, %v; want true, true, nil", deleted, ok, err)
	}
	// A write of the old owner through its view is refused once the new
	// owner wrote.
	if n, err := v6.Put(ctx, []sink.Put{{Key: minute1, Writer: sink.Fast, Valid: 3, Epoch: 42, Gen: 7}}); err != nil || n != 0 {
		t.Fatalf("Put under fence 6 = %d, %v; want 0, nil", n, err)
	}
	if n, err := v.Put(ctx, []sink.Put{{Key: minute1, Writer: sink.Fast, Valid: 9, Epoch: 43, Gen: 7}}); err != nil || n != 1 {
		t.Fatalf("Put under fence 4 after fence 6 wrote = %d refused, %v; want 1, nil", n, err)
	}
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fence: 6, Fast: tagged(minute1, 3, 0, 42, 7)})
	if _, err := sink.Fenced(s, sink.Token{Gen: 7, Fence: -1}); err == nil {
		t.Errorf("Fenced with fence -1: nil error")
	}
}
