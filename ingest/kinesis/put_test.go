package kinesis_test

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

func storedPayloads(f *kinesistest.Fake) []string {
	var out []string
	for _, r := range f.Records(stream) {
		out = append(out, string(r.Data))
	}
	slices.Sort(out)
	return out
}

func TestPutBatches(t *testing.T) {
	f := newStream(t, 2)
	var recs []kinesis.PutRecord
	// 1,200 small records: 3 calls by count (500, 500, 200).
	for i := range 1200 {
		recs = append(recs, kinesis.PutRecord{Data: payload("k", i), PartitionKey: "k"})
	}
	if err := kinesis.Put(context.Background(), f, stream, recs); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls("PutRecords"); got != 3 {
		t.Fatalf("PutRecords calls for 1,200 records: got %d, want 3", got)
	}
	// 12 records of 1 MiB − 100 bytes: 4 fit into 5 MiB, so 3 calls.
	var big []kinesis.PutRecord
	for i := range 12 {
		d := make([]byte, 1<<20-100)
		copy(d, payload("big", i))
		big = append(big, kinesis.PutRecord{Data: d, PartitionKey: "big"})
	}
	if err := kinesis.Put(context.Background(), f, stream, big); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls("PutRecords"); got != 6 {
		t.Fatalf("PutRecords calls for 12 records of ~1 MiB: got %d, want 3 more (6)", got)
	}
	if got := len(f.Records(stream)); got != 1212 {
		t.Fatalf("records stored: got %d, want 1212", got)
	}
}

func TestPutRetriesFailedEntries(t *testing.T) {
	f := newStream(t, 2)
	ft := kinesistest.NewFaulty(f)
	ft.FailPutEntries(3)
	ft.Fail("PutRecords", 2, kinesistest.Throttled())
	var recs []kinesis.PutRecord
	for i := range 40 {
		recs = append(recs, kinesis.PutRecord{Data: payload("k", i), PartitionKey: "k"})
	}
	o := kinesis.PutOptions{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	if err := kinesis.PutWith(context.Background(), ft, stream, recs, o); err != nil {
		t.Fatal(err)
	}
	if got, want := storedPayloads(f), wantPayloads(recs); !slices.Equal(got, want) {
		t.Fatalf("stored %d records, want each of %d exactly once", len(got), len(want))
	}
	// 2 throttled calls, then 3 partial ones (40 → 20 → 10 → 5 failing),
	// then the last 5 entries.
	if got := f.Calls("PutRecords"); got != 4 {
		t.Fatalf("PutRecords calls reaching the stream: got %d, want 4", got)
	}

	// Bounded: entries that keep failing are an error.
	ft.FailPutEntries(100)
	o.MaxAttempts = 3
	err := kinesis.PutWith(context.Background(), ft, stream, recs[:4], o)
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("PutWith with failing entries: got %v, want an error after 3 attempts", err)
	}
	// Fatal errors are not retried.
	err = kinesis.Put(context.Background(), f, "no-such-stream", recs[:1])
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("Put to a missing stream: got %v, want ResourceNotFoundException", err)
	}
}

func TestShardHashKeysMapping(t *testing.T) {
	f := newStream(t, 3)
	ctx := context.Background()
	if _, err := f.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String("shardId-000000000000"),
		NewStartingHashKey: aws.String("1000")}); err != nil {
		t.Fatal(err)
	}
	f.PageSize = 2 // exercise pagination
	keys, err := kinesis.ShardHashKeys(ctx, f, stream)
	if err != nil {
		t.Fatal(err)
	}
	third := new(big.Int).Div(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(3))
	want := []string{"0", "1000", third.String(), new(big.Int).Mul(third, big.NewInt(2)).String()}
	if !slices.Equal(keys, want) {
		t.Fatalf("ShardHashKeys: got %v, want %v", keys, want)
	}
	// The n-th key sends a record to the n-th open shard in hash order.
	wantShard := []string{"shardId-000000000003", "shardId-000000000004", "shardId-000000000001", "shardId-000000000002"}
	for n, k := range keys {
		if err := kinesis.Put(ctx, f, stream, []kinesis.PutRecord{{Data: payload("n", n), PartitionKey: "same", ExplicitHashKey: k}}); err != nil {
			t.Fatal(err)
		}
		recs := f.Records(stream)
		var got string
		for _, r := range recs {
			if string(r.Data) == string(payload("n", n)) {
				got = r.Shard
			}
		}
		if got != wantShard[n] {
			t.Fatalf("record with hash key #%d: landed on %s, want %s", n, got, wantShard[n])
		}
	}
}

func TestEnsureStream(t *testing.T) {
	f := kinesistest.NewFake()
	ctx := context.Background()
	if err := kinesis.EnsureStream(ctx, f, "s", 4); err != nil {
		t.Fatal(err)
	}
	if err := kinesis.EnsureStream(ctx, f, "s", 2); err != nil {
		t.Fatalf("existing stream: %v", err)
	}
	out, _ := f.DescribeStreamSummary(ctx, &sdk.DescribeStreamSummaryInput{StreamName: aws.String("s")})
	if got := aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount); got != 4 {
		t.Fatalf("shards: got %d, want 4", got)
	}
	// Another creator wins the race: ResourceInUseException is fine.
	ft := kinesistest.NewFaulty(f)
	ft.Fail("DescribeStreamSummary", 1, &types.ResourceNotFoundException{Message: aws.String("not yet")})
	ft.Fail("CreateStream", 1, &types.ResourceInUseException{Message: aws.String("being created")})
	if err := kinesis.EnsureStream(ctx, ft, "s", 4); err != nil {
		t.Fatalf("racing creator: %v", err)
	}
	if f.Calls("CreateStream") != 1 {
		t.Fatalf("CreateStream calls: got %d, want 1", f.Calls("CreateStream"))
	}
}

func TestAggregateGroupsByTarget(t *testing.T) {
	recs := []kinesis.PutRecord{
		{Data: []byte("1"), PartitionKey: "a", ExplicitHashKey: "5"},
		{Data: []byte("2"), PartitionKey: "b", ExplicitHashKey: "5"},
		{Data: []byte("3"), PartitionKey: "c"},
		{Data: []byte("4"), PartitionKey: "d", ExplicitHashKey: "7"},
		{Data: []byte("5"), PartitionKey: "c"},
	}
	out, err := kinesis.Aggregate(recs, 0)
	if err != nil {
		t.Fatal(err)
	}
	type target struct{ pk, ehk string }
	var got []target
	for _, o := range out {
		got = append(got, target{o.PartitionKey, o.ExplicitHashKey})
	}
	want := []target{{"a", "5"}, {"c", ""}, {"d", "7"}}
	if !slices.Equal(got, want) {
		t.Fatalf("aggregated targets: got %v, want %v", got, want)
	}
}
