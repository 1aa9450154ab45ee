//go:build integration

package dynamo

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// TestFenceMarksConformanceDynalite runs the fence marks suite (raising,
// refusing a lower fence over an overlapping range, passing it over a
// disjoint one, generations apart, concurrent raises) on the stand-in.
func TestFenceMarksConformanceDynalite(t *testing.T) {
	client := localClient(t)
	sinktest.FenceMarks(t, func(t *testing.T) sinktest.FenceMarker { return freshStore(t, client, Options{}) })
}

// TestFenceMarksAreNoRows: the mark items live in the rows table but no
// reader of rows meets them: Scan leaves them out (and keeps the rows of
// an ad whose id is their entity), they carry neither bucket_shard nor
// expires_at, and BackfillBucketShards does not give them one.
func TestFenceMarksAreNoRows(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	rows := []sink.Key{
		{Entity: "ad_7", Bucket: "H2026-11-29T10Z"},
		{Entity: FenceMarkEntity, Bucket: "H2026-11-29T10Z"}, // an ad may be called so
		{Entity: FenceMarkEntity, Bucket: "M2026-11-29T10:14Z"},
	}
	for _, k := range rows {
		if _, err := s.Put(ctx, []sink.Put{{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1, Fence: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	for gen := int64(1); gen <= 2; gen++ {
		if err := s.RaiseFenceMark(ctx, gen, 0, 64, 2); err != nil {
			t.Fatalf("RaiseFenceMark(%d): %v", gen, err)
		}
	}
	// A view with a scope shares the marks: they are the table's.
	v, err := s.Scoped("kg64-128")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.RaiseFenceMark(ctx, 1, 64, 128, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseFenceMark(ctx, 1, 100, 101, 2); err == nil {
		t.Fatal("a raise under the scoped view's mark passed on the unscoped store")
	}

	scanned := func() []sink.Key {
		t.Helper()
		var got []sink.Key
		if err := s.Scan(ctx, func(it sink.Item) error { got = append(got, it.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, byKey)
		return got
	}
	want := slices.Clone(rows)
	slices.SortFunc(want, byKey)
	if got := scanned(); !slices.Equal(got, want) {
		t.Fatalf("Scan gave %v, want the rows %v", got, want)
	}
	if _, err := s.BackfillBucketShards(ctx); err != nil {
		t.Fatal(err)
	}
	for gen := int64(1); gen <= 2; gen++ {
		k := sink.Key{Entity: FenceMarkEntity, Bucket: FenceMarkBucket(gen)}
		av := rawItem(t, client, s.Table(), k)
		if len(av) == 0 {
			t.Fatalf("no mark item %v", k)
		}
		for _, a := range []string{BucketShardAttribute, TTLAttribute, attrJobGen, indexName(sink.Fast), indexName(sink.Late)} {
			if _, ok := av[a]; ok {
				t.Errorf("mark item %v carries %s: %v", k, a, av[a])
			}
		}
	}
	if got := scanned(); !slices.Equal(got, want) {
		t.Fatalf("after the backfill Scan gave %v, want the rows %v", got, want)
	}
	marks, err := s.FenceMarks(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 128 || marks[0] != 2 || marks[63] != 2 || marks[64] != 3 || marks[127] != 3 {
		t.Fatalf("FenceMarks(1) = %v, want 2 for key groups 0-63 and 3 for 64-127", marks)
	}
	var ahead *sink.FenceAheadError
	if err := s.RaiseFenceMark(ctx, 1, 0, 128, 2); !errors.As(err, &ahead) || ahead.KeyGroup != 64 {
		t.Fatalf("RaiseFenceMark(1, 0, 128, 2) = %v, want a refusal at key group 64", err)
	}
}

func byKey(a, b sink.Key) int {
	return cmp.Or(cmp.Compare(a.Entity, b.Entity), cmp.Compare(a.Bucket, b.Bucket))
}
