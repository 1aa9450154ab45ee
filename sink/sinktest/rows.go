package sinktest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/adclick/adclick/sink"
)

// Rows runs the sink.Rows conformance suite. open must return a fresh, empty
// store for the subtest it is given (and register its own cleanup with
// t.Cleanup). Subtests run one after another.
//
// Besides the doc comments of package sink, the suite pins down these
// readings of the contract:
//   - Put, Remove, Delete and QueryIndex return an error for a writer other
//     than sink.Fast or sink.Late; empty batches are no-ops.
//   - Within one Put (or PutFinal) call, callers pass writes in order and
//     the last write of a (key, writer) wins; an implementation may send
//     only that one.
//   - PutFinal is conditioned on final_gen only and leaves job_gen alone
//     (the recount's generation is a different number from the stream's).
//   - Remove keeps the item (with job_gen) even when no writer's attributes
//     remain; only Delete removes items.
//   - Put and PutFinal with a cancelled context fail with an error that
//     wraps context.Canceled and write nothing.
//   - A callback error stops QueryIndex, QueryBucket and Scan and is
//     returned (wrapped or not, errors.Is must find it).
//   - QueryBucket returns every item of the bucket, whoever wrote it
//     (final_* alone included), and items that Remove left with no
//     writer's attributes; never an item Delete removed.
//   - The store is a sink.FencedRows. Put compares the token (Gen, Fence)
//     with (job_gen, wf), an item without wf reading as fence 0; a write
//     with fence 0 leaves no wf, and one with a negative fence is an
//     error. RemoveFenced and DeleteFenced compare fences only on an item
//     of the token's generation, and raise wf on an item they leave;
//     plain Remove and Delete ignore wf.
func Rows(t *testing.T, open func(t *testing.T) sink.Rows) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s sink.Rows)
	}{
		{"GetMissing", testGetMissing},
		{"PutSetsOneWriter", testPutSetsOneWriter},
		{"PutIsAbsolute", testPutIsAbsolute},
		{"PutRejectsBadWriter", testPutRejectsBadWriter},
		{"JobGenFencing", testJobGenFencing},
		{"LeaseFence", testLeaseFence},
		{"LeaseFenceZero", testLeaseFenceZero},
		{"RemoveFenced", testRemoveFenced},
		{"DeleteFenced", testDeleteFenced},
		{"FencedView", testFencedView},
		{"ClosedRow", testClosedRow},
		{"PutFinal", testPutFinal},
		{"QueryIndex", testQueryIndex},
		{"QueryIndexRetag", testQueryIndexRetag},
		{"QueryIndexCallbackError", testQueryIndexCallbackError},
		{"Remove", testRemove},
		{"Delete", testDelete},
		{"Scan", testScan},
		{"QueryBucket", testQueryBucket},
		{"QueryBucketAfterDelete", testQueryBucketAfterDelete},
		{"QueryBucketManyPages", testQueryBucketManyPages},
		{"CoalescedPuts", testCoalescedPuts},
		{"LargeBatch", testLargeBatch},
		{"QueryIndexManyPages", testQueryIndexManyPages},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ConcurrentFencing", testConcurrentFencing},
		{"CancelledContext", testCancelledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatalf("open returned a nil store")
			}
			tc.fn(t, s)
		})
	}
}

// Keys used across the subtests.
var (
	minute1 = sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	minute2 = sink.Key{Entity: "ad_9", Bucket: "M2026-11-29T10:14Z"}
	hour1   = sink.Key{Entity: "ad_7", Bucket: "H2026-11-29T10Z"}
	hour2   = sink.Key{Entity: "ad_9", Bucket: "H2026-11-29T10Z"}
)

func put(t *testing.T, s sink.Rows, puts ...sink.Put) int {
	t.Helper()
	refused, err := s.Put(context.Background(), puts)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	return refused
}

func putFinal(t *testing.T, s sink.Rows, puts ...sink.FinalPut) int {
	t.Helper()
	refused, err := s.PutFinal(context.Background(), puts)
	if err != nil {
		t.Fatalf("PutFinal: %v", err)
	}
	return refused
}

func get(t *testing.T, s sink.Rows, k sink.Key) (sink.Item, bool) {
	t.Helper()
	it, ok, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("Get(%v): %v", k, err)
	}
	if ok && it.Key != k {
		t.Fatalf("Get(%v) returned key %v", k, it.Key)
	}
	return it, ok
}

func wantItem(t *testing.T, s sink.Rows, want sink.Item) {
	t.Helper()
	got, ok := get(t, s, want.Key)
	if !ok {
		t.Fatalf("Get(%v): missing, want %+v", want.Key, want)
	}
	if got != want {
		t.Fatalf("Get(%v):\n got  %+v\n want %+v", want.Key, got, want)
	}
}

func wantMissing(t *testing.T, s sink.Rows, k sink.Key) {
	t.Helper()
	if got, ok := get(t, s, k); ok {
		t.Fatalf("Get(%v) = %+v, want no item", k, got)
	}
}

func wantRefused(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: refused = %d, want %d", what, got, want)
	}
}

// tagged is the expected <w>_* group of a Put with the given values.
func tagged(k sink.Key, valid, spend, epoch, gen int64) sink.Tagged {
	return sink.Tagged{
		Present:     true,
		Valid:       valid,
		SpendMicros: spend,
		Ckpt:        epoch,
		Ix:          fmt.Sprintf("%d#%d", epoch, sink.IndexShard(k)),
		Gen:         gen,
	}
}

func queryKeys(t *testing.T, s sink.Rows, w sink.Writer, ix string) []sink.Key {
	t.Helper()
	var keys []sink.Key
	err := s.QueryIndex(context.Background(), w, ix, func(it sink.Item) error {
		if got := it.Attrs(w).Ix; got != ix {
			return fmt.Errorf("QueryIndex(%v, %q) returned %v with %s_ix %q", w, ix, it.Key, w, got)
		}
		keys = append(keys, it.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex(%v, %q): %v", w, ix, err)
	}
	sortKeys(keys)
	return keys
}

func sortKeys(keys []sink.Key) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Entity != keys[j].Entity {
			return keys[i].Entity < keys[j].Entity
		}
		return keys[i].Bucket < keys[j].Bucket
	})
}

func wantKeys(t *testing.T, what string, got, want []sink.Key) {
	t.Helper()
	want = append([]sink.Key(nil), want...)
	sortKeys(want)
	if len(got) != len(want) {
		t.Fatalf("%s: got %d keys %v, want %d keys %v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got keys %v, want %v", what, got, want)
		}
	}
}

func testGetMissing(t *testing.T, s sink.Rows) {
	wantMissing(t, s, minute1)
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
	wantMissing(t, s, minute2)
	wantMissing(t, s, sink.Key{Entity: minute1.Entity, Bucket: hour1.Bucket})
}

func testPutSetsOneWriter(t *testing.T, s sink.Rows) {
	// Fast on an absent item creates it with fast_* and job_gen only.
	wantRefused(t, "fast put", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 500, Epoch: 41, Gen: 7}), 0)
	want := sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Fast: tagged(hour1, 5, 500, 41, 7)}
	wantItem(t, s, want)

	// Late on the same item adds late_* and leaves fast_* alone.
	wantRefused(t, "late put", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 90, Epoch: 42, Gen: 7}), 0)
	want.Late = tagged(hour1, 1, 90, 42, 7)
	wantItem(t, s, want)

	// A recount adds final_*; a later fast write leaves it and late_* alone.
	wantRefused(t, "final put", putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 6, SpendMicros: 590, Gen: 3, AtMs: 1_800_000_000_000}), 0)
	want.Final = sink.FinalAttrs{Present: true, Valid: 6, SpendMicros: 590, Gen: 3, AtMs: 1_800_000_000_000}
	wantItem(t, s, want)

	wantRefused(t, "second fast put", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 8, SpendMicros: 800, Epoch: 43, Gen: 8}), 0)
	want.Fast = tagged(hour1, 8, 800, 43, 8)
	want.JobGen = 8
	// late_gen keeps the generation of the late write: the per-writer
	// generation of seed 001 Part 9.
	wantItem(t, s, want)

	// Zero values are stored as values, not as absence.
	put(t, s, sink.Put{Key: minute2, Writer: sink.Late, Valid: 0, SpendMicros: 0, Epoch: 0, Gen: 0})
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 0, HasJobGen: true, Late: tagged(minute2, 0, 0, 0, 0)})
}

func testPutIsAbsolute(t *testing.T, s sink.Rows) {
	p := sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7}
	put(t, s, p)
	put(t, s, p)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 5, 50, 41, 7)})
	// A smaller value replaces a larger one: SET, never ADD or MAX.
	p.Valid, p.SpendMicros = 3, 30
	put(t, s, p)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 3, 30, 41, 7)})
	// An older epoch with the same generation is a plain write too.
	p.Epoch = 40
	put(t, s, p)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 3, 30, 40, 7)})
}

func testPutRejectsBadWriter(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	for _, w := range []sink.Writer{0, sink.Final, sink.Writer(9)} {
		if _, err := s.Put(ctx, []sink.Put{{Key: minute1, Writer: w, Valid: 1, Epoch: 1, Gen: 1}}); err == nil {
			t.Errorf("Put with writer %v: got nil error, want an error", w)
		}
		if err := s.QueryIndex(ctx, w, "1#0", func(sink.Item) error { return nil }); err == nil {
			t.Errorf("QueryIndex with writer %v: got nil error, want an error", w)
		}
		if _, err := s.Remove(ctx, minute1, w, 1); err == nil {
			t.Errorf("Remove with writer %v: got nil error, want an error", w)
		}
		if _, _, err := s.Delete(ctx, minute1, w, 1); err == nil {
			t.Errorf("Delete with writer %v: got nil error, want an error", w)
		}
	}
	wantMissing(t, s, minute1)
	// Empty batches are fine.
	if n, err := s.Put(ctx, nil); err != nil || n != 0 {
		t.Errorf("Put(nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.PutFinal(ctx, nil); err != nil || n != 0 {
		t.Errorf("PutFinal(nil) = %d, %v; want 0, nil", n, err)
	}
}

func testJobGenFencing(t *testing.T, s sink.Rows) {
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 8})
	want := sink.Item{Key: minute1, JobGen: 8, HasJobGen: true, Fast: tagged(minute1, 5, 50, 41, 8)}

	// Lower generation: refused and counted, item unchanged.
	wantRefused(t, "gen 7 over job_gen 8", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 9, SpendMicros: 90, Epoch: 42, Gen: 7}), 1)
	wantItem(t, s, want)
	// The fence is per item: another writer's lower generation is refused too.
	wantRefused(t, "late gen 7 over job_gen 8", put(t, s, sink.Put{Key: minute1, Writer: sink.Late, Valid: 1, Epoch: 42, Gen: 7}), 1)
	wantItem(t, s, want)

	// Equal generation passes.
	wantRefused(t, "gen 8 over job_gen 8", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 6, SpendMicros: 60, Epoch: 42, Gen: 8}), 0)
	want.Fast = tagged(minute1, 6, 60, 42, 8)
	wantItem(t, s, want)

	// Higher generation passes and raises job_gen.
	wantRefused(t, "gen 9 over job_gen 8", put(t, s, sink.Put{Key: minute1, Writer: sink.Late, Valid: 2, SpendMicros: 20, Epoch: 43, Gen: 9}), 0)
	want.Late = tagged(minute1, 2, 20, 43, 9)
	want.JobGen = 9
	wantItem(t, s, want)

	// Now the fast writer of generation 8 is fenced off as well.
	wantRefused(t, "fast gen 8 over job_gen 9", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 7, Epoch: 44, Gen: 8}), 1)
	wantItem(t, s, want)

	// Absent job_gen (an item written only by the recount) passes any generation.
	putFinal(t, s, sink.FinalPut{Key: hour2, Valid: 4, SpendMicros: 40, Gen: 50, AtMs: 1000})
	// The recount has its own generation (final_gen) and leaves job_gen alone.
	wantItem(t, s, sink.Item{Key: hour2, Final: sink.FinalAttrs{Present: true, Valid: 4, SpendMicros: 40, Gen: 50, AtMs: 1000}})
	wantRefused(t, "gen 1 on item without job_gen", put(t, s, sink.Put{Key: hour2, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 5, Gen: 1}), 0)
	wantItem(t, s, sink.Item{Key: hour2, JobGen: 1, HasJobGen: true, Fast: tagged(hour2, 3, 30, 5, 1),
		Final: sink.FinalAttrs{Present: true, Valid: 4, SpendMicros: 40, Gen: 50, AtMs: 1000}})

	// Several puts in one call are counted one by one.
	refused := put(t, s,
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 45, Gen: 3},  // refused: job_gen 9
		sink.Put{Key: minute2, Writer: sink.Fast, Valid: 1, Epoch: 45, Gen: 3},  // applied: new item
		sink.Put{Key: hour2, Writer: sink.Late, Valid: 1, Epoch: 45, Gen: 0},    // refused: job_gen 1
		sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, Epoch: 45, Gen: -1},   // applied: new item
		sink.Put{Key: minute1, Writer: sink.Late, Valid: 1, Epoch: 45, Gen: 10}, // applied
	)
	wantRefused(t, "mixed batch", refused, 2)
	wantItem(t, s, sink.Item{Key: hour1, JobGen: -1, HasJobGen: true, Late: tagged(hour1, 1, 0, 45, -1)})
	want.Late = tagged(minute1, 1, 0, 45, 10)
	want.JobGen = 10
	wantItem(t, s, want)
}

func testClosedRow(t *testing.T, s sink.Rows) {
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 4, SpendMicros: 40, Epoch: 40, Gen: 7})
	want := sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 4, 40, 40, 7)}

	// fast_ckpt 40 < restored 41: the row was finished before the checkpoint.
	wantRefused(t, "closed row, ckpt 40 < 41", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 43, Gen: 7, ClosedRow: true, RestoredCkpt: 41}), 1)
	wantItem(t, s, want)

	// Without ClosedRow the same write passes: RestoredCkpt is ignored.
	wantRefused(t, "open row", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 43, Gen: 7, ClosedRow: false, RestoredCkpt: 99}), 0)
	want.Fast = tagged(minute1, 3, 30, 43, 7)
	wantItem(t, s, want)

	// fast_ckpt 43 == restored 43: applied.
	wantRefused(t, "closed row, ckpt 43 >= 43", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 44, Gen: 7, ClosedRow: true, RestoredCkpt: 43}), 0)
	want.Fast = tagged(minute1, 5, 50, 44, 7)
	wantItem(t, s, want)

	// fast_ckpt 44 > restored 41: applied.
	wantRefused(t, "closed row, ckpt 44 >= 41", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 6, SpendMicros: 60, Epoch: 45, Gen: 7, ClosedRow: true, RestoredCkpt: 41}), 0)
	want.Fast = tagged(minute1, 6, 60, 45, 7)
	wantItem(t, s, want)

	// Both conditions must hold: the closed-row condition passes but job_gen refuses.
	wantRefused(t, "closed row, lower gen", put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 46, Gen: 6, ClosedRow: true, RestoredCkpt: 41}), 1)
	wantItem(t, s, want)

	// Absent item: applied.
	wantRefused(t, "closed row, no item", put(t, s, sink.Put{Key: minute2, Writer: sink.Fast, Valid: 2, SpendMicros: 20, Epoch: 50, Gen: 7, ClosedRow: true, RestoredCkpt: 60}), 0)
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 7, HasJobGen: true, Fast: tagged(minute2, 2, 20, 50, 7)})

	// The condition reads the writer's own ckpt only: late_ckpt 50 does not
	// protect fast_*, and fast_ckpt 45 does not block late_*.
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 50, Gen: 7})
	wantRefused(t, "closed fast row, only late_ckpt present", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 9, SpendMicros: 90, Epoch: 45, Gen: 7, ClosedRow: true, RestoredCkpt: 46}), 0)
	wantRefused(t, "closed fast row, fast_ckpt 45 < 46", put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 8, SpendMicros: 80, Epoch: 47, Gen: 7, ClosedRow: true, RestoredCkpt: 46}), 1)
	wantRefused(t, "closed late row, late_ckpt 50 >= 46", put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 2, SpendMicros: 20, Epoch: 51, Gen: 7, ClosedRow: true, RestoredCkpt: 46}), 0)
	wantItem(t, s, sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Fast: tagged(hour1, 9, 90, 45, 7), Late: tagged(hour1, 2, 20, 51, 7)})
}

func testPutFinal(t *testing.T, s sink.Rows) {
	put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 9})
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 9})
	want := sink.Item{Key: hour1, JobGen: 9, HasJobGen: true, Fast: tagged(hour1, 5, 50, 41, 9), Late: tagged(hour1, 1, 10, 42, 9)}

	// No final_gen yet: applied whatever job_gen says; fast_*, late_* and
	// job_gen stay as they are.
	wantRefused(t, "first final", putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 6, SpendMicros: 60, Gen: 5, AtMs: 1_000}), 0)
	want.Final = sink.FinalAttrs{Present: true, Valid: 6, SpendMicros: 60, Gen: 5, AtMs: 1_000}
	wantItem(t, s, want)

	// final_gen 5 > 4: refused.
	wantRefused(t, "older recount", putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 7, SpendMicros: 70, Gen: 4, AtMs: 2_000}), 1)
	wantItem(t, s, want)

	// Equal: applied.
	wantRefused(t, "same recount generation", putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 8, SpendMicros: 80, Gen: 5, AtMs: 3_000}), 0)
	want.Final = sink.FinalAttrs{Present: true, Valid: 8, SpendMicros: 80, Gen: 5, AtMs: 3_000}
	wantItem(t, s, want)

	// Newer: applied.
	wantRefused(t, "newer recount", putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 2, SpendMicros: 20, Gen: 6, AtMs: 4_000}), 0)
	want.Final = sink.FinalAttrs{Present: true, Valid: 2, SpendMicros: 20, Gen: 6, AtMs: 4_000}
	wantItem(t, s, want)

	// A batch: one refused, one new item.
	refused := putFinal(t, s,
		sink.FinalPut{Key: hour1, Valid: 1, Gen: 1, AtMs: 5_000},
		sink.FinalPut{Key: hour2, Valid: 3, SpendMicros: 30, Gen: 1, AtMs: 5_000},
	)
	wantRefused(t, "final batch", refused, 1)
	wantItem(t, s, want)
	got, ok := get(t, s, hour2)
	if !ok {
		t.Fatalf("Get(%v): missing after PutFinal", hour2)
	}
	wantFinal := sink.FinalAttrs{Present: true, Valid: 3, SpendMicros: 30, Gen: 1, AtMs: 5_000}
	if got.Final != wantFinal || got.Fast.Present || got.Late.Present {
		t.Fatalf("Get(%v) = %+v, want only final_* = %+v", hour2, got, wantFinal)
	}

	// The recount never shows in a tag index.
	for shard := 0; shard < sink.IndexShards; shard++ {
		for _, w := range sink.TaggedWriters {
			if keys := queryKeys(t, s, w, sink.IndexKeyOf(0, shard)); len(keys) != 0 {
				t.Fatalf("QueryIndex(%v, %q) = %v, want none", w, sink.IndexKeyOf(0, shard), keys)
			}
		}
	}
}

// keysInShard returns n distinct minute keys whose IndexShard is shard,
// with entities of at least pad bytes.
func keysInShard(prefix string, shard, n, pad int) []sink.Key {
	keys := make([]sink.Key, 0, n)
	padding := strings.Repeat("x", pad)
	for i := 0; len(keys) < n; i++ {
		k := sink.Key{Entity: fmt.Sprintf("%s%s_%d", prefix, padding, i), Bucket: "M2026-11-29T10:14Z"}
		if sink.IndexShard(k) == shard {
			keys = append(keys, k)
		}
	}
	return keys
}

func testQueryIndex(t *testing.T, s sink.Rows) {
	// Two keys per shard for shards 2 and 5, written by fast at epochs 41
	// and 42 and by late at 41.
	a := keysInShard("a", 2, 3, 0)
	b := keysInShard("b", 5, 2, 0)
	var puts []sink.Put
	for _, k := range a[:2] {
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 1})
	}
	puts = append(puts, sink.Put{Key: a[2], Writer: sink.Fast, Valid: 1, Epoch: 42, Gen: 1})
	puts = append(puts, sink.Put{Key: b[0], Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 1})
	puts = append(puts, sink.Put{Key: b[1], Writer: sink.Late, Valid: 1, Epoch: 41, Gen: 1})
	puts = append(puts, sink.Put{Key: a[0], Writer: sink.Late, Valid: 1, Epoch: 43, Gen: 1})
	wantRefused(t, "setup", put(t, s, puts...), 0)

	cases := []struct {
		w    sink.Writer
		ix   string
		want []sink.Key
	}{
		{sink.Fast, "41#2", a[:2]},
		{sink.Fast, "42#2", a[2:3]},
		{sink.Fast, "41#5", b[:1]},
		{sink.Late, "41#5", b[1:2]},
		{sink.Late, "43#2", a[:1]},
		// A late write does not show in the fast index, nor the reverse.
		{sink.Fast, "43#2", nil},
		{sink.Late, "41#2", nil},
		{sink.Late, "42#2", nil},
		{sink.Fast, "41#0", nil},
		{sink.Fast, "4#1", nil},
		{sink.Fast, "41", nil},
	}
	for _, c := range cases {
		wantKeys(t, fmt.Sprintf("QueryIndex(%v, %q)", c.w, c.ix), queryKeys(t, s, c.w, c.ix), c.want)
	}

	// The callback sees whole items.
	err := s.QueryIndex(context.Background(), sink.Late, "43#2", func(it sink.Item) error {
		want := sink.Item{Key: a[0], JobGen: 1, HasJobGen: true, Fast: tagged(a[0], 1, 0, 41, 1), Late: tagged(a[0], 1, 0, 43, 1)}
		if it != want {
			return fmt.Errorf("got %+v, want %+v", it, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex(late, 43#2): %v", err)
	}
}

func testQueryIndexRetag(t *testing.T, s sink.Rows) {
	k := keysInShard("r", 4, 1, 0)[0]
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 1})
	wantKeys(t, "before retag, 41#4", queryKeys(t, s, sink.Fast, "41#4"), []sink.Key{k})
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 2, Epoch: 42, Gen: 1})
	wantKeys(t, "after retag, 41#4", queryKeys(t, s, sink.Fast, "41#4"), nil)
	wantKeys(t, "after retag, 42#4", queryKeys(t, s, sink.Fast, "42#4"), []sink.Key{k})
	// A refused write does not move the tag.
	wantRefused(t, "refused retag", put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 3, Epoch: 43, Gen: 0}), 1)
	wantKeys(t, "after refused retag, 43#4", queryKeys(t, s, sink.Fast, "43#4"), nil)
	wantKeys(t, "after refused retag, 42#4", queryKeys(t, s, sink.Fast, "42#4"), []sink.Key{k})
	// Retagging to an older epoch moves it back.
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 2, Epoch: 40, Gen: 1})
	wantKeys(t, "after retag to 40, 42#4", queryKeys(t, s, sink.Fast, "42#4"), nil)
	wantKeys(t, "after retag to 40, 40#4", queryKeys(t, s, sink.Fast, "40#4"), []sink.Key{k})
}

func testQueryIndexCallbackError(t *testing.T, s sink.Rows) {
	keys := keysInShard("e", 1, 5, 0)
	var puts []sink.Put
	for _, k := range keys {
		puts = append(puts, sink.Put{Key: k, Writer: sink.Late, Valid: 1, Epoch: 7, Gen: 1})
	}
	put(t, s, puts...)
	stop := errors.New("stop here")
	calls := 0
	err := s.QueryIndex(context.Background(), sink.Late, "7#1", func(sink.Item) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("QueryIndex with a failing callback: err = %v, want %v", err, stop)
	}
	if calls != 2 {
		t.Fatalf("QueryIndex kept calling after the callback failed: %d calls, want 2", calls)
	}
}

func testRemove(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7})
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 7})
	putFinal(t, s, sink.FinalPut{Key: hour1, Valid: 6, SpendMicros: 60, Gen: 2, AtMs: 77})
	want := sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Fast: tagged(hour1, 5, 50, 41, 7), Late: tagged(hour1, 1, 10, 42, 7),
		Final: sink.FinalAttrs{Present: true, Valid: 6, SpendMicros: 60, Gen: 2, AtMs: 77}}
	lateIx := sink.IndexKey(42, hour1)

	// Wrong ckpt: nothing happens.
	for _, ckpt := range []int64{41, 43, 0} {
		ok, err := s.Remove(ctx, hour1, sink.Late, ckpt)
		if err != nil || ok {
			t.Fatalf("Remove(late, ckpt %d) with late_ckpt 42 = %v, %v; want false, nil", ckpt, ok, err)
		}
	}
	wantItem(t, s, want)

	// Matching ckpt: only late_* goes, the item and job_gen stay.
	ok, err := s.Remove(ctx, hour1, sink.Late, 42)
	if err != nil || !ok {
		t.Fatalf("Remove(late, 42) = %v, %v; want true, nil", ok, err)
	}
	want.Late = sink.Tagged{}
	wantItem(t, s, want)
	wantKeys(t, "late index after Remove", queryKeys(t, s, sink.Late, lateIx), nil)
	wantKeys(t, "fast index after late Remove", queryKeys(t, s, sink.Fast, sink.IndexKey(41, hour1)), []sink.Key{hour1})

	// Again: the attributes are gone, so the condition fails.
	ok, err = s.Remove(ctx, hour1, sink.Late, 42)
	if err != nil || ok {
		t.Fatalf("second Remove(late, 42) = %v, %v; want false, nil", ok, err)
	}

	// Remove of fast_* leaves final_*.
	ok, err = s.Remove(ctx, hour1, sink.Fast, 41)
	if err != nil || !ok {
		t.Fatalf("Remove(fast, 41) = %v, %v; want true, nil", ok, err)
	}
	want.Fast = sink.Tagged{}
	wantItem(t, s, want)

	// Missing item.
	ok, err = s.Remove(ctx, minute2, sink.Fast, 41)
	if err != nil || ok {
		t.Fatalf("Remove on a missing item = %v, %v; want false, nil", ok, err)
	}
	wantMissing(t, s, minute2)
}

func testDelete(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	del := func(k sink.Key, w sink.Writer, ckpt int64, wantDeleted, wantOK bool) {
		t.Helper()
		deleted, ok, err := s.Delete(ctx, k, w, ckpt)
		if err != nil {
			t.Fatalf("Delete(%v, %v, %d): %v", k, w, ckpt, err)
		}
		if deleted != wantDeleted || ok != wantOK {
			t.Fatalf("Delete(%v, %v, %d) = deleted %v, ok %v; want %v, %v", k, w, ckpt, deleted, ok, wantDeleted, wantOK)
		}
	}

	// An item carrying only fast_*: wrong ckpt keeps it, right ckpt deletes it.
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7})
	onlyFast := sink.Item{Key: minute1, JobGen: 7, HasJobGen: true, Fast: tagged(minute1, 5, 50, 41, 7)}
	del(minute1, sink.Fast, 40, false, false)
	del(minute1, sink.Late, 41, false, false) // late_ckpt is absent
	wantItem(t, s, onlyFast)
	del(minute1, sink.Fast, 41, true, true)
	wantMissing(t, s, minute1)
	wantKeys(t, "fast index after Delete", queryKeys(t, s, sink.Fast, sink.IndexKey(41, minute1)), nil)
	del(minute1, sink.Fast, 41, false, false) // already gone

	// An item carrying late_* too: only fast_* goes.
	put(t, s, sink.Put{Key: hour1, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 7})
	put(t, s, sink.Put{Key: hour1, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 42, Gen: 7})
	del(hour1, sink.Fast, 41, false, true)
	wantItem(t, s, sink.Item{Key: hour1, JobGen: 7, HasJobGen: true, Late: tagged(hour1, 1, 10, 42, 7)})
	// Now late_* is the only writer left: deleting it takes the item.
	del(hour1, sink.Late, 42, true, true)
	wantMissing(t, s, hour1)

	// An item carrying final_*: only late_* goes, the recount stays.
	put(t, s, sink.Put{Key: hour2, Writer: sink.Late, Valid: 2, SpendMicros: 20, Epoch: 43, Gen: 7})
	putFinal(t, s, sink.FinalPut{Key: hour2, Valid: 9, SpendMicros: 90, Gen: 1, AtMs: 5})
	del(hour2, sink.Late, 44, false, false)
	del(hour2, sink.Late, 43, false, true)
	wantItem(t, s, sink.Item{Key: hour2, JobGen: 7, HasJobGen: true, Final: sink.FinalAttrs{Present: true, Valid: 9, SpendMicros: 90, Gen: 1, AtMs: 5}})
	wantKeys(t, "late index after partial Delete", queryKeys(t, s, sink.Late, sink.IndexKey(43, hour2)), nil)

	// Missing item.
	del(minute2, sink.Late, 1, false, false)
}

func testScan(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	calls := 0
	if err := s.Scan(ctx, func(sink.Item) error { calls++; return nil }); err != nil {
		t.Fatalf("Scan of an empty store: %v", err)
	}
	if calls != 0 {
		t.Fatalf("Scan of an empty store called fn %d times, want 0", calls)
	}

	put(t, s,
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, SpendMicros: 10, Epoch: 1, Gen: 1},
		sink.Put{Key: minute2, Writer: sink.Fast, Valid: 2, SpendMicros: 20, Epoch: 2, Gen: 1},
		sink.Put{Key: hour1, Writer: sink.Late, Valid: 3, SpendMicros: 30, Epoch: 3, Gen: 1},
	)
	putFinal(t, s, sink.FinalPut{Key: hour2, Valid: 4, SpendMicros: 40, Gen: 1, AtMs: 4})
	want := map[sink.Key]sink.Item{
		minute1: {Key: minute1, JobGen: 1, HasJobGen: true, Fast: tagged(minute1, 1, 10, 1, 1)},
		minute2: {Key: minute2, JobGen: 1, HasJobGen: true, Fast: tagged(minute2, 2, 20, 2, 1)},
		hour1:   {Key: hour1, JobGen: 1, HasJobGen: true, Late: tagged(hour1, 3, 30, 3, 1)},
	}
	got := map[sink.Key]sink.Item{}
	err := s.Scan(ctx, func(it sink.Item) error {
		if _, dup := got[it.Key]; dup {
			return fmt.Errorf("Scan returned %v twice", it.Key)
		}
		got[it.Key] = it
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(got) != 4 {
		t.Fatalf("Scan returned %d items, want 4", len(got))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("Scan item %v:\n got  %+v\n want %+v", k, got[k], w)
		}
	}
	wantFinal := sink.FinalAttrs{Present: true, Valid: 4, SpendMicros: 40, Gen: 1, AtMs: 4}
	if it := got[hour2]; it.Final != wantFinal || it.Fast.Present || it.Late.Present {
		t.Fatalf("Scan item %v = %+v, want only final_* = %+v", hour2, it, wantFinal)
	}

	stop := errors.New("stop scan")
	calls = 0
	err = s.Scan(ctx, func(sink.Item) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("Scan with a failing callback = %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func testCoalescedPuts(t *testing.T, s sink.Rows) {
	// Callers pass puts in order; for one (key, writer) the last one wins.
	refused := put(t, s,
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, SpendMicros: 10, Epoch: 41, Gen: 3},
		sink.Put{Key: minute1, Writer: sink.Late, Valid: 7, SpendMicros: 70, Epoch: 41, Gen: 3},
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 2, SpendMicros: 20, Epoch: 42, Gen: 3},
		sink.Put{Key: minute2, Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 42, Gen: 3},
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 43, Gen: 3},
	)
	wantRefused(t, "coalesced batch", refused, 0)
	wantItem(t, s, sink.Item{Key: minute1, JobGen: 3, HasJobGen: true, Fast: tagged(minute1, 3, 30, 43, 3), Late: tagged(minute1, 7, 70, 41, 3)})
	wantItem(t, s, sink.Item{Key: minute2, JobGen: 3, HasJobGen: true, Fast: tagged(minute2, 5, 50, 42, 3)})
	wantKeys(t, "superseded tag 41", queryKeys(t, s, sink.Fast, sink.IndexKey(41, minute1)), nil)
	wantKeys(t, "superseded tag 42", queryKeys(t, s, sink.Fast, sink.IndexKey(42, minute1)), keysWithIx(sink.IndexKey(42, minute1), 42, minute2))

	refused = putFinal(t, s,
		sink.FinalPut{Key: hour1, Valid: 1, Gen: 2, AtMs: 1},
		sink.FinalPut{Key: hour1, Valid: 2, Gen: 2, AtMs: 2},
	)
	wantRefused(t, "coalesced final batch", refused, 0)
	wantItem(t, s, sink.Item{Key: hour1, Final: sink.FinalAttrs{Present: true, Valid: 2, Gen: 2, AtMs: 2}})
}

// keysWithIx returns the keys among ks whose index key at epoch is ix.
func keysWithIx(ix string, epoch int64, ks ...sink.Key) []sink.Key {
	var out []sink.Key
	for _, k := range ks {
		if sink.IndexKey(epoch, k) == ix {
			out = append(out, k)
		}
	}
	return out
}

// testLargeBatch puts 480 rows in one call: 15 times the DynamoDB store's
// default 32 requests in flight, over 48 index keys (2 writers × 3 epochs ×
// 8 shards).
func testLargeBatch(t *testing.T, s sink.Rows) {
	const n = 480
	puts := make([]sink.Put, n)
	perIx := map[string]int{}
	for i := range puts {
		k := sink.Key{Entity: fmt.Sprintf("ad_%04d", i/4), Bucket: sink.MinuteBucket(1_796_000_000_000 + int64(i%4)*60_000)}
		w := sink.Fast
		if i%5 == 0 {
			w = sink.Late
		}
		epoch := int64(100 + i%3)
		puts[i] = sink.Put{Key: k, Writer: w, Valid: int64(i), SpendMicros: int64(i) * 1000, Epoch: epoch, Gen: 2}
		perIx[fmt.Sprintf("%v/%s", w, sink.IndexKey(epoch, k))]++
	}
	wantRefused(t, "480 puts", put(t, s, puts...), 0)

	got := map[sink.Key]sink.Item{}
	err := s.Scan(context.Background(), func(it sink.Item) error { got[it.Key] = it; return nil })
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(got) != n {
		t.Fatalf("Scan returned %d items, want %d", len(got), n)
	}
	for i, p := range puts {
		it := got[p.Key]
		if a := *it.Attrs(p.Writer); a != tagged(p.Key, int64(i), int64(i)*1000, p.Epoch, 2) {
			t.Fatalf("item %v %v attributes = %+v, want valid %d epoch %d", p.Key, p.Writer, a, i, p.Epoch)
		}
	}

	total := 0
	for _, w := range sink.TaggedWriters {
		for epoch := int64(100); epoch <= 102; epoch++ {
			for shard := 0; shard < sink.IndexShards; shard++ {
				ix := sink.IndexKeyOf(epoch, shard)
				keys := queryKeys(t, s, w, ix)
				if want := perIx[fmt.Sprintf("%v/%s", w, ix)]; len(keys) != want {
					t.Fatalf("QueryIndex(%v, %q) returned %d items, want %d", w, ix, len(keys), want)
				}
				total += len(keys)
			}
		}
	}
	if total != n {
		t.Fatalf("the tag indexes hold %d entries in all, want %d", total, n)
	}
}

func testQueryIndexManyPages(t *testing.T, s sink.Rows) {
	// 1,200 items of about 1 KB each under one index key: more than one
	// DynamoDB query page (1 MB).
	const n = 1200
	keys := keysInShard("big", 6, n, 900)
	puts := make([]sink.Put, n)
	for i, k := range keys {
		puts[i] = sink.Put{Key: k, Writer: sink.Fast, Valid: int64(i), Epoch: 77, Gen: 1}
	}
	wantRefused(t, "setup", put(t, s, puts...), 0)
	wantKeys(t, "QueryIndex(fast, 77#6)", queryKeys(t, s, sink.Fast, "77#6"), keys)

	seen := 0
	if err := s.Scan(context.Background(), func(sink.Item) error { seen++; return nil }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if seen != n {
		t.Fatalf("Scan returned %d items, want %d", seen, n)
	}
}

func testConcurrentPuts(t *testing.T, s sink.Rows) {
	const writers, perWriter = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i += 10 {
				var batch []sink.Put
				for j := i; j < i+10; j++ {
					k := sink.Key{Entity: fmt.Sprintf("ad_%d_%d", g, j), Bucket: "H2026-11-29T10Z"}
					batch = append(batch, sink.Put{Key: k, Writer: sink.Fast, Valid: int64(g*1000 + j), Epoch: 5, Gen: 1})
					// Every writer also touches one shared item's late_*.
					batch = append(batch, sink.Put{Key: hour1, Writer: sink.Late, Valid: int64(g), Epoch: 5, Gen: 1})
				}
				refused, err := s.Put(context.Background(), batch)
				if err == nil && refused != 0 {
					err = fmt.Errorf("refused %d writes, want 0", refused)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Put: %v", err)
	}
	for g := 0; g < writers; g++ {
		for j := 0; j < perWriter; j++ {
			k := sink.Key{Entity: fmt.Sprintf("ad_%d_%d", g, j), Bucket: "H2026-11-29T10Z"}
			wantItem(t, s, sink.Item{Key: k, JobGen: 1, HasJobGen: true, Fast: tagged(k, int64(g*1000+j), 0, 5, 1)})
		}
	}
	it, ok := get(t, s, hour1)
	if !ok || it.Late.Valid < 0 || it.Late.Valid >= writers || it.Late != tagged(hour1, it.Late.Valid, 0, 5, 1) {
		t.Fatalf("shared item %v = %+v (ok %v), want late_valid one of 0..%d", hour1, it, ok, writers-1)
	}
}

func testConcurrentFencing(t *testing.T, s sink.Rows) {
	// Generations 1..8 race on one item: whatever the order, generation 8
	// wins and every lower generation that ran after it was refused.
	const gens = 8
	var wg sync.WaitGroup
	refused := make([]int, gens+1)
	errs := make([]error, gens+1)
	for g := 1; g <= gens; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				n, err := s.Put(context.Background(), []sink.Put{{Key: minute1, Writer: sink.Fast, Valid: int64(g * 10), Epoch: int64(g), Gen: int64(g)}})
				refused[g] += n
				if err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for g, err := range errs {
		if err != nil {
			t.Fatalf("Put of generation %d: %v", g, err)
		}
	}
	if refused[gens] != 0 {
		t.Fatalf("the highest generation was refused %d times, want 0", refused[gens])
	}
	wantItem(t, s, sink.Item{Key: minute1, JobGen: gens, HasJobGen: true, Fast: tagged(minute1, gens*10, 0, gens, gens)})
}

func testCancelledContext(t *testing.T, s sink.Rows) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, []sink.Put{{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: err = %v, want %v", err, context.Canceled)
	}
	if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: hour1, Valid: 1, Gen: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutFinal with a cancelled context: err = %v, want %v", err, context.Canceled)
	}
	wantMissing(t, s, minute1)
	wantMissing(t, s, hour1)
}

// bucketEntities returns the entities QueryBucket(bucket, after, limit)
// passes to fn, in the order it passes them, checking that every item is of
// the bucket.
func bucketEntities(t *testing.T, s sink.Rows, bucket, after string, limit int) []string {
	t.Helper()
	var got []string
	err := s.QueryBucket(context.Background(), bucket, after, limit, func(it sink.Item) error {
		if it.Bucket != bucket {
			return fmt.Errorf("QueryBucket(%q) returned %v", bucket, it.Key)
		}
		got = append(got, it.Entity)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryBucket(%q, after %q, limit %d): %v", bucket, after, limit, err)
	}
	return got
}

func wantEntities(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: got entities %v, want %v", what, got, want)
	}
}

func testQueryBucket(t *testing.T, s sink.Rows) {
	ctx := context.Background()
	wantEntities(t, "empty store", bucketEntities(t, s, hour1.Bucket, "", 0), nil)
	// Hour rows of two hours and minute rows, written by every writer, in
	// an order unrelated to the entities'.
	h10, h11 := "H2026-11-29T10Z", "H2026-11-29T11Z"
	ads := []string{"ad_5", "ad_1", "ad_10", "ad_3", "ad_2", "ad_4"}
	var puts []sink.Put
	for i, ad := range ads {
		puts = append(puts,
			sink.Put{Key: sink.Key{Entity: ad, Bucket: h10}, Writer: sink.Fast, Valid: int64(i), Epoch: 5, Gen: 1},
			sink.Put{Key: sink.Key{Entity: ad, Bucket: h11}, Writer: sink.Late, Valid: int64(i), Epoch: 5, Gen: 1},
			sink.Put{Key: sink.Key{Entity: ad, Bucket: "M2026-11-29T10:14Z"}, Writer: sink.Fast, Valid: 1, Epoch: 5, Gen: 1},
		)
	}
	put(t, s, puts...)
	// An hour row with final_* only (the recount found clicks the stream
	// did not count).
	putFinal(t, s, sink.FinalPut{Key: sink.Key{Entity: "ad_0", Bucket: h10}, Valid: 9, Gen: 1, AtMs: 1})

	all := []string{"ad_0", "ad_1", "ad_10", "ad_2", "ad_3", "ad_4", "ad_5"}
	wantEntities(t, "hour 10", bucketEntities(t, s, h10, "", 0), all)
	wantEntities(t, "hour 11", bucketEntities(t, s, h11, "", 0), all[1:])
	wantEntities(t, "minute", bucketEntities(t, s, "M2026-11-29T10:14Z", "", -1), all[1:])
	wantEntities(t, "another hour", bucketEntities(t, s, "H2026-11-29T12Z", "", 0), nil)
	wantEntities(t, "after ad_10", bucketEntities(t, s, h10, "ad_10", 0), all[3:])
	wantEntities(t, "after an absent entity", bucketEntities(t, s, h10, "ad_11", 0), all[3:])
	wantEntities(t, "after the last", bucketEntities(t, s, h10, "ad_5", 0), nil)
	wantEntities(t, "limit 3", bucketEntities(t, s, h10, "", 3), all[:3])
	wantEntities(t, "limit 2 after ad_2", bucketEntities(t, s, h10, "ad_2", 2), []string{"ad_3", "ad_4"})

	// Pages of 2, each after the last entity of the one before, give the
	// whole bucket once.
	var paged []string
	for after := ""; ; {
		page := bucketEntities(t, s, h10, after, 2)
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	wantEntities(t, "paged", paged, all)

	// The items are whole: every writer's attributes.
	var got sink.Item
	if err := s.QueryBucket(ctx, h10, "ad_3", 1, func(it sink.Item) error { got = it; return nil }); err != nil {
		t.Fatalf("QueryBucket: %v", err)
	}
	want := sink.Item{Key: sink.Key{Entity: "ad_4", Bucket: h10}, JobGen: 1, HasJobGen: true,
		Fast: tagged(sink.Key{Entity: "ad_4", Bucket: h10}, 5, 0, 5, 1)}
	if got != want {
		t.Fatalf("QueryBucket item:\n got  %+v\n want %+v", got, want)
	}
	var fin sink.Item
	if err := s.QueryBucket(ctx, h10, "", 1, func(it sink.Item) error { fin = it; return nil }); err != nil {
		t.Fatalf("QueryBucket: %v", err)
	}
	if wantF := (sink.FinalAttrs{Present: true, Valid: 9, Gen: 1, AtMs: 1}); fin.Final != wantF || fin.Fast.Present {
		t.Fatalf("QueryBucket item %v = %+v, want only final_* %+v", fin.Key, fin, wantF)
	}

	stop := errors.New("stop query")
	calls := 0
	err := s.QueryBucket(ctx, h10, "", 0, func(sink.Item) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("QueryBucket with a failing callback = %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func testQueryBucketAfterDelete(t *testing.T, s sink.Rows) {
	put(t, s,
		sink.Put{Key: minute1, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1},
		sink.Put{Key: minute2, Writer: sink.Fast, Valid: 2, Epoch: 3, Gen: 1},
		sink.Put{Key: hour1, Writer: sink.Fast, Valid: 3, Epoch: 3, Gen: 1},
	)
	ctx := context.Background()
	if deleted, ok, err := s.Delete(ctx, minute1, sink.Fast, 3); err != nil || !deleted || !ok {
		t.Fatalf("Delete(%v) = %v, %v, %v; want deleted", minute1, deleted, ok, err)
	}
	if ok, err := s.Remove(ctx, hour1, sink.Fast, 3); err != nil || !ok {
		t.Fatalf("Remove(%v) = %v, %v; want ok", hour1, ok, err)
	}
	wantEntities(t, "minute after Delete", bucketEntities(t, s, minute1.Bucket, "", 0), []string{minute2.Entity})
	// Remove keeps the item (with job_gen), so the bucket still lists it.
	wantEntities(t, "hour after Remove", bucketEntities(t, s, hour1.Bucket, "", 0), []string{hour1.Entity})
	put(t, s, sink.Put{Key: minute1, Writer: sink.Fast, Valid: 4, Epoch: 4, Gen: 1})
	wantEntities(t, "minute written again", bucketEntities(t, s, minute1.Bucket, "", 0), []string{minute1.Entity, minute2.Entity})
}

func testQueryBucketManyPages(t *testing.T, s sink.Rows) {
	// 1,200 items of about 1 KB each in one bucket: more than one DynamoDB
	// query page (1 MB), and a limit that ends inside the second page.
	const n = 1200
	padding := strings.Repeat("x", 900)
	puts := make([]sink.Put, n)
	want := make([]string, n)
	for i := range puts {
		want[i] = fmt.Sprintf("ad_%04d_%s", i, padding)
		puts[i] = sink.Put{Key: sink.Key{Entity: want[i], Bucket: "H2026-11-29T10Z"}, Writer: sink.Fast, Valid: int64(i), Epoch: 7, Gen: 1}
	}
	// Written from the end, so that write order is not entity order.
	for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
		puts[i], puts[j] = puts[j], puts[i]
	}
	wantRefused(t, "setup", put(t, s, puts...), 0)
	got := bucketEntities(t, s, "H2026-11-29T10Z", "", 0)
	if len(got) != n {
		t.Fatalf("QueryBucket returned %d items, want %d", len(got), n)
	}
	wantEntities(t, "all", got, want)
	wantEntities(t, "limit 1,100", bucketEntities(t, s, "H2026-11-29T10Z", "", 1100), want[:1100])
	wantEntities(t, "after 1,150th, limit 20", bucketEntities(t, s, "H2026-11-29T10Z", want[1149], 20), want[1150:1170])
}
