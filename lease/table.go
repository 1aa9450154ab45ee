package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableWait bounds how long CreateTable waits for the table to become
// ACTIVE.
const TableWait = 5 * time.Minute

// TableInput returns the CreateTable request of a lease table: key
// lease_key (a string, HASH), on-demand billing. deploy/cloudformation's
// lease table must equal it (deploy_test.go compares them).
func TableInput(table string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
}

// CreateTable creates the lease table, or accepts an existing one after
// checking its key (an existing table's billing mode is left as the
// operator chose it), then waits until it is ACTIVE, for at most TableWait.
// It is idempotent and safe to call from several processes at once.
func CreateTable(ctx context.Context, api API, table string) error {
	_, err := api.CreateTable(ctx, TableInput(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("lease: create table %s: %w", table, err)
	}
	ctx, cancel := context.WithTimeout(ctx, TableWait)
	defer cancel()
	wait := 50 * time.Millisecond
	for checked := false; ; {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("lease: describe table %s: %w", table, err)
		}
		if out.Table == nil {
			return fmt.Errorf("lease: describe table %s: no table description", table)
		}
		if !checked {
			if err := checkSchema(out.Table); err != nil {
				return fmt.Errorf("lease: table %s exists with another schema: %w", table, err)
			}
			checked = true
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lease: table %s is not active (status %s): %w", table, out.Table.TableStatus, ctx.Err())
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// checkSchema reports every difference between t's key and a lease
// table's.
func checkSchema(t *types.TableDescription) error {
	var errs []error
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrKey || t.KeySchema[0].KeyType != types.KeyTypeHash {
		var ks []string
		for _, k := range t.KeySchema {
			ks = append(ks, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		errs = append(errs, fmt.Errorf("key schema %v, want [%s HASH]", ks, attrKey))
	}
	for _, d := range t.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == attrKey && d.AttributeType != types.ScalarAttributeTypeS {
			errs = append(errs, fmt.Errorf("attribute %s is of type %s, want S", attrKey, d.AttributeType))
		}
	}
	return errors.Join(errs...)
}
