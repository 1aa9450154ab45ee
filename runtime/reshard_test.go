package runtime

import (
	"context"
	"fmt"
	"github.com/adclick/adclick/ingest"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// openShards lists the stream's open shards (no ending sequence number).
func openShards(t *testing.T, api *kinesistest.Fake, stream string) []types.Shard {
	t.Helper()
	out, err := api.ListShards(context.Background(), &awskinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	var open []types.Shard
	for _, s := range out.Shards {
		if s.SequenceNumberRange == nil || s.SequenceNumberRange.EndingSequenceNumber == nil {
			open = append(open, s)
		}
	}
	return open
}

// TestReshardWhileReading splits a shard and merges two while the job
// reads the stream: every record is routed exactly once (no duplicate
// verdicts: all click ids are unique), nothing is lost (the job's record
// count equals what was put), children are read only after their parents
// (the reader's rule; a child read early would reorder nothing here, so the
// count and the exact rows are the checks), and the rows are exact.
func TestReshardWhileReading(t *testing.T) {
	const stream = "reshard"
	api := kinesistest.NewFake()
	ctx := context.Background()
	if _, err := api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		DataDir: t.TempDir(), Source: "kinesis:" + stream, Parallelism: 2, Registerer: reg,
		AllowanceMs: new(int64(200)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 500}, CheckpointIntervalMs: 300,
		ExitWhenIdle: 1500 * time.Millisecond, Drain: true, FlushWritesPerSec: 1e6,
		OpenSource: kinesis.Opener(api, kinesis.Options{Stream: stream, MinCallInterval: 5 * time.Millisecond,
			PollInterval: 10 * time.Millisecond, Rediscover: 50 * time.Millisecond, Limit: 25}),
	}
	useLocalStores(&cfg)
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer j.Close()
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = j.Run(ctx) })

	ref := newReference()
	seen := map[string]bool{}
	seq := 0
	put := func(n int) {
		t.Helper()
		now := time.Now().UnixMilli()
		var recs []types.PutRecordsRequestEntry
		for i := 0; i < n; i++ {
			seq++
			body := fmt.Sprintf(`{"click_id":"r%d","ad_id":"ad_%d","campaign_id":"camp_1","device_id":"d_%d","impression_ms":%d,"device_ms":%d,"spend_micros":%d}`,
				seq, seq%11, seq%5, now-2000, now-int64(seq%300), 100+seq%1000)
			// Spread over the whole hash space, so every open shard gets records.
			h := new(big.Int).Mul(new(big.Int).Lsh(big.NewInt(1), 120), big.NewInt(int64((seq*7919)%256)))
			recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String("p"),
				ExplicitHashKey: aws.String(h.String())})
			// The reference: arrival is put time or later, and device ≤ now,
			// so the clamp keeps device time.
			ref.add([]byte(body), now+1, seen)
		}
		if _, err := api.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		put(40)
		time.Sleep(20 * time.Millisecond)
	}
	// Split the first shard in the middle of its hash range.
	sh := openShards(t, api, stream)[0]
	lo, _ := new(big.Int).SetString(*sh.HashKeyRange.StartingHashKey, 10)
	hi, _ := new(big.Int).SetString(*sh.HashKeyRange.EndingHashKey, 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := api.SplitShard(ctx, &awskinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: sh.ShardId,
		NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("split: %v", err)
	}
	for i := 0; i < 10; i++ {
		put(40)
		time.Sleep(20 * time.Millisecond)
	}
	// Merge two adjacent open shards (the split's upper child and the
	// original second shard).
	open := openShards(t, api, stream)
	var a, b *types.Shard
	for i := range open {
		for k := range open {
			end, _ := new(big.Int).SetString(*open[i].HashKeyRange.EndingHashKey, 10)
			start, _ := new(big.Int).SetString(*open[k].HashKeyRange.StartingHashKey, 10)
			if new(big.Int).Add(end, big.NewInt(1)).Cmp(start) == 0 {
				a, b = &open[i], &open[k]
			}
		}
	}
	if a == nil {
		t.Fatalf("no adjacent open shards among %d", len(open))
	}
	if _, err := api.MergeShards(ctx, &awskinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: a.ShardId,
		AdjacentShardToMerge: b.ShardId}); err != nil {
		t.Fatalf("merge: %v", err)
	}
	for i := 0; i < 10; i++ {
		put(40)
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	st := j.Status()
	if st.Records != int64(seq) {
		t.Errorf("the job routed %d records, want the %d put (none lost, none read twice)", st.Records, seq)
	}
	if d, _ := metricValueLabel(t, reg, "adclick_clicks_total", "verdict", "duplicate"); d != 0 {
		t.Errorf("%v duplicate verdicts with unique click ids: a record was read twice", d)
	}
	closed := 0
	for _, s := range st.Shards {
		if s.Closed {
			closed++
		}
	}
	if closed < 3 {
		t.Errorf("%d shards closed in %+v, want at least 3 (the split parent and the two merged)", closed, st.Shards)
	}
	checkRows(t, scanRows(t, j.Rows()), ref)
}

// metricValueLabel returns the value of the series of name whose label has
// the given value.
func metricValueLabel(t testing.TB, reg prometheus.Gatherer, name, label, want string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == want {
					return value(m), true
				}
			}
		}
	}
	return 0, false
}
