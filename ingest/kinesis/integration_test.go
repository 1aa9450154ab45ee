//go:build integration

package kinesis_test

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/internal/testenv"
)

// client returns a Kinesis client for the local server, and a fresh
// stream name.
func client(t *testing.T) (*sdk.Client, string) {
	t.Helper()
	endpoint := testenv.Kinesis(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections) // no keep-alive goroutines left for goleak
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("x", "x", "")))
	if err != nil {
		t.Fatalf("load config: %v", err)
	}
	c := sdk.NewFromConfig(cfg, func(o *sdk.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.HTTPClient = &http.Client{Transport: tr}
	})
	return c, fmt.Sprintf("it-%s-%d", t.Name(), time.Now().UnixNano())
}

// itOptions are the production defaults, with quicker shard listing.
func itOptions(name string, pos map[string]string) kinesis.Options {
	return kinesis.Options{Stream: name, Positions: pos, Rediscover: time.Second, PollInterval: 200 * time.Millisecond}
}

func itPayload(k string, i int) []byte { return fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, i) }

// itRecords builds n records for each key, numbered from start; with
// hashKeys, key i goes to shard i mod len(hashKeys).
func itRecords(keys []string, start, n int, hashKeys []string) []kinesis.PutRecord {
	var recs []kinesis.PutRecord
	for i := start; i < start+n; i++ {
		for j, k := range keys {
			r := kinesis.PutRecord{Data: itPayload(k, i), PartitionKey: k}
			if hashKeys != nil {
				r.ExplicitHashKey = hashKeys[j%len(hashKeys)]
			}
			recs = append(recs, r)
		}
	}
	return recs
}

func itPut(t *testing.T, api kinesis.API, name string, recs []kinesis.PutRecord, aggregate bool) {
	t.Helper()
	if aggregate {
		var err error
		if recs, err = kinesis.Aggregate(recs, 400); err != nil {
			t.Fatal(err)
		}
	}
	if err := kinesis.Put(context.Background(), api, name, recs); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

func TestIntegrationReadBack(t *testing.T) {
	c, name := client(t)
	ctx := context.Background()
	if err := kinesis.EnsureStream(ctx, c, name, 3); err != nil {
		t.Fatal(err)
	}
	hk, err := kinesis.ShardHashKeys(ctx, c, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(hk) != 3 {
		t.Fatalf("ShardHashKeys: got %v, want 3 keys", hk)
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	before := time.Now().Add(-time.Second).UnixMilli()
	plain := itRecords(keys, 0, 30, hk)
	itPut(t, c, name, plain, false)
	agg := itRecords(keys, 30, 30, hk)
	itPut(t, c, name, agg, true)
	after := time.Now().Add(time.Second).UnixMilli()
	want := wantPayloads(plain, agg)

	// Read part of it, stop, and resume from the positions (the cut falls
	// inside aggregated records), then read the rest.
	var all []kinesis.Record
	var pos map[string]string
	for _, stop := range []int{47, 250, len(want)} {
		src, err := kinesis.Open(ctx, c, itOptions(name, pos))
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(t, src)
		r.read(stop-len(all), 30*time.Second)
		pos = src.Positions()
		src.Close()
		all = append(all, r.recs...)
	}
	checkExactlyOnce(t, all, want)
	checkKeyOrder(t, all)
	midAggregate := false
	for _, rec := range all {
		var k string
		var n int
		fmt.Sscanf(string(rec.Data), `{"key":%q,"n":%d}`, &k, &n)
		j := slices.Index(keys, k)
		if wantShard := fmt.Sprintf("shardId-%012d", j%3); rec.Shard != wantShard {
			t.Fatalf("record %s: shard %s, want %s (explicit hash key %s)", rec.Data, rec.Shard, wantShard, hk[j%3])
		}
		if rec.ArrivalMs < before || rec.ArrivalMs > after {
			t.Fatalf("record %s: arrival %d outside [%d, %d]", rec.Data, rec.ArrivalMs, before, after)
		}
		if (n >= 30) != (rec.Sub > 0 || isAggregatedSeq(all, rec.Seq)) {
			t.Fatalf("record %s: sub-sequence %d, aggregated %v", rec.Data, rec.Sub, n >= 30)
		}
		if rec.Sub > 0 {
			midAggregate = true
		}
	}
	if !midAggregate {
		t.Fatalf("no record with a sub-sequence number > 0")
	}
	for id, p := range pos {
		if p == kinesis.PositionClosed {
			t.Fatalf("open shard %s has position closed", id)
		}
	}
}

// isAggregatedSeq reports whether several user records share seq.
func isAggregatedSeq(all []kinesis.Record, seq string) bool {
	n := 0
	for _, r := range all {
		if r.Seq == seq {
			n++
		}
	}
	return n > 1
}

func midHashKey(t *testing.T, lo, hi string) string {
	t.Helper()
	a, ok1 := new(big.Int).SetString(lo, 10)
	b, ok2 := new(big.Int).SetString(hi, 10)
	if !ok1 || !ok2 {
		t.Fatalf("bad hash keys %q %q", lo, hi)
	}
	return new(big.Int).Rsh(new(big.Int).Add(a, b), 1).String()
}

// TestIntegrationReshard splits a shard and merges two while the source
// reads: nothing lost or read twice, children after parents, per-key order
// kept.
func TestIntegrationReshard(t *testing.T) {
	c, name := client(t)
	ctx := context.Background()
	if err := kinesis.EnsureStream(ctx, c, name, 2); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	var put [][]kinesis.PutRecord
	add := func(recs []kinesis.PutRecord, aggregate bool) {
		itPut(t, c, name, recs, aggregate)
		put = append(put, recs)
	}
	add(itRecords(keys, 0, 20, nil), false)
	add(itRecords(keys, 20, 10, nil), true)
	src, err := kinesis.Open(ctx, c, itOptions(name, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := newReader(t, src)
	r.read(100, 30*time.Second)

	shards, err := c.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	s0 := shards.Shards[0]
	mid := midHashKey(t, aws.ToString(s0.HashKeyRange.StartingHashKey), aws.ToString(s0.HashKeyRange.EndingHashKey))
	if _, err := c.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(name), ShardToSplit: s0.ShardId, NewStartingHashKey: aws.String(mid)}); err != nil {
		t.Fatalf("SplitShard: %v", err)
	}
	if err := kinesis.WaitActive(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	add(itRecords(keys, 30, 10, nil), false)
	r.read(250, 30*time.Second)
	// shardId-3 is the upper half of shard 0, adjacent to shard 1.
	if _, err := c.MergeShards(ctx, &sdk.MergeShardsInput{StreamName: aws.String(name),
		ShardToMerge: aws.String("shardId-000000000003"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatalf("MergeShards: %v", err)
	}
	if err := kinesis.WaitActive(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	add(itRecords(keys, 40, 10, nil), true)
	add(itRecords(keys, 50, 10, nil), false)
	want := wantPayloads(put...)
	r.read(len(want), 60*time.Second)
	r.readUntil(func() bool { return len(r.closed) == 3 }, 30*time.Second)
	checkExactlyOnce(t, r.recs, want)
	checkKeyOrder(t, r.recs)

	idx := map[string]int{}
	for i, e := range r.order {
		if e.Event != "" {
			idx[e.Event+" "+e.Shard] = i
		}
	}
	for child, ps := range map[string][]string{
		"shardId-000000000002": {"shardId-000000000000"},
		"shardId-000000000003": {"shardId-000000000000"},
		"shardId-000000000004": {"shardId-000000000003", "shardId-000000000001"},
	} {
		a, ok := idx[kinesis.EventShardAdded+" "+child]
		if !ok {
			t.Fatalf("child %s never added", child)
		}
		for _, p := range ps {
			if cl, ok := idx[kinesis.EventShardClosed+" "+p]; !ok || cl > a {
				t.Fatalf("child %s added at %d before parent %s closed (%d, %v)", child, a, p, cl, ok)
			}
		}
	}
	r.readUntil(src.CaughtUp, 30*time.Second)
}
