package flush

import (
	"context"
	"fmt"
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

func BenchmarkDecide(b *testing.B) {
	k := sink.Key{Entity: "ad_7", Bucket: hour("10")}
	it := sink.Item{Key: k, Late: tag(1, 42, 7, k)}
	st := newRestored()
	st.late[lateKey{"ad_7", startOf(b, hour("10"))}] = [2]int64{1, 0}
	for b.Loop() {
		if Decide(it, sink.Late, 41, st).Kind != RewriteLate {
			b.Fatal("unexpected action")
		}
	}
}

// BenchmarkFull flushes 1,000 items written since the checkpoint out of a
// table of 51,000, through the in-memory store with a secondary index.
func BenchmarkFull(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		rows := newIndexed(sinktest.NewMemRows())
		seedOld(b, rows, 50_000)
		for i := range 1000 {
			k := sink.Key{Entity: fmt.Sprintf("new_%d", i), Bucket: minute("10:14")}
			mustPut(b, rows, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: int64(41 + i%3), Gen: 7})
		}
		b.StartTimer()
		rep, err := Full(ctx, rows, nil, newRestored(), nil, unlimited())
		if err != nil || rep.ItemsDeleted != 1000 {
			b.Fatalf("flush: %+v, %v", rep, err)
		}
	}
}
