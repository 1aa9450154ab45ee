package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink"
)

// tableInput is the ad_metrics table: key entity + bucket, on-demand
// billing, and the two tag indexes projecting ALL attributes.
func (s *Store) tableInput() *dynamodb.CreateTableInput {
	gsi := func(w sink.Writer) types.GlobalSecondaryIndex {
		return types.GlobalSecondaryIndex{
			IndexName:  aws.String(indexName(w)),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(indexName(w)), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}
	}
	s4 := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	return &dynamodb.CreateTableInput{
		TableName: aws.String(s.o.Table),
		AttributeDefinitions: []types.AttributeDefinition{
			s4(attrEntity), s4(attrBucket), s4(indexName(sink.Fast)), s4(indexName(sink.Late)),
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrEntity), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrBucket), KeyType: types.KeyTypeRange},
		},
		BillingMode:            types.BillingModePayPerRequest,
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{gsi(sink.Fast), gsi(sink.Late)},
	}
}

// CreateTable creates the table, or accepts an existing one after checking
// its key schema and its two tag indexes (an existing table's billing mode
// is left as the operator chose it), then waits until the table and both
// indexes are ACTIVE, for at most Options.TableWait. It is idempotent and
// safe to call from several processes at once.
func (s *Store) CreateTable(ctx context.Context) error {
	err := s.do(ctx, "create_table", func(ctx context.Context) error {
		_, err := s.api.CreateTable(ctx, s.tableInput())
		return err
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamo: create table %s: %w", s.o.Table, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.TableWait)
	defer cancel()
	wait := 50 * time.Millisecond
	for checked := false; ; {
		var out *dynamodb.DescribeTableOutput
		err := s.do(ctx, "describe_table", func(ctx context.Context) error {
			var err error
			out, err = s.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.o.Table)})
			return err
		})
		if err != nil {
			return fmt.Errorf("dynamo: describe table %s: %w", s.o.Table, err)
		}
		if out.Table == nil {
			return fmt.Errorf("dynamo: describe table %s: no table description", s.o.Table)
		}
		if !checked {
			if err := checkSchema(out.Table); err != nil {
				return fmt.Errorf("dynamo: table %s exists with another schema: %w", s.o.Table, err)
			}
			checked = true
		}
		if active(out.Table) {
			return nil
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("dynamo: table %s is not active (status %s): %w", s.o.Table, out.Table.TableStatus, err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func active(t *types.TableDescription) bool {
	if t.TableStatus != types.TableStatusActive {
		return false
	}
	for _, g := range t.GlobalSecondaryIndexes {
		if g.IndexStatus != types.IndexStatusActive {
			return false
		}
	}
	return true
}

// checkSchema reports every difference between t and the ad_metrics layout.
func checkSchema(t *types.TableDescription) error {
	var errs []error
	if !keyIs(t.KeySchema, attrEntity, attrBucket) {
		errs = append(errs, fmt.Errorf("key schema %s, want %s HASH + %s RANGE", keyString(t.KeySchema), attrEntity, attrBucket))
	}
	for _, w := range []sink.Writer{sink.Fast, sink.Late} {
		name := indexName(w)
		var found *types.GlobalSecondaryIndexDescription
		for i := range t.GlobalSecondaryIndexes {
			if aws.ToString(t.GlobalSecondaryIndexes[i].IndexName) == name {
				found = &t.GlobalSecondaryIndexes[i]
			}
		}
		switch {
		case found == nil:
			errs = append(errs, fmt.Errorf("no global secondary index %s", name))
		case !keyIs(found.KeySchema, name, ""):
			errs = append(errs, fmt.Errorf("index %s has key %s, want %s HASH", name, keyString(found.KeySchema), name))
		case found.Projection == nil || found.Projection.ProjectionType != types.ProjectionTypeAll:
			errs = append(errs, fmt.Errorf("index %s does not project ALL attributes", name))
		}
	}
	for _, d := range t.AttributeDefinitions {
		switch aws.ToString(d.AttributeName) {
		case attrEntity, attrBucket, indexName(sink.Fast), indexName(sink.Late):
			if d.AttributeType != types.ScalarAttributeTypeS {
				errs = append(errs, fmt.Errorf("attribute %s is of type %s, want S", aws.ToString(d.AttributeName), d.AttributeType))
			}
		}
	}
	return errors.Join(errs...)
}

// keyIs reports whether ks is hash (HASH) plus, if rng is not empty, rng
// (RANGE).
func keyIs(ks []types.KeySchemaElement, hash, rng string) bool {
	want := 1
	if rng != "" {
		want = 2
	}
	if len(ks) != want {
		return false
	}
	for _, k := range ks {
		name := aws.ToString(k.AttributeName)
		switch {
		case k.KeyType == types.KeyTypeHash && name == hash:
		case k.KeyType == types.KeyTypeRange && rng != "" && name == rng:
		default:
			return false
		}
	}
	return true
}

func keyString(ks []types.KeySchemaElement) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += " "
		}
		s += aws.ToString(k.AttributeName) + " " + string(k.KeyType)
	}
	return s + "]"
}
