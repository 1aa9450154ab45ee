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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/lease"
)

// TestSetupCreatesLeaseTable checks that adclick setup creates the lease
// table next to the rows table (TABLE-leases), or the one --lease-table
// names, idempotently, with the key the lease package uses.
func TestSetupCreatesLeaseTable(t *testing.T) {
	c := testenv.DynamoDBClient(t)
	table := fmt.Sprintf("setup_%d", time.Now().UnixNano())
	for range 2 { // idempotent
		out := string(run(t, 0, "setup", "--sink", "dynamodb:"+table))
		if want := "lease table " + table + "-leases ready"; !strings.Contains(out, want) {
			t.Errorf("setup printed %q, want a line %q", out, want)
		}
	}
	custom := table + "-custom-leases"
	run(t, 0, "setup", "--lease-table", custom)
	for _, name := range []string{lease.DefaultTable(table), custom} {
		d, err := c.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			t.Fatalf("describe %s: %v", name, err)
		}
		ks := d.Table.KeySchema
		if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "lease_key" || ks[0].KeyType != types.KeyTypeHash {
			t.Errorf("%s: key schema %+v, want lease_key HASH", name, ks)
		}
		// The table works as a lease table.
		l, err := lease.Acquire(context.Background(), c, lease.Options{Table: name, Job: "setup-test"})
		if err != nil {
			t.Fatalf("Acquire on %s: %v", name, err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("Release on %s: %v", name, err)
		}
	}
}
