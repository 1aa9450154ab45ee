//go:build integration

package dynamo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
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
	if got := len(out.Table.GlobalSecondaryIndexes); got != 2 {
		t.Fatalf("table has %d global secondary indexes, want 2", got)
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
