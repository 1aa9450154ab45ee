//go:build integration

package dynamo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// localClient returns a client for the local DynamoDB stand-in.
func localClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint := testenv.DynamoDB(t)
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
	)
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	// The SDK reads AWS_ENDPOINT_URL_DYNAMODB by itself; setting it
	// explicitly keeps the test independent of other AWS_* variables.
	return NewClient(cfg, Options{}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// freshStore creates a table with a random name and deletes it when t ends.
func freshStore(t testing.TB, client *dynamodb.Client, o Options) *Store {
	t.Helper()
	o.Table = fmt.Sprintf("ad_metrics_test_%016x", rand.Uint64())
	s, err := New(client, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		if _, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(o.Table)}); err != nil {
			t.Errorf("delete table %s: %v", o.Table, err)
		}
	})
	return s
}

func TestConformanceDynalite(t *testing.T) {
	client := localClient(t)
	sinktest.Rows(t, func(t *testing.T) sink.Rows { return freshStore(t, client, Options{}) })
}

func TestScopedConformanceDynalite(t *testing.T) {
	client := localClient(t)
	sinktest.ScopedRows(t, func(t *testing.T) (sink.Rows, func(string) (sink.Rows, error)) {
		s := freshStore(t, client, Options{})
		return s, func(scope string) (sink.Rows, error) { return s.Scoped(scope) }
	})
}

func TestCreateTableIdempotent(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	// Again, through a second Store on the same table.
	s2, err := New(client, Options{Table: s.Table()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s2.CreateTable(ctx); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.Table())})
	if err != nil {
		t.Fatalf("DescribeTable: %v", err)
	}
	if got := len(out.Table.GlobalSecondaryIndexes); got != 3 {
		t.Fatalf("table has %d global secondary indexes, want 3 (fast_ix, late_ix, by_bucket_shard)", got)
	}
	if b := findIndex(out.Table, BucketIndex); b == nil || keyString(b.KeySchema) != "[bucket_shard HASH entity RANGE]" {
		t.Fatalf("index %s = %+v, want key bucket_shard HASH + entity RANGE", BucketIndex, b)
	}
	// The stand-in has no TTL: CreateTable leaves it off without an error,
	// and TTLStatus says so.
	if status, _, err := s2.TTLStatus(ctx); err != nil || status != types.TimeToLiveStatusDisabled {
		t.Fatalf("TTLStatus on the stand-in = %q, %v; want DISABLED", status, err)
	}
	if bm := out.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Fatalf("billing mode summary %+v, want PAY_PER_REQUEST", bm)
	}
}

func TestCreateTableRejectsOtherSchema(t *testing.T) {
	client := localClient(t)
	ctx := context.Background()
	name := fmt.Sprintf("ad_metrics_other_%016x", rand.Uint64())
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create a foreign table: %v", err)
	}
	t.Cleanup(func() {
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	s, err := New(client, Options{Table: name})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	err = s.CreateTable(ctx)
	if err == nil {
		t.Fatalf("CreateTable on a table with another schema: got nil error")
	}
	for _, want := range []string{"key schema", "no global secondary index fast_ix", "no global secondary index late_ix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CreateTable error %q does not mention %q", err, want)
		}
	}
}

// BenchmarkPutDynalite measures tagged UpdateItem writes per second:
//
//	go test -tags integration -run '^$' -bench PutDynalite -benchtime 10000x ./sink/dynamo/
func BenchmarkPutDynalite(b *testing.B) {
	client := localClient(b)
	s := freshStore(b, client, Options{})
	ctx := context.Background()
	puts := make([]sink.Put, 0, 1000)
	flush := func() {
		if _, err := s.Put(ctx, puts); err != nil {
			b.Fatalf("Put: %v", err)
		}
		puts = puts[:0]
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		k := sink.Key{Entity: fmt.Sprintf("ad_%d", i%5000), Bucket: sink.MinuteBucket(int64(i/5000) * 60_000)}
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: int64(i), Epoch: int64(i / 1000), Gen: 1, ClosedRow: true})
		if len(puts) == cap(puts) {
			flush()
		}
	}
	flush()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "updates/s")
}

// countingAPI counts Query calls.
type countingAPI struct {
	API
	queries atomic.Int64
}

func (c *countingAPI) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.queries.Add(1)
	return c.API.Query(ctx, in, optFns...)
}

// TestQueryIndexFollowsPages checks that the conformance suite's
// many-pages case really spans several pages on the stand-in.
func TestQueryIndexFollowsPages(t *testing.T) {
	client := localClient(t)
	base := freshStore(t, client, Options{})
	counting := &countingAPI{API: client}
	s, err := New(counting, Options{Table: base.Table()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	const n = 1200
	pad := strings.Repeat("p", 900)
	var puts []sink.Put
	for i := 0; len(puts) < n; i++ {
		k := sink.Key{Entity: fmt.Sprintf("%s%d", pad, i), Bucket: "H2026-11-29T10Z"}
		if sink.IndexShard(k) == 3 {
			puts = append(puts, sink.Put{Key: k, Writer: sink.Late, Valid: 1, Epoch: 9, Gen: 1})
		}
	}
	if refused, err := s.Put(ctx, puts); err != nil || refused != 0 {
		t.Fatalf("Put = %d, %v; want 0, nil", refused, err)
	}
	seen := 0
	if err := s.QueryIndex(ctx, sink.Late, "9#3", func(sink.Item) error { seen++; return nil }); err != nil {
		t.Fatalf("QueryIndex: %v", err)
	}
	if seen != n {
		t.Fatalf("QueryIndex returned %d items, want %d", seen, n)
	}
	if q := counting.queries.Load(); q < 2 {
		t.Fatalf("QueryIndex sent %d Query requests, want at least 2 (1 MB pages)", q)
	}
}

// rawItem reads an item as DynamoDB stores it, attributes and all.
func rawItem(t *testing.T, client *dynamodb.Client, table string, k sink.Key) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"entity": &types.AttributeValueMemberS{Value: k.Entity}, "bucket": &types.AttributeValueMemberS{Value: k.Bucket},
		},
	})
	if err != nil {
		t.Fatalf("GetItem %v: %v", k, err)
	}
	return out.Item
}

func expiresAt(t *testing.T, av map[string]types.AttributeValue) int64 {
	t.Helper()
	n, ok := av["expires_at"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("item %v has no number expires_at", av)
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestItemsCarryExpiry checks the TTL attribute on the stored items: the
// end of the bucket plus the retention (35 days for minutes, 400 for hours
// by default), set by every tagged write; the recount's write sets it only
// on a row without one, and Get still returns the item without it.
func TestItemsCarryExpiry(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	minute := sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	hour := sink.Key{Entity: "ad_7", Bucket: "H2026-11-29T10Z"}
	finalOnly := sink.Key{Entity: "ad_8", Bucket: "H2026-11-29T10Z"}
	minuteEnd := time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC).Unix()
	hourEnd := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC).Unix()
	if _, err := s.Put(ctx, []sink.Put{
		{Key: minute, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1, ClosedRow: true, RestoredCkpt: 1},
		{Key: hour, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1},
	}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// A recount run with a shorter hour retention: it must not shorten the
	// stream's expiry, and gives a row only it writes its own.
	short, err := New(client, Options{Table: s.Table(), Retention: sink.Retention{Hour: 30 * 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.PutFinal(ctx, []sink.FinalPut{{Key: hour, Valid: 1, Gen: 1, AtMs: 1}, {Key: finalOnly, Valid: 2, Gen: 1, AtMs: 1}}); err != nil {
		t.Fatalf("PutFinal: %v", err)
	}
	for _, c := range []struct {
		k    sink.Key
		want int64
	}{
		{minute, minuteEnd + 35*86400},
		{hour, hourEnd + 400*86400},
		{finalOnly, hourEnd + 30*86400},
	} {
		if got := expiresAt(t, rawItem(t, client, s.Table(), c.k)); got != c.want {
			t.Errorf("%v: expires_at %d (%v), want %d (%v)", c.k, got, time.Unix(got, 0).UTC(), c.want, time.Unix(c.want, 0).UTC())
		}
	}
	it, ok, err := s.Get(ctx, hour)
	if err != nil || !ok {
		t.Fatalf("Get: %v, %v", ok, err)
	}
	want := sink.Item{Key: hour, JobGen: 1, HasJobGen: true, Fast: sink.Tagged{Present: true, Valid: 1, Ckpt: 3, Ix: sink.IndexKey(3, hour), Gen: 1},
		Final: sink.FinalAttrs{Present: true, Valid: 1, Gen: 1, AtMs: 1}}
	if it != want {
		t.Errorf("Get = %+v, want %+v (expires_at is not part of the item)", it, want)
	}
	// The flush's Delete of a minute row is not held up by expires_at (it
	// is no writer's attribute).
	if deleted, ok, err := s.Delete(ctx, minute, sink.Fast, 3); err != nil || !deleted || !ok {
		t.Fatalf("Delete of a minute row with expires_at = %v, %v, %v; want deleted", deleted, ok, err)
	}
}

// TestQueryBucketReadsOnlyTheBucket lists one hour of a table that holds
// three hours and their minutes, through a client that counts: Queries of
// the bucket index's shards of that hour only, no Scan, and no more items
// read than the page and the few per shard its first queries ask for.
func TestQueryBucketReadsOnlyTheBucket(t *testing.T) {
	client := localClient(t)
	base := freshStore(t, client, Options{})
	counting := &readCounting{API: client}
	s, err := New(counting, Options{Table: base.Table()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var puts []sink.Put
	for i := range 100 {
		ad := fmt.Sprintf("ad_%03d", (i*37)%100)
		for _, h := range []string{"09", "10", "11"} {
			puts = append(puts, sink.Put{Key: sink.Key{Entity: ad, Bucket: "H2026-11-29T" + h + "Z"}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
		}
		for m := range 5 {
			puts = append(puts, sink.Put{Key: sink.Key{Entity: ad, Bucket: fmt.Sprintf("M2026-11-29T10:%02dZ", m)}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
		}
	}
	if _, err := s.Put(ctx, puts); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.QueryBucket(ctx, "H2026-11-29T10Z", "ad_049", 30, func(it sink.Item) error {
		got = append(got, it.Entity)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 30 || got[0] != "ad_050" || got[29] != "ad_079" {
		t.Fatalf("QueryBucket returned %v, want ad_050 to ad_079", got)
	}
	if n := counting.scans.Load(); n != 0 {
		t.Errorf("%d Scans, want 0", n)
	}
	// The hour's 100 rows spread over 32 shards; the page's 30 lie after
	// ad_049, about one per shard, and each shard is asked for at most
	// shardLimit(30) of its rows after the cursor.
	if n := counting.read.Load(); n < 30 || n > int64(BucketShards*shardLimit(30)) || n > 50 {
		t.Errorf("%d items read of the table's 800 (the hour's 50 after the cursor), want 30 to %d", n, min(50, BucketShards*shardLimit(30)))
	}
	for _, q := range counting.inputs {
		if aws.ToString(q.IndexName) != BucketIndex || !strings.HasPrefix(testenv.AttrS(q.ExpressionAttributeValues, ":bs"), "H2026-11-29T10Z#") ||
			q.Limit == nil || *q.Limit > 30 {
			t.Errorf("query of index %s, key %s, limit %v: want %s, H2026-11-29T10Z#<n>, at most 30",
				aws.ToString(q.IndexName), testenv.AttrS(q.ExpressionAttributeValues, ":bs"), q.Limit, BucketIndex)
		}
	}
	if n := len(counting.inputs); n < BucketShards {
		t.Errorf("%d queries, want at least one per shard (%d)", n, BucketShards)
	}
}

// readCounting counts Scans and the items Queries read.
type readCounting struct {
	API
	scans, read atomic.Int64
	mu          sync.Mutex
	inputs      []*dynamodb.QueryInput
}

func (c *readCounting) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.mu.Lock()
	c.inputs = append(c.inputs, in)
	c.mu.Unlock()
	out, err := c.API.Query(ctx, in, optFns...)
	if out != nil {
		c.read.Add(int64(out.ScannedCount))
	}
	return out, err
}

func (c *readCounting) Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.scans.Add(1)
	return c.API.Scan(ctx, in, optFns...)
}

// TestItemsCarryBucketShard checks the stored rows: every Put and PutFinal
// sets bucket_shard to "<bucket>#<n>", the rows of 300 ads of one minute
// spread over the shards, Get and QueryBucket return items without it, and
// the flush's Delete removes a row that carries it.
func TestItemsCarryBucketShard(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	const minute = "M2026-11-29T10:14Z"
	var puts []sink.Put
	for i := range 300 {
		puts = append(puts, sink.Put{Key: sink.Key{Entity: fmt.Sprintf("ad_%04d", i), Bucket: minute}, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1})
	}
	if _, err := s.Put(ctx, puts); err != nil {
		t.Fatal(err)
	}
	finalOnly := sink.Key{Entity: "ad_final", Bucket: "H2026-11-29T10Z"}
	if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: finalOnly, Valid: 2, Gen: 1, AtMs: 1}}); err != nil {
		t.Fatal(err)
	}
	if got, want := testenv.AttrS(rawItem(t, client, s.Table(), finalOnly), "bucket_shard"), BucketShardKey(finalOnly.Bucket, finalOnly.Entity); got != want {
		t.Errorf("row only the recount wrote: bucket_shard %q, want %q", got, want)
	}
	shards := map[string]bool{}
	for _, p := range puts {
		av := rawItem(t, client, s.Table(), p.Key)
		bs := testenv.AttrS(av, "bucket_shard")
		if bs != BucketShardKey(minute, p.Entity) {
			t.Fatalf("%v: bucket_shard %q, want %q", p.Key, bs, BucketShardKey(minute, p.Entity))
		}
		shards[bs] = true
	}
	if len(shards) < 30 {
		t.Errorf("300 ads of one minute: %d distinct bucket_shard values, want at least 30", len(shards))
	}
	it, ok, err := s.Get(ctx, puts[0].Key)
	if err != nil || !ok {
		t.Fatalf("Get: %v, %v", ok, err)
	}
	if want := (sink.Item{Key: puts[0].Key, JobGen: 1, HasJobGen: true, Fast: sink.Tagged{Present: true, Valid: 1, Ckpt: 3, Ix: sink.IndexKey(3, puts[0].Key), Gen: 1}}); it != want {
		t.Errorf("Get = %+v, want %+v", it, want)
	}
	if deleted, ok, err := s.Delete(ctx, puts[0].Key, sink.Fast, 3); err != nil || !deleted || !ok {
		t.Fatalf("Delete of a row with bucket_shard = %v, %v, %v; want deleted", deleted, ok, err)
	}
	if av := rawItem(t, client, s.Table(), puts[0].Key); len(av) != 0 {
		t.Fatalf("row still there after Delete: %v", av)
	}
}

// TestQueryBucketPagesAcrossShards pages through a bucket of 50 rows with
// limits 1, 2 and 7: every row once, in entity order.
func TestQueryBucketPagesAcrossShards(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	const hour = "H2026-11-29T10Z"
	var puts []sink.Put
	var want []string
	for i := range 50 {
		ad := fmt.Sprintf("ad_%02d", i)
		want = append(want, ad)
		puts = append(puts, sink.Put{Key: sink.Key{Entity: fmt.Sprintf("ad_%02d", (i*31)%50), Bucket: hour}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
		// Another hour and a minute, which must not show.
		puts = append(puts, sink.Put{Key: sink.Key{Entity: ad, Bucket: "H2026-11-29T11Z"}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1},
			sink.Put{Key: sink.Key{Entity: ad, Bucket: "M2026-11-29T10:14Z"}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
	}
	if _, err := s.Put(ctx, puts); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 7} {
		var got []string
		for after := ""; ; {
			var page []string
			if err := s.QueryBucket(ctx, hour, after, limit, func(it sink.Item) error {
				if it.Bucket != hour {
					return fmt.Errorf("item %v of another bucket", it.Key)
				}
				page = append(page, it.Entity)
				return nil
			}); err != nil {
				t.Fatalf("limit %d after %q: %v", limit, after, err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page))
			}
			got = append(got, page...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1]
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("limit %d: pages gave %v, want %v", limit, got, want)
		}
	}
}

// TestBackfillBucketShards writes rows as an earlier release did, without
// bucket_shard, and checks that they are missing from QueryBucket until
// BackfillBucketShards sets it, which it does once.
func TestBackfillBucketShards(t *testing.T) {
	client := localClient(t)
	s := freshStore(t, client, Options{})
	ctx := context.Background()
	const hour = "H2026-11-29T10Z"
	var want []string
	for i := range 40 {
		ad := fmt.Sprintf("ad_%02d", i)
		want = append(want, ad)
		if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.Table()),
			Key:                       map[string]types.AttributeValue{"entity": str(ad), "bucket": str(hour)},
			UpdateExpression:          aws.String("SET fast_valid = :v, job_gen = :g"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": num(1), ":g": num(1)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One row written by this release already carries it.
	if _, err := s.Put(ctx, []sink.Put{{Key: sink.Key{Entity: "ad_99", Bucket: hour}, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1}}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "ad_99")
	list := func() []string {
		var got []string
		if err := s.QueryBucket(ctx, hour, "", 0, func(it sink.Item) error { got = append(got, it.Entity); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := list(); len(got) != 1 {
		t.Fatalf("before the backfill QueryBucket = %v, want only ad_99", got)
	}
	n, err := s.BackfillBucketShards(ctx)
	if err != nil || n != 40 {
		t.Fatalf("BackfillBucketShards = %d, %v; want 40", n, err)
	}
	if got := list(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the backfill QueryBucket = %v, want %v", got, want)
	}
	if n, err := s.BackfillBucketShards(ctx); err != nil || n != 0 {
		t.Fatalf("second BackfillBucketShards = %d, %v; want 0", n, err)
	}
}
