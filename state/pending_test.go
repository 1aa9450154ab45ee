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
		ad, id string
	}
	ins := []in{
		{2, 5, "a", "b"}, {1, 5, "a", "zz"}, {1, -3, "a", "a"}, {1, 5, "a", "abcdefgh2"},
		{1, 5, "a", "abcdefgh1"}, {1, 5, "a", "abcdefgh"}, {1, 5, "a", "abcdefg\x00"}, {0, 9, "a", "q"},
		{1, 5, "a", "ab"}, {1, 5, "a", "ab\x00"}, {1, 600, "a", "a"}, {1, 4000, "a", "a"}, {1, 3000, "a", "b"},
		{127, 1 << 40, "a", "x"}, {127, -(1 << 40), "a", "y"}, {1, 1 << 62, "a", "z"}, {1, -(1 << 62), "a", "z"},
		// Other ads: the key group orders first, then the bucket, the ad's
		// length and bytes, the id.
		{1, 5, "b", "a"}, {1, 5, "ab", "a"}, {1, 5, "a\x00", "a"}, {1, 5, "abcdefghij", "a"},
		{1, 5, "abcdefghi", "ja"}, {1, 5, "a", "a"}, {0, 9, "a", "a"}, {127, -3, "b", "c"},
		{1, 5, string(make([]byte, 200)), "a"}, {1, 5, string(make([]byte, 130)), "b"},
	}
	for i, x := range ins {
		p.add(x.kg, x.bucket, x.ad, x.id, uint64(i), i%3 == 0) // some deletes among the sets
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
		d.Prefetch(kg, testAd, "x", 1) // nothing loaded yet: a no-op, no panic
	}
	mustInsert(t, d, 5, "a", 1000, true)
	for _, id := range []string{"a", "b", "c"} {
		d.Prefetch(5, testAd, id, 1000)
		d.Prefetch(5, testAd, id, 9_000_000) // a bucket with no filter
		d.Prefetch(5, "other", id, 1000)
	}
	mustInsert(t, d, 5, "a", 1000, false)
	mustInsert(t, d, 5, "b", 1000, true)
	mustInsert(t, d, 5, "c", 9_000_000, true)
	mustInsert(t, d, 5, "c", 9_000_000, false)
}

// TestPendingFindByID: an entry is found by (key group, ad, id) whatever
// its bucket, also after setBucket moved it; delete entries are never
// found. The hashes are equal where the test wants the keys alone to tell
// entries apart.
func TestPendingFindByID(t *testing.T) {
	var p pendingSet
	p.add(3, 10, "ad", "x", pendingHash(1, 3), false)
	p.add(3, 7, "ad", "y", pendingHash(2, 3), true) // a delete: not findable
	p.add(4, 10, "ad", "x", pendingHash(1, 4), false)
	p.add(3, 10, "a", "dx", pendingHash(1, 3), false) // the same bytes once the ad is cut off
	p.add(3, 10, "a\x00b", "c", pendingHash(1, 3), false)
	p.setBucket(0, 12)
	for _, tc := range []struct {
		kg     int
		ad, id string
		h      uint64
		want   int
	}{
		{3, "ad", "x", 1, 0},
		{4, "ad", "x", 1, 2},
		{3, "ad", "y", 2, -1},
		{5, "ad", "x", 1, -1},
		{3, "ad", "xx", 1, -1},
		{3, "a", "dx", 1, 3},
		{3, "adx", "", 1, -1},
		{3, "a", "x", 1, -1},
		{3, "a\x00b", "c", 1, 4},
		{3, "a", "\x00bc", 1, -1},
		{3, "a\x00", "bc", 1, -1},
	} {
		if got := p.find(tc.kg, tc.ad, tc.id, pendingHash(tc.h, tc.kg)); got != tc.want {
			t.Errorf("find(%d, %q, %q) = %d, want %d", tc.kg, tc.ad, tc.id, got, tc.want)
		}
	}
	want := []byte{'g', 3, 0x80, 0, 0, 0, 0, 0, 0, 12, 2, 'a', 'd', 'x'} // the layout, spelt out
	if got := p.key(&p.ents[0]); !bytes.Equal(got, want) || p.ents[0].bucket != 12 {
		t.Errorf("after setBucket(0, 12): key %x bucket %d, want %x, 12", got, p.ents[0].bucket, want)
	}
}
