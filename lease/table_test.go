package lease

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/lease/leasetest"
)

// The in-process twin is a lease table.
var (
	_ API      = (*leasetest.Mem)(nil)
	_ RangeAPI = (*leasetest.Mem)(nil)
)

func TestCreateTable(t *testing.T) {
	ctx := context.Background()
	m := leasetest.NewMem()
	for i := range 2 { // idempotent
		if err := CreateTable(ctx, m, testTable); err != nil {
			t.Fatalf("CreateTable #%d: %v", i+1, err)
		}
	}
	other := &dynamodb.CreateTableInput{
		TableName:            aws.String("other"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}
	if _, err := m.CreateTable(ctx, other); err != nil {
		t.Fatal(err)
	}
	err := CreateTable(ctx, m, "other")
	if err == nil || !strings.Contains(err.Error(), "exists with another schema") || !strings.Contains(err.Error(), "want [lease_key HASH]") {
		t.Errorf("CreateTable on a table with another key: got %v, want a schema error", err)
	}
}
