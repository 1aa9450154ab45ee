package embedded

import (
	"testing"

	"github.com/adclick/adclick/sink"
)

// rewritten writes k twice with the fast writer in epoch 1, so that the
// second write finds it stored, as the rewrite of an open hour does.
func rewritten(t *testing.T, s *Store, k sink.Key) {
	t.Helper()
	for range 2 {
		if n := put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1}); n != 0 {
			t.Fatalf("write of %v refused", k)
		}
	}
}

func bucketEntities(t *testing.T, s *Store, bucket string) []string {
	t.Helper()
	var out []string
	if err := s.QueryBucket(ctx, bucket, "", 0, func(it sink.Item) error {
		out = append(out, it.Entity)
		return nil
	}); err != nil {
		t.Fatalf("QueryBucket: %v", err)
	}
	return out
}

// TestWritesAfterEveryMutation rewrites a row and then changes it through
// each of the other mutating paths (Remove, Delete, expiry, PutFinal, a
// newer job generation); the next conditional write must see the row as
// that path left it, not as the rewrite did (a store that kept items in
// memory and missed a path would fail here). A closed-row write restored
// from checkpoint 5 is refused only if the row still carries fast
// attributes of an earlier checkpoint.
func TestWritesAfterEveryMutation(t *testing.T) {
	closed := func(k sink.Key) sink.Put {
		return sink.Put{Key: k, Writer: sink.Fast, Valid: 7, Epoch: 6, Gen: 1, ClosedRow: true, RestoredCkpt: 5}
	}
	t.Run("remove", func(t *testing.T) {
		s := openTemp(t, Options{})
		k := sink.Key{Entity: "a", Bucket: "M2026-11-29T10:14Z"}
		rewritten(t, s, k)
		if ok, err := s.Remove(ctx, k, sink.Fast, 1); err != nil || !ok {
			t.Fatalf("Remove = %v, %v", ok, err)
		}
		if n := put(t, s, closed(k)); n != 0 {
			t.Fatal("closed-row write refused after Remove took the fast attributes")
		}
		if it, _ := get(t, s, k); it.Fast.Valid != 7 {
			t.Fatalf("fast_valid = %d, want 7", it.Fast.Valid)
		}
	})
	t.Run("delete", func(t *testing.T) {
		s := openTemp(t, Options{})
		k := sink.Key{Entity: "a", Bucket: "M2026-11-29T10:14Z"}
		rewritten(t, s, k)
		if deleted, ok, err := s.Delete(ctx, k, sink.Fast, 1); err != nil || !ok || !deleted {
			t.Fatalf("Delete = %v, %v, %v", deleted, ok, err)
		}
		if n := put(t, s, closed(k)); n != 0 {
			t.Fatal("closed-row write refused after Delete")
		}
		// The row is new again: it needs its bucket index entry back.
		if got := bucketEntities(t, s, k.Bucket); len(got) != 1 || got[0] != "a" {
			t.Fatalf("QueryBucket = %v, want [a]", got)
		}
	})
	t.Run("expire", func(t *testing.T) {
		s := openTemp(t, Options{})
		k := sink.Key{Entity: "a", Bucket: "M2026-11-29T10:14Z"}
		rewritten(t, s, k)
		if n, err := s.Expire(ctx, 1<<50, 0); err != nil || n != 1 {
			t.Fatalf("Expire = %d, %v", n, err)
		}
		if n := put(t, s, closed(k)); n != 0 {
			t.Fatal("closed-row write refused after the row expired")
		}
		if got := bucketEntities(t, s, k.Bucket); len(got) != 1 {
			t.Fatalf("QueryBucket = %v, want [a]", got)
		}
		// And it has an expiry again: the next pass takes it.
		if n, err := s.Expire(ctx, 1<<50, 0); err != nil || n != 1 {
			t.Fatalf("second Expire = %d, %v", n, err)
		}
	})
	t.Run("put final", func(t *testing.T) {
		s := openTemp(t, Options{})
		k := sink.Key{Entity: "a", Bucket: "H2026-11-29T10Z"}
		rewritten(t, s, k)
		if n, err := s.PutFinal(ctx, []sink.FinalPut{{Key: k, Valid: 9, Gen: 3, AtMs: 1}}); err != nil || n != 0 {
			t.Fatalf("PutFinal = %d, %v", n, err)
		}
		put(t, s, sink.Put{Key: k, Writer: sink.Late, Valid: 2, Epoch: 2, Gen: 1})
		put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 3, Epoch: 2, Gen: 1})
		it, _ := get(t, s, k)
		if !it.Final.Present || it.Final.Valid != 9 || it.Late.Valid != 2 || it.Fast.Valid != 3 {
			t.Fatalf("item = %+v, want final 9, late 2, fast 3", it)
		}
		// A recount of an older generation is refused by final_gen.
		if n, err := s.PutFinal(ctx, []sink.FinalPut{{Key: k, Valid: 1, Gen: 2, AtMs: 2}}); err != nil || n != 1 {
			t.Fatalf("stale PutFinal = %d refused, %v; want 1", n, err)
		}
	})
	t.Run("fence", func(t *testing.T) {
		s := openTemp(t, Options{})
		k := sink.Key{Entity: "a", Bucket: "H2026-11-29T10Z"}
		rewritten(t, s, k)
		put(t, s, sink.Put{Key: k, Writer: sink.Late, Valid: 4, Epoch: 1, Gen: 2})
		if n := put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 5, Epoch: 2, Gen: 1}); n != 1 {
			t.Fatal("write of job generation 1 accepted after generation 2 wrote")
		}
	})
}
