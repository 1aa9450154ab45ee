//go:build integration

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/internal/testenv"
)

// TestSetupCreatesBucketIndex checks that adclick setup creates the rows
// table with the bucket index GET /v1/hours/{hour} queries (bucket_shard
// HASH + entity RANGE, all attributes), idempotently, and that it reports the
// TTL: the local stand-in has none, which setup says instead of failing.
func TestSetupCreatesBucketIndex(t *testing.T) {
	c := testenv.DynamoDBClient(t)
	table := fmt.Sprintf("setup_ix_%d", time.Now().UnixNano())
	for range 2 { // idempotent
		out, errOut := runBoth(t, 0, "setup", "--sink", "dynamodb:"+table)
		if want := "table " + table + " ready (indexes fast_ix, late_ix, by_bucket_shard"; !strings.Contains(string(out), want) {
			t.Errorf("setup printed %q, want %q", out, want)
		}
		if !strings.Contains(string(errOut), "TTL of table "+table+" is DISABLED") {
			t.Errorf("setup's stderr %q does not say that the stand-in's TTL is off", errOut)
		}
	}
	d, err := c.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, g := range d.Table.GlobalSecondaryIndexes {
		if aws.ToString(g.IndexName) != "by_bucket_shard" {
			continue
		}
		found = true
		var ks []string
		for _, k := range g.KeySchema {
			ks = append(ks, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		if got := strings.Join(ks, ", "); got != "bucket_shard HASH, entity RANGE" {
			t.Errorf("by_bucket_shard key %s, want bucket_shard HASH, entity RANGE", got)
		}
		if g.Projection == nil || g.Projection.ProjectionType != "ALL" {
			t.Errorf("by_bucket_shard projection %+v, want ALL", g.Projection)
		}
	}
	if !found {
		t.Fatalf("table %s has no index by_bucket_shard: %d indexes", table, len(d.Table.GlobalSecondaryIndexes))
	}
}
