package kinesis_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis"
)

// TestStartPositions runs every way of choosing where shards start through
// both ways of reading: the same cases, the same expectations.
func TestStartPositions(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, mode string)
	}{
		{"trim horizon", startTrimHorizon},
		{"restart from positions", startRestart},
		{"latest", startLatest},
		{"at timestamp", startAtTimestamp},
		{"closed and restored ancestors", startAncestors},
	}
	forModes(t, func(t *testing.T, mode string) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, mode) })
		}
	})
}

func startTrimHorizon(t *testing.T, mode string) {
	f := newStream(t, 2)
	keys := []string{"a", "b", "c"}
	want := wantPayloads(putPlain(t, f, keys, 0, 10), putAggregated(t, f, keys, 10, 10, 150))
	r := newReader(t, open(t, f, inMode(kinesis.Options{}, mode)))
	r.read(len(want), 10*time.Second)
	checkExactlyOnce(t, r.recs, want)
	checkKeyOrder(t, r.recs)
}

// startRestart stops the source after k records, for many k (including
// inside aggregated records), and restarts it from Positions: every record
// is read exactly once overall.
func startRestart(t *testing.T, mode string) {
	f := newStream(t, 2)
	f.EventRecords = 3
	keys := []string{"a", "b", "c"}
	want := wantPayloads(putAggregated(t, f, keys, 0, 20, 200), putPlain(t, f, keys, 20, 10), putAggregated(t, f, keys, 30, 10, 120))
	total := len(want)
	for _, cut := range []int{1, 2, 3, 7, 13, 29, 50, 61, 89, total - 1} {
		var all []kinesis.Record
		var pos map[string]string
		for k, stop := range []int{cut, total} {
			src, err := kinesis.Open(context.Background(), f, fast(inMode(kinesis.Options{Positions: pos, BufferRecords: 7, Limit: 3}, mode)))
			if err != nil {
				t.Fatal(err)
			}
			r := newReader(t, src)
			r.read(stop-len(all), 10*time.Second)
			pos = src.Positions()
			src.Close()
			all = append(all, r.recs...)
			if k == 0 && len(all) != cut {
				t.Fatalf("cut %d: read %d", cut, len(all))
			}
		}
		checkExactlyOnce(t, all, want)
	}
}

func startLatest(t *testing.T, mode string) {
	f := newStream(t, 2)
	keys := []string{"a", "b", "c"}
	putPlain(t, f, keys, 0, 10)
	src := open(t, f, inMode(kinesis.Options{StartAt: kinesis.StartLatest}, mode))
	r := newReader(t, src)
	r.readUntil(src.CaughtUp, 10*time.Second) // takes the shard_added events
	later := putPlain(t, f, keys, 10, 10)
	r.read(len(later), 5*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(later))
}

func startAtTimestamp(t *testing.T, mode string) {
	f := newStream(t, 2)
	keys := []string{"a", "b", "c"}
	putPlain(t, f, keys, 0, 10)
	// The fake's clock puts the next records an hour later.
	t0 := time.Now().Add(time.Hour)
	f.Now = func() time.Time { return t0 }
	last := putPlain(t, f, keys, 10, 5)
	r := newReader(t, open(t, f, inMode(kinesis.Options{StartAt: kinesis.StartAtTimestamp, StartTimestamp: t0}, mode)))
	r.read(len(last), 5*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(last))
}

// startAncestors restores positions across a split: a closed parent is not
// read again, nor is a parent without a position whose child has one.
func startAncestors(t *testing.T, mode string) {
	f := newStream(t, 1)
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f"}
	putPlain(t, f, keys, 0, 5)
	shards, err := f.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: shards.Shards[0].ShardId,
		NewStartingHashKey: aws.String(midpoint(t, shards.Shards[0]))}); err != nil {
		t.Fatal(err)
	}
	children := wantPayloads(putPlain(t, f, keys, 5, 5))

	// The parent closed: only the children are read, from their start.
	r := newReader(t, open(t, f, inMode(kinesis.Options{Positions: map[string]string{shardIDs[0]: kinesis.PositionClosed}}, mode)))
	r.read(len(children), 10*time.Second)
	checkExactlyOnce(t, r.recs, children)

	// A child restored in its middle, the parent unknown: the parent is
	// not read; the child goes on after its position, the other child
	// from its start.
	var first, rest []kinesis.Record
	for _, rec := range r.recs {
		if rec.Shard == shardIDs[1] && len(first) < 3 {
			first = append(first, rec)
		} else {
			rest = append(rest, rec)
		}
	}
	if len(first) < 3 {
		t.Fatalf("child %s has %d records, want ≥ 3", shardIDs[1], len(first))
	}
	at := first[len(first)-1]
	r2 := newReader(t, open(t, f, inMode(kinesis.Options{Positions: map[string]string{shardIDs[1]: kinesis.FormatPosition(at.Seq, at.Sub)}}, mode)))
	r2.read(len(rest), 10*time.Second)
	checkExactlyOnce(t, r2.recs, payloads(rest))
	if r2.added[shardIDs[0]] {
		t.Fatalf("parent %s read again", shardIDs[0])
	}
}
