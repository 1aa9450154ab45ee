package state

import (
	"bytes"
	"fmt"
	"testing"
)

// TestDedupPendingManyAndDiscard keeps thousands of ids pending (ids sharing
// their first eight bytes, so ordering falls back to whole keys; enough to
// grow the pending table several times), checks that each is found while
// pending and after Commit through a new handle, and that Discard forgets
// ids that were never committed.
func TestDedupPendingManyAndDiscard(t *testing.T) {
	db, _ := openTemp(t, Options{DedupBatchBytes: 1 << 30})
	d := db.NewDedup()
	const n = 5000
	exp := func(i int) int64 { return int64(i%7) * BucketMs }
	id := func(i int) string { return fmt.Sprintf("click-id-%d", i) }
	for i := range n {
		mustInsert(t, d, i%3, id(i), exp(i), true)
	}
	for i := range n {
		mustInsert(t, d, i%3, id(i), exp(i), false)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d2 := db.NewDedup()
	for i := range n {
		mustInsert(t, d2, i%3, id(i), exp(i), false)
	}
	if ins, dup := d.Count(); ins != n || dup != n {
		t.Fatalf("Count() = %d, %d, want %d, %d", ins, dup, n, n)
	}

	mustInsert(t, d, 1, "discarded", 0, true)
	mustInsert(t, d, 1, "discarded", 0, false)
	d.Discard()
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	// The filter still holds the id; the pending set and the DB must not.
	mustInsert(t, d, 1, "discarded", 0, true)
	mustInsert(t, d, 1, "discarded", 0, false)
}

func TestPendingSortOrdersLikeKeys(t *testing.T) {
	var p pendingSet
	type in struct {
		kg     int
		bucket int64
		id     string
	}
	ins := []in{
		{2, 5, "b"}, {1, 5, "zz"}, {1, -3, "a"}, {1, 5, "abcdefgh2"},
		{1, 5, "abcdefgh1"}, {1, 5, "abcdefgh"}, {1, 5, "abcdefg\x00"}, {0, 9, "q"},
		{1, 5, "ab"}, {1, 5, "ab\x00"}, {1, 600, "a"}, {1, 4000, "a"}, {1, 3000, "b"}, {127, 1 << 40, "x"},
		{127, -(1 << 40), "y"}, {1, 1 << 62, "z"}, {1, -(1 << 62), "z"},
	}
	for i, x := range ins {
		p.add(x.kg, x.bucket, x.id, uint64(i), i%3 == 0) // some deletes among the sets
	}
	order := p.sorted()
	for i := 1; i < len(order); i++ {
		a, b := p.key(&p.ents[order[i-1].i]), p.key(&p.ents[order[i].i])
		if string(a) >= string(b) {
			t.Errorf("entry %d %x is not before entry %d %x", i-1, a, i, b)
		}
	}
	if len(order) != len(ins) {
		t.Fatalf("len = %d, want %d", len(order), len(ins))
	}
}

// TestPrefetchChangesNothing: Prefetch of ids (new, present, out of range,
// for key groups and buckets never seen) leaves every Insert answer as it
// would be without it.
func TestPrefetchChangesNothing(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	for _, kg := range []int{-1, 0, 5, KeyGroups} {
		d.Prefetch(kg, "x", 1) // nothing loaded yet: a no-op, no panic
	}
	mustInsert(t, d, 5, "a", 1000, true)
	for _, id := range []string{"a", "b", "c"} {
		d.Prefetch(5, id, 1000)
		d.Prefetch(5, id, 9_000_000) // a bucket with no filter
	}
	mustInsert(t, d, 5, "a", 1000, false)
	mustInsert(t, d, 5, "b", 1000, true)
	mustInsert(t, d, 5, "c", 9_000_000, true)
	mustInsert(t, d, 5, "c", 9_000_000, false)
}

// TestPendingFindByID: an id is found by (key group, id) whatever its
// bucket, also after setBucket moved it; delete entries are never found.
func TestPendingFindByID(t *testing.T) {
	var p pendingSet
	p.add(3, 10, "x", pendingHash(1, 3), false)
	p.add(3, 7, "y", pendingHash(2, 3), true) // a delete: not findable
	p.add(4, 10, "x", pendingHash(1, 4), false)
	p.setBucket(0, 12)
	for _, tc := range []struct {
		kg   int
		id   string
		h    uint64
		want int
	}{
		{3, "x", 1, 0},
		{4, "x", 1, 2},
		{3, "y", 2, -1},
		{5, "x", 1, -1},
		{3, "xx", 1, -1},
	} {
		if got := p.find(tc.kg, tc.id, pendingHash(tc.h, tc.kg)); got != tc.want {
			t.Errorf("find(%d, %q) = %d, want %d", tc.kg, tc.id, got, tc.want)
		}
	}
	if got, want := p.key(&p.ents[0]), append(appendDedupKey(nil, 3, 12), 'x'); !bytes.Equal(got, want) || p.ents[0].bucket != 12 {
		t.Errorf("after setBucket(0, 12): key %x bucket %d, want %x, 12", got, p.ents[0].bucket, want)
	}
}
