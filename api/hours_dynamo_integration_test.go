//go:build integration

package api

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink/dynamo"
)

// countingDynamo is the DynamoDB client, counting the Scan and Query
// requests it sends and the items they read (ScannedCount: what DynamoDB
// bills, before any filter).
type countingDynamo struct {
	*dynamodb.Client
	scans, queries, read atomic.Int64
}

func (c *countingDynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.scans.Add(1)
	out, err := c.Client.Scan(ctx, in, optFns...)
	if out != nil {
		c.read.Add(int64(out.ScannedCount))
	}
	return out, err
}

func (c *countingDynamo) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.queries.Add(1)
	out, err := c.Client.Query(ctx, in, optFns...)
	if out != nil {
		c.read.Add(int64(out.ScannedCount))
	}
	return out, err
}

// TestHourPagesOnDynamo pages through an hour of a DynamoDB table (the
// local stand-in) holding three hours of hour rows and minute rows: the
// endpoint sends no Scan, and the pages read only the hour's rows (each
// page its own, and one more to know there is a next page).
func TestHourPagesOnDynamo(t *testing.T) {
	endpoint := testenv.DynamoDB(t)
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	// Its own transport, whose idle connections the test closes: the
	// package checks that no goroutine outlives it.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &countingDynamo{Client: dynamo.NewClient(cfg, dynamo.Options{}, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.HTTPClient = &http.Client{Transport: tr}
	})}
	table := fmt.Sprintf("ad_metrics_hours_%016x", rand.Uint64())
	st, err := dynamo.New(client, dynamo.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := st.CreateTable(cctx); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		client.Client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	want := fillHours(t, st, 60) // 180 hour rows, 300 minute rows, 1 final-only row
	client.scans.Store(0)
	client.queries.Store(0)
	client.read.Store(0)

	s, err := New(rowsJob{newFakeJob(t), st}, Options{Addr: "127.0.0.1:0", SampleEvery: -1, NoOperator: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, pages := pageThrough(t, s, 25)
	if !slices.Equal(got, want) {
		t.Fatalf("ads %v, want %v", got, want)
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	if n := client.scans.Load(); n != 0 {
		t.Errorf("the hours endpoint sent %d Scans, want 0", n)
	}
	// Each page queries the 32 shards of the hour's index key, reading a
	// few rows per shard past its end, but never a row outside the hour:
	// at most the hour's 61 rows per page (a Scan would read the table's 481).
	if n := client.read.Load(); n > int64(61*pages) {
		t.Errorf("the pages read %d items, want at most %d (the hour's 61 rows per page) of the table's 481", n, 61*pages)
	}
	if n := client.queries.Load(); n < int64(pages) {
		t.Errorf("%d Queries for %d pages", n, pages)
	}
}
