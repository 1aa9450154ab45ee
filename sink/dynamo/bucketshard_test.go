package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
)

// TestBucketShardStable pins the shard function: stored rows carry its
// values, so a change would hide them from QueryBucket.
func TestBucketShardStable(t *testing.T) {
	for ad, want := range map[string]int{"ad_7": bucketShardGolden["ad_7"], "ad_1": bucketShardGolden["ad_1"], "": bucketShardGolden[""]} {
		if got := BucketShard(ad); got != want {
			t.Errorf("BucketShard(%q) = %d, want %d (the shard is part of the data contract)", ad, got, want)
		}
	}
	if got, want := BucketShardKey("M2026-11-29T10:14Z", "ad_7"), fmt.Sprintf("M2026-11-29T10:14Z#%d", bucketShardGolden["ad_7"]); got != want {
		t.Errorf("BucketShardKey = %q, want %q", got, want)
	}
	if BucketShards != 32 {
		t.Errorf("BucketShards = %d, want 32 (part of the data contract)", BucketShards)
	}
}

// bucketShardGolden are BucketShard's values: the first four bytes of
// SHA-256 of the ad id, big-endian, mod 32 (computed independently of this
// package).
var bucketShardGolden = map[string]int{"ad_7": 23, "ad_1": 8, "": 2}

// TestBucketShardSpread checks that 100,000 ad ids spread evenly over the
// shards: each within ±20% of the mean.
func TestBucketShardSpread(t *testing.T) {
	for _, format := range []string{"ad_%d", "AD-%08d", "%x"} {
		var counts [BucketShards]int
		const n = 100_000
		for i := range n {
			s := BucketShard(fmt.Sprintf(format, i))
			if s < 0 || s >= BucketShards {
				t.Fatalf("BucketShard = %d, out of [0, %d)", s, BucketShards)
			}
			counts[s]++
		}
		mean := n / BucketShards
		for s, c := range counts {
			if c < mean*8/10 || c > mean*12/10 {
				t.Errorf("ids %q: shard %d holds %d, want %d ± 20%%", format, s, c, mean)
			}
		}
	}
}

// TestWritesSetBucketShard checks that Put and PutFinal, the writes that
// can create a row, set bucket_shard, and that the writes of 1,000 ads of
// one minute spread over the shards.
func TestWritesSetBucketShard(t *testing.T) {
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
	s := newStore(t, f, Options{})
	const bucket = "M2026-11-29T10:14Z"
	var puts []sink.Put
	var finals []sink.FinalPut
	for i := range 1000 {
		k := sink.Key{Entity: fmt.Sprintf("ad_%d", i), Bucket: bucket}
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1})
		if i%10 == 0 {
			finals = append(finals, sink.FinalPut{Key: k, Valid: 1, Gen: 1, AtMs: 1})
		}
	}
	if _, err := s.Put(context.Background(), puts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutFinal(context.Background(), finals); err != nil {
		t.Fatal(err)
	}
	if len(f.updates) != len(puts)+len(finals) {
		t.Fatalf("%d updates, want %d", len(f.updates), len(puts)+len(finals))
	}
	shards := map[string]int{}
	for _, u := range f.updates {
		ad := testenv.AttrS(u.Key, "entity")
		bs := testenv.AttrS(u.ExpressionAttributeValues, ":bs")
		if want := BucketShardKey(bucket, ad); bs != want {
			t.Fatalf("update of %s: bucket_shard %q, want %q", ad, bs, want)
		}
		if u.ExpressionAttributeNames["#bs"] != "bucket_shard" || !strings.Contains(aws.ToString(u.UpdateExpression), "#bs = :bs") {
			t.Fatalf("update of %s: expression %q names %v, want SET #bs = :bs with #bs = bucket_shard",
				ad, aws.ToString(u.UpdateExpression), u.ExpressionAttributeNames)
		}
		shards[bs]++
	}
	if len(shards) < 30 {
		t.Errorf("1,000 ads of one minute wrote %d distinct bucket_shard values, want at least 30 of %d", len(shards), BucketShards)
	}
	// The flush's Delete does not count bucket_shard as a writer's
	// attribute: a row carrying it is deleted all the same.
	for _, w := range []sink.Writer{sink.Fast, sink.Late} {
		for _, name := range s.ex[w].deleteNames {
			if name == BucketShardAttribute || name == TTLAttribute {
				t.Errorf("%v's delete condition requires %s to be absent", w, name)
			}
		}
	}
}

// fakeBucketIndex answers Queries of BucketIndex from rows, as DynamoDB
// does: the rows of one bucket_shard key in entity order, after the key
// condition's entity, at most Limit of them, with a LastEvaluatedKey when
// it stopped at the Limit (even if nothing follows, as DynamoDB may).
type fakeBucketIndex struct {
	mu   sync.Mutex
	rows map[string][]string // bucket_shard -> sorted entities
	read int                 // items returned
	fail string              // a bucket_shard key whose queries fail
}

func newFakeBucketIndex(bucket string, ads []string) *fakeBucketIndex {
	f := &fakeBucketIndex{rows: map[string][]string{}}
	for _, ad := range ads {
		k := BucketShardKey(bucket, ad)
		f.rows[k] = append(f.rows[k], ad)
	}
	for _, r := range f.rows {
		slices.Sort(r)
	}
	return f
}

var errShard = errors.New("shard query failed")

func (f *fakeBucketIndex) query(_ context.Context, in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
	if aws.ToString(in.IndexName) != BucketIndex {
		return nil, fmt.Errorf("query of index %q, want %s", aws.ToString(in.IndexName), BucketIndex)
	}
	if in.FilterExpression != nil {
		return nil, fmt.Errorf("query with a filter %q (a filter reads what it drops)", aws.ToString(in.FilterExpression))
	}
	cond := aws.ToString(in.KeyConditionExpression)
	if in.ExpressionAttributeNames["#bs"] != "bucket_shard" {
		return nil, fmt.Errorf("key condition %q names %v", cond, in.ExpressionAttributeNames)
	}
	key := testenv.AttrS(in.ExpressionAttributeValues, ":bs")
	if key == f.fail {
		return nil, errShard
	}
	after := ""
	switch cond {
	case "#bs = :bs":
	case "#bs = :bs AND #e > :a":
		if in.ExpressionAttributeNames["#e"] != "entity" {
			return nil, fmt.Errorf("key condition %q names %v", cond, in.ExpressionAttributeNames)
		}
		after = testenv.AttrS(in.ExpressionAttributeValues, ":a")
		if after == "" {
			return nil, errors.New("key condition compares with an empty string")
		}
	default:
		return nil, fmt.Errorf("key condition %q", cond)
	}
	if in.ExclusiveStartKey != nil {
		if s := testenv.AttrS(in.ExclusiveStartKey, "entity"); s > after {
			after = s
		}
	}
	bucket := key[:strings.LastIndex(key, "#")]
	out := &dynamodb.QueryOutput{}
	for _, ad := range f.rows[key] {
		if ad <= after {
			continue
		}
		if in.Limit != nil && len(out.Items) == int(*in.Limit) {
			break
		}
		out.Items = append(out.Items, item(ad, bucket, map[string]types.AttributeValue{"fast_valid": num(1), "bucket_shard": str(key)}))
	}
	if in.Limit != nil && len(out.Items) == int(*in.Limit) {
		last := out.Items[len(out.Items)-1]
		out.LastEvaluatedKey = map[string]types.AttributeValue{"entity": last["entity"], "bucket": last["bucket"], "bucket_shard": str(key)}
	}
	f.mu.Lock()
	f.read += len(out.Items)
	f.mu.Unlock()
	return out, nil
}

func queryAll(t *testing.T, s *Store, bucket, after string, limit int) []string {
	t.Helper()
	var got []string
	if err := s.QueryBucket(context.Background(), bucket, after, limit, func(it sink.Item) error {
		if it.Bucket != bucket {
			return fmt.Errorf("item of bucket %s", it.Bucket)
		}
		got = append(got, it.Entity)
		return nil
	}); err != nil {
		t.Fatalf("QueryBucket(after %q, limit %d): %v", after, limit, err)
	}
	return got
}

// TestQueryBucketMergesShards pages through a bucket of 50 rows with
// limits 1, 2 and 7, each page after the last entity of the one before:
// every row once, in entity order; and checks what the queries ask for.
func TestQueryBucketMergesShards(t *testing.T) {
	const bucket = "H2026-11-29T10Z"
	var ads []string
	for i := range 50 {
		ads = append(ads, fmt.Sprintf("ad_%03d", (i*37)%50))
	}
	want := slices.Sorted(slices.Values(ads))
	idx := newFakeBucketIndex(bucket, ads)
	f := &fakeAPI{query: idx.query}
	s := newStore(t, f, Options{})

	if got := queryAll(t, s, bucket, "", 0); !slices.Equal(got, want) {
		t.Fatalf("whole bucket: %v, want %v", got, want)
	}
	if len(f.queries) != BucketShards {
		t.Errorf("whole bucket: %d queries, want one per shard (%d)", len(f.queries), BucketShards)
	}
	keys := map[string]bool{}
	for _, q := range f.queries {
		keys[testenv.AttrS(q.ExpressionAttributeValues, ":bs")] = true
		if q.Limit != nil {
			t.Errorf("query without a limit has Limit %d", *q.Limit)
		}
	}
	for i := range BucketShards {
		if !keys[fmt.Sprintf("%s#%d", bucket, i)] {
			t.Errorf("shard %d of the bucket not queried", i)
		}
	}
	if len(f.scans) != 0 {
		t.Errorf("%d Scans, want 0", len(f.scans))
	}

	for _, limit := range []int{1, 2, 7} {
		f.queries = nil
		var paged []string
		pages := 0
		for after := ""; ; {
			page := queryAll(t, s, bucket, after, limit)
			pages++
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page))
			}
			paged = append(paged, page...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1]
		}
		if !slices.Equal(paged, want) {
			t.Errorf("limit %d: pages gave %v, want %v", limit, paged, want)
		}
		for _, q := range f.queries {
			if q.Limit == nil || *q.Limit < 1 || int(*q.Limit) > limit {
				t.Errorf("limit %d: a shard query with Limit %v, want 1 to %d", limit, q.Limit, limit)
			}
		}
	}
	// A limit inside the bucket, after a cursor.
	if got := queryAll(t, s, bucket, "ad_019", 10); !slices.Equal(got, want[20:30]) {
		t.Errorf("after ad_019, limit 10: %v, want %v", got, want[20:30])
	}
	if got := queryAll(t, s, "H2026-11-29T11Z", "", 5); len(got) != 0 {
		t.Errorf("another bucket: %v, want none", got)
	}
}

// TestQueryBucketReadsAboutItsPage checks that a page of 100 of a bucket
// of 10,000 rows reads a few rows per shard past the page, not 32 × 100,
// and that the page is right.
func TestQueryBucketReadsAboutItsPage(t *testing.T) {
	const bucket = "M2026-11-29T10:14Z"
	var ads []string
	for i := range 10_000 {
		ads = append(ads, fmt.Sprintf("ad_%05d", i))
	}
	idx := newFakeBucketIndex(bucket, ads)
	s := newStore(t, &fakeAPI{query: idx.query}, Options{})
	for _, c := range []struct {
		after string
		limit int
	}{{"", 100}, {"ad_04999", 1001}, {"ad_09990", 100}} {
		idx.read = 0
		got := queryAll(t, s, bucket, c.after, c.limit)
		start, _ := slices.BinarySearch(ads, c.after+"\x00")
		want := ads[start:min(start+c.limit, len(ads))]
		if !slices.Equal(got, want) {
			t.Fatalf("after %q limit %d: %d rows %v…, want %d", c.after, c.limit, len(got), got[:min(3, len(got))], len(want))
		}
		if bound := len(want) + BucketShards*shardLimit(c.limit); idx.read > bound || idx.read > 2*len(want)+4*BucketShards {
			t.Errorf("after %q limit %d: read %d rows for a page of %d", c.after, c.limit, idx.read, len(want))
		}
	}
}

func TestQueryBucketErrors(t *testing.T) {
	const bucket = "H2026-11-29T10Z"
	var ads []string
	for i := range 200 {
		ads = append(ads, fmt.Sprintf("ad_%d", i))
	}
	idx := newFakeBucketIndex(bucket, ads)
	s := newStore(t, &fakeAPI{query: idx.query}, Options{})
	stop := errors.New("stop")
	calls := 0
	if err := s.QueryBucket(context.Background(), bucket, "", 0, func(sink.Item) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("QueryBucket with a failing callback = %v after %d calls, want %v after 1", err, calls, stop)
	}
	idx.fail = bucketShardKeyOf(bucket, 5)
	calls = 0
	err := s.QueryBucket(context.Background(), bucket, "", 10, func(sink.Item) error { calls++; return nil })
	if !errors.Is(err, errShard) || !strings.Contains(err.Error(), idx.fail) || calls != 0 {
		t.Errorf("QueryBucket with a failing shard = %v after %d calls, want %v naming %s, no items", err, calls, errShard, idx.fail)
	}
}

// TestCreateTableAddedReportsWaiting: CreateTableAdded tells its waiting
// callback what is not ACTIVE yet each time it waits, and nothing once all
// is ACTIVE.
func TestCreateTableAddedReportsWaiting(t *testing.T) {
	var describes int
	var added bool
	f := (&fakeAPI{
		create: func(context.Context, *dynamodb.CreateTableInput) error {
			return sdkErr("CreateTable", 400, &types.ResourceInUseException{})
		},
		describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
			describes++
			switch {
			case !added || describes == 2: // the new index is not described at once
				return describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix", "late_ix"), nil
			case describes == 3:
				out := describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix", "late_ix", "by_bucket_shard")
				out.Table.GlobalSecondaryIndexes[2].IndexStatus = types.IndexStatusCreating
				out.Table.GlobalSecondaryIndexes[2].Backfilling = aws.Bool(true)
				return out, nil
			}
			return describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix", "late_ix", "by_bucket_shard"), nil
		},
		updateTable: func(context.Context, *dynamodb.UpdateTableInput) error { added = true; return nil },
	}).ttlOff()
	s := newStore(t, f, Options{})
	var pending []string
	got, err := s.CreateTableAdded(context.Background(), func(p string) { pending = append(pending, p) })
	if err != nil || !got {
		t.Fatalf("CreateTableAdded = %v, %v; want true, nil", got, err)
	}
	want := []string{"index by_bucket_shard: adding", "index by_bucket_shard: CREATING, backfilling"}
	if !slices.Equal(pending, want) {
		t.Errorf("waiting called with %q, want %q", pending, want)
	}
	pending = nil
	if got, err := s.CreateTableAdded(context.Background(), func(p string) { pending = append(pending, p) }); err != nil || got || len(pending) != 0 {
		t.Errorf("CreateTableAdded on an active table = %v, %v, waiting %q; want false, nil, no call", got, err, pending)
	}

	tbl := describeOut(types.TableStatusCreating, types.IndexStatusCreating, "fast_ix", "late_ix", "by_bucket_shard").Table
	if got, want := pendingString(tbl, true), "table: CREATING; index fast_ix: CREATING; index late_ix: CREATING; index by_bucket_shard: CREATING"; got != want {
		t.Errorf("pendingString of a new table = %q, want %q", got, want)
	}
}
