package fleet

import (
	"context"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/sink"
)

// TestThrottledShardHoldsTheFleetWatermark: three workers read a 3-shard
// stream in three ranges while one shard answers every GetRecords with
// ProvisionedThroughputExceededException for 60 s, twice the default
// idleness of a shard (30 s) and 120 times these workers' (500 ms). Clicks keep arriving on
// every shard, among them clicks of their own ads on the throttled shard,
// stamped with the time they were put. While the shard is throttled no
// range may commit a watermark past the first of those clicks (the
// recount would finalise their hour short), and once the shard is read
// again they are counted on time, not late; at the end fast + late equals
// an independent count for every (ad, hour). A throttled shard taken as
// idle would fail both.
func TestThrottledShardHoldsTheFleetWatermark(t *testing.T) {
	t.Parallel() // its own world
	const ranges = 3
	const throttled = "shardId-000000000002" // hash keys 2/3 · 2^128 and up
	w := newWorld(t, 3, ranges, kinesis.ReadPoll)
	p := &putter{w: w, base: time.Now().Add(-30 * time.Second).UnixMilli(), seen: map[string]bool{}, hour: map[sink.Key]sums{}}
	ws := []*worker{w.start("a"), w.start("b"), w.start("c")}
	waitFor(t, "the ranges to be held", 30*time.Second, func() bool { return len(held(ws...)) == ranges })
	p.put(60)
	throttledAds := map[string]bool{}
	seq := 0
	// putThrottled puts n clicks of their own ads on the throttled shard,
	// each with the event time of its put.
	putThrottled := func(n int) int64 {
		now := time.Now().UnixMilli()
		h := new(big.Int).Mul(new(big.Int).Lsh(big.NewInt(1), 120), big.NewInt(255))
		var recs []types.PutRecordsRequestEntry
		for range n {
			seq++
			ad := fmt.Sprintf("thr_%d", seq%5)
			throttledAds[ad] = true
			body := fmt.Sprintf(`{"click_id":"t%d","ad_id":"%s","campaign_id":"k","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":7}`,
				seq, ad, now-1000, now)
			recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String("p"), ExplicitHashKey: aws.String(h.String())})
			hk := sink.Key{Entity: ad, Bucket: sink.HourBucket(now - now%eventtime.HourMs)}
			p.hour[hk] = sums{p.hour[hk].n + 1, p.hour[hk].spend + 7}
		}
		if _, err := w.api.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(w.stream), Records: recs}); err != nil {
			t.Fatal(err)
		}
		return now
	}
	lw, err := lease.NewWorker(w.leases, lease.WorkerOptions{Table: "leases", Job: testJob})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(60 * time.Second)
	w.api.Throttle(w.stream, throttled, until)
	first := putThrottled(5)
	checks := 0
	for next := time.Now(); time.Now().Before(until.Add(-time.Second)); time.Sleep(time.Second) {
		p.put(20)
		putThrottled(2)
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(time.Second)
		scan, err := lw.Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range scan.Items {
			if it.Kind == lease.KindRange && it.Checkpoint.Watermark >= first && time.Now().Before(until) {
				t.Fatalf("range %s committed checkpoint %d with watermark %s while the shard holding clicks from %s was throttled",
					it.Range, it.Checkpoint.ID, time.UnixMilli(it.Checkpoint.Watermark).UTC().Format(time.StampMilli),
					time.UnixMilli(first).UTC().Format(time.StampMilli))
			}
		}
		checks++
	}
	if checks < 30 {
		t.Fatalf("only %d watermark checks during the throttle", checks)
	}
	if n := w.api.Calls("GetRecords"); n == 0 {
		t.Fatal("no GetRecords calls")
	}
	mark := p.mark()
	waitFor(t, "every range to read what was put", 60*time.Second, func() bool { return caughtUp(ranges, mark, ws...) })
	for _, wk := range ws {
		wk.stop(t)
	}
	checkRows(t, w.store, p.hour)
	err = w.store.Scan(context.Background(), func(it sink.Item) error {
		if throttledAds[it.Entity] && it.Late.Valid != 0 {
			t.Errorf("%s %s: %d clicks of the throttled shard counted late", it.Entity, it.Bucket, it.Late.Valid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
