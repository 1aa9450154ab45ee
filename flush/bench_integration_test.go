//go:build integration

package flush

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/dynamo"
)

// dynaliteStore creates a fresh ad_metrics table on the local DynamoDB
// stand-in and deletes it when b ends.
func dynaliteStore(b *testing.B) *dynamo.Store {
	b.Helper()
	endpoint := testenv.DynamoDB(b)
	// An HTTP transport of our own, whose idle connections are closed at
	// the end, so that no connection goroutine outlives the benchmark.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = dynamo.DefaultMaxInFlight
	b.Cleanup(tr.CloseIdleConnections)
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		b.Fatalf("load AWS config: %v", err)
	}
	o := dynamo.Options{Table: fmt.Sprintf("ad_metrics_bench_%016x", rand.Uint64())}
	client := dynamo.NewClient(cfg, o, func(do *dynamodb.Options) {
		do.BaseEndpoint = aws.String(endpoint)
		do.HTTPClient = &http.Client{Transport: tr}
	})
	s, err := dynamo.New(client, o)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.CreateTable(ctx); err != nil {
		b.Fatalf("create table: %v", err)
	}
	b.Cleanup(func() {
		if _, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(o.Table)}); err != nil {
			b.Errorf("delete table %s: %v", o.Table, err)
		}
	})
	return s
}

// BenchmarkFlushDynamo measures the full flush against the local DynamoDB
// stand-in: K minute items tagged with epochs 41..43 (written after
// checkpoint 41) are removed out of a table that also holds 5,000 items
// tagged before it, which the flush never reads. Each operation is one
// flush; the K items are written again, untimed, before each.
func BenchmarkFlushDynamo(b *testing.B) {
	const old = 5_000
	for _, k := range []int{100, 1000} {
		b.Run(fmt.Sprintf("items=%d", k), func(b *testing.B) {
			rows := dynaliteStore(b)
			seedOld(b, rows, old)
			ctx := context.Background()
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				var puts []sink.Put
				for i := range k {
					key := sink.Key{Entity: fmt.Sprintf("new_%d", i/60), Bucket: sink.MinuteBucket(int64(i%60) * 60_000)}
					puts = append(puts, sink.Put{Key: key, Writer: sink.Fast, Valid: 1, Epoch: int64(41 + i%3), Gen: 7})
				}
				mustPut(b, rows, puts...)
				b.StartTimer()
				start := time.Now()
				rep, err := Full(ctx, rows, nil, newRestored(), nil, Options{Restored: 41, High: 43, Gen: 7, WritesPerSec: math.Inf(1)})
				total += time.Since(start)
				if err != nil || rep.ItemsDeleted != k || rep.ItemsScanned != k {
					b.Fatalf("flush: %+v, %v; want %d items scanned and deleted", rep, err, k)
				}
			}
			per := total.Seconds() / float64(b.N)
			b.ReportMetric(per, "s/flush")
			b.ReportMetric(float64(k)/per, "items/s")
			b.Logf("items=%d of %d: %.3f s per flush, %.0f items/s", k, k+old, per, float64(k)/per)
		})
	}
}
