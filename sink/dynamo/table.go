package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/adclick/adclick/sink"
)

// TableAPI is what CreateTable needs of the client beyond API: adding the
// bucket index to a table created before it existed, and turning TTL on.
// *dynamodb.Client implements it.
type TableAPI interface {
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// bucketGSI is the bucket index: bucket_shard HASH + entity RANGE,
// projecting ALL attributes (the hours endpoint shows every writer's
// attributes).
func bucketGSI() types.GlobalSecondaryIndex {
	return types.GlobalSecondaryIndex{
		IndexName: aws.String(BucketIndex),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(BucketShardAttribute), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrEntity), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}
}

func attrDefS(name string) types.AttributeDefinition {
	return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
}

// tableInput is the ad_metrics table: key entity + bucket, on-demand
// billing, the two tag indexes and the bucket index, each projecting ALL
// attributes.
func (s *Store) tableInput() *dynamodb.CreateTableInput {
	gsi := func(w sink.Writer) types.GlobalSecondaryIndex {
		return types.GlobalSecondaryIndex{
			IndexName:  aws.String(indexName(w)),
			KeySchema:  []types.KeySchemaElement{{AttributeName: aws.String(indexName(w)), KeyType: types.KeyTypeHash}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}
	}
	return &dynamodb.CreateTableInput{
		TableName: aws.String(s.o.Table),
		AttributeDefinitions: []types.AttributeDefinition{
			attrDefS(attrEntity), attrDefS(attrBucket), attrDefS(indexName(sink.Fast)), attrDefS(indexName(sink.Late)),
			attrDefS(BucketShardAttribute),
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrEntity), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrBucket), KeyType: types.KeyTypeRange},
		},
		BillingMode:            types.BillingModePayPerRequest,
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{gsi(sink.Fast), gsi(sink.Late), bucketGSI()},
	}
}

// CreateTable creates the table, or accepts an existing one after checking
// its key schema and its indexes (an existing table's billing mode is left
// as the operator chose it), adds the bucket index to a table made before
// it existed (DynamoDB then backfills it from the table's items), waits
// until the table and every index are ACTIVE, for at most
// Options.TableWait, and turns TTL on for TTLAttribute. It is idempotent
// and safe to call from several processes at once. The client must be a
// TableAPI.
//
// Rows written before BucketShardAttribute existed are missing from
// the new index until they are written again or BackfillBucketShards has
// run; CreateTable reports added = true when it added the index to an
// existing table, which is when that is needed.
//
// A local stand-in that does not implement UpdateTimeToLive (dynalite)
// leaves TTL off without an error; TTLStatus tells.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.CreateTableAdded(ctx, nil)
	return err
}

// CreateTableAdded is CreateTable, and reports whether it added BucketIndex
// to a table that existed without it (whose older rows then need
// BackfillBucketShards). If waiting is not nil, it is called each time
// CreateTableAdded finds the table or an index not ACTIVE yet, before it
// waits, with what is pending as DynamoDB describes it ("index
// by_bucket_shard: CREATING, backfilling"; "table: CREATING"), for a person
// waiting on it. It is called on the caller's goroutine.
func (s *Store) CreateTableAdded(ctx context.Context, waiting func(pending string)) (added bool, err error) {
	tapi, ok := s.api.(TableAPI)
	if !ok {
		return false, fmt.Errorf("dynamo: create table %s: the client %T cannot update tables and TTL (not a dynamo.TableAPI)", s.o.Table, s.api)
	}
	err = s.do(ctx, "create_table", func(ctx context.Context) error {
		_, err := s.api.CreateTable(ctx, s.tableInput())
		return err
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return false, fmt.Errorf("dynamo: create table %s: %w", s.o.Table, err)
	}
	if added, err = s.waitActive(ctx, tapi, waiting); err != nil {
		return added, err
	}
	return added, s.enableTTL(ctx, tapi)
}

// waitActive checks the table's schema, adds the bucket index if it is
// missing (added reports it), and waits until the table and its indexes
// are ACTIVE, calling waiting (if not nil) before each wait.
func (s *Store) waitActive(ctx context.Context, tapi TableAPI, waiting func(string)) (added bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.TableWait)
	defer cancel()
	wait := 50 * time.Millisecond
	for checked := false; ; {
		t, err := s.describe(ctx)
		if err != nil {
			return added, err
		}
		if !checked {
			if err := checkSchema(t); err != nil {
				return false, fmt.Errorf("dynamo: table %s exists with another schema: %w", s.o.Table, err)
			}
			checked = true
		}
		has := findIndex(t, BucketIndex) != nil
		if !has && !added {
			if err := s.addBucketIndex(ctx, tapi, t); err != nil {
				return false, err
			}
			added = true
			continue
		}
		if has && active(t) {
			return added, nil
		}
		if waiting != nil {
			waiting(pendingString(t, has))
		}
		if err := sleep(ctx, wait); err != nil {
			return added, fmt.Errorf("dynamo: table %s is not active (%s); a new index is built from the table's items, which takes long on a big table: run it again later: %w",
				s.o.Table, statusString(t), err)
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (s *Store) describe(ctx context.Context) (*types.TableDescription, error) {
	var out *dynamodb.DescribeTableOutput
	err := s.do(ctx, "describe_table", func(ctx context.Context) error {
		var err error
		out, err = s.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.o.Table)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dynamo: describe table %s: %w", s.o.Table, err)
	}
	if out.Table == nil {
		return nil, fmt.Errorf("dynamo: describe table %s: no table description", s.o.Table)
	}
	return out.Table, nil
}

// addBucketIndex adds the bucket index to the existing table t. A table
// with provisioned capacity gives the index the table's capacity. If the
// request fails because another process added the index meanwhile, that
// is success.
func (s *Store) addBucketIndex(ctx context.Context, tapi TableAPI, t *types.TableDescription) error {
	g := bucketGSI()
	create := &types.CreateGlobalSecondaryIndexAction{IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection}
	if bm := t.BillingModeSummary; (bm == nil || bm.BillingMode == types.BillingModeProvisioned) && t.ProvisionedThroughput != nil &&
		aws.ToInt64(t.ProvisionedThroughput.ReadCapacityUnits) > 0 {
		create.ProvisionedThroughput = &types.ProvisionedThroughput{
			ReadCapacityUnits:  t.ProvisionedThroughput.ReadCapacityUnits,
			WriteCapacityUnits: t.ProvisionedThroughput.WriteCapacityUnits,
		}
	}
	err := s.do(ctx, "update_table", func(ctx context.Context) error {
		_, err := tapi.UpdateTable(ctx, &dynamodb.UpdateTableInput{
			TableName:                   aws.String(s.o.Table),
			AttributeDefinitions:        []types.AttributeDefinition{attrDefS(BucketShardAttribute), attrDefS(attrEntity)},
			GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: create}},
		})
		return err
	})
	if err == nil {
		return nil
	}
	if t2, derr := s.describe(ctx); derr == nil && findIndex(t2, BucketIndex) != nil {
		return nil
	}
	return fmt.Errorf("dynamo: add index %s to table %s: %w", BucketIndex, s.o.Table, err)
}

// BackfillBucketShards sets BucketShardAttribute on every row that lacks
// it (a row written before it existed, so missing from BucketIndex) and
// returns how many it set. It scans the whole table (a filter on the
// attribute's absence: DynamoDB bills every item read), so it is for a
// table that CreateTableAdded reported added = true for, once. Each write
// is conditioned on the row's existence, so it never brings back a row the
// flush deleted meanwhile; a concurrent write of the row sets the same
// value. It is idempotent and may run while the job writes. Fence mark
// items (FenceMarkEntity) are no rows and are left without the attribute.
func (s *Store) BackfillBucketShards(ctx context.Context) (int, error) {
	var start map[string]types.AttributeValue
	set := 0
	for {
		var out *dynamodb.ScanOutput
		err := s.do(ctx, "scan", func(ctx context.Context) error {
			var err error
			out, err = s.api.Scan(ctx, &dynamodb.ScanInput{
				TableName:                aws.String(s.o.Table),
				FilterExpression:         aws.String("attribute_not_exists(#bs)"),
				ProjectionExpression:     aws.String("#e, #b"),
				ExpressionAttributeNames: map[string]string{"#bs": BucketShardAttribute, "#e": attrEntity, "#b": attrBucket},
				ExclusiveStartKey:        start,
			})
			return err
		})
		if err != nil {
			return set, fmt.Errorf("dynamo: backfill %s: scan: %w", BucketShardAttribute, err)
		}
		keys := make([]sink.Key, 0, len(out.Items))
		for _, av := range out.Items {
			var k sink.Key
			if k.Entity, _, err = getS(av, attrEntity); err != nil {
				return set, fmt.Errorf("dynamo: backfill %s: %w", BucketShardAttribute, err)
			}
			if k.Bucket, _, err = getS(av, attrBucket); err != nil {
				return set, fmt.Errorf("dynamo: backfill %s: %w", BucketShardAttribute, err)
			}
			if isFenceMark(k) {
				continue // no row: it stays out of the index
			}
			keys = append(keys, k)
		}
		refused, err := s.runAll(ctx, "backfill", len(keys), func(i int) *dynamodb.UpdateItemInput {
			return &dynamodb.UpdateItemInput{
				TableName:                 aws.String(s.o.Table),
				Key:                       keyOf(keys[i]),
				UpdateExpression:          aws.String("SET #bs = :bs"),
				ConditionExpression:       aws.String("attribute_exists(#e)"),
				ExpressionAttributeNames:  map[string]string{"#bs": BucketShardAttribute, "#e": attrEntity},
				ExpressionAttributeValues: map[string]types.AttributeValue{":bs": str(BucketShardKey(keys[i].Bucket, keys[i].Entity))},
			}
		})
		if err != nil {
			return set, fmt.Errorf("dynamo: backfill %s: %w", BucketShardAttribute, err)
		}
		set += len(keys) - refused
		if len(out.LastEvaluatedKey) == 0 {
			return set, nil
		}
		start = out.LastEvaluatedKey
	}
}

// enableTTL turns on TTL for TTLAttribute unless it is on (or being turned
// on) already.
func (s *Store) enableTTL(ctx context.Context, tapi TableAPI) error {
	status, attr, err := s.ttl(ctx, tapi)
	switch {
	case errors.Is(err, errUnsupported):
		return nil
	case err != nil:
		return err
	}
	switch status {
	case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
		if attr != TTLAttribute {
			return fmt.Errorf("dynamo: table %s has TTL on attribute %q, want %q: turn it off (aws dynamodb update-time-to-live), wait until it is off, and run this again", s.o.Table, attr, TTLAttribute)
		}
		return nil
	case types.TimeToLiveStatusDisabling:
		return fmt.Errorf("dynamo: table %s: TTL is being turned off (DynamoDB takes up to an hour); run this again once it is off", s.o.Table)
	}
	err = s.do(ctx, "update_ttl", func(ctx context.Context) error {
		_, err := tapi.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName: aws.String(s.o.Table),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{
				AttributeName: aws.String(TTLAttribute),
				Enabled:       aws.Bool(true),
			},
		})
		return err
	})
	if err != nil && !unknownOperation(err) {
		return fmt.Errorf("dynamo: turn on TTL of table %s: %w", s.o.Table, err)
	}
	return nil
}

// errUnsupported reports an endpoint that does not implement an operation.
var errUnsupported = errors.New("dynamo: operation not supported by this endpoint")

func (s *Store) ttl(ctx context.Context, tapi TableAPI) (types.TimeToLiveStatus, string, error) {
	var out *dynamodb.DescribeTimeToLiveOutput
	err := s.do(ctx, "describe_ttl", func(ctx context.Context) error {
		var err error
		out, err = tapi.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.o.Table)})
		return err
	})
	if unknownOperation(err) {
		return "", "", fmt.Errorf("dynamo: describe TTL of table %s: %w", s.o.Table, errUnsupported)
	}
	if err != nil {
		return "", "", fmt.Errorf("dynamo: describe TTL of table %s: %w", s.o.Table, err)
	}
	d := out.TimeToLiveDescription
	if d == nil {
		return types.TimeToLiveStatusDisabled, "", nil
	}
	return d.TimeToLiveStatus, aws.ToString(d.AttributeName), nil
}

// TTLStatus returns the table's TTL status and attribute as DynamoDB
// describes them: ENABLED (or ENABLING) with TTLAttribute once CreateTable
// has run against AWS; DISABLED on a local stand-in without TTL.
func (s *Store) TTLStatus(ctx context.Context) (status types.TimeToLiveStatus, attribute string, err error) {
	tapi, ok := s.api.(TableAPI)
	if !ok {
		return "", "", fmt.Errorf("dynamo: TTL of table %s: the client %T is not a dynamo.TableAPI", s.o.Table, s.api)
	}
	status, attribute, err = s.ttl(ctx, tapi)
	if errors.Is(err, errUnsupported) {
		return types.TimeToLiveStatusDisabled, "", nil
	}
	return status, attribute, err
}

// unknownOperation reports the error of an endpoint that does not know the
// operation (local stand-ins; DynamoDB itself knows them all). The SDK has
// no typed error for it.
func unknownOperation(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException"
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

// statusString describes the table's and its indexes' status.
func statusString(t *types.TableDescription) string {
	s := "status " + string(t.TableStatus)
	for _, g := range t.GlobalSecondaryIndexes {
		if g.IndexStatus != types.IndexStatusActive {
			s += fmt.Sprintf("; index %s %s", aws.ToString(g.IndexName), g.IndexStatus)
			if aws.ToBool(g.Backfilling) {
				s += " (backfilling)"
			}
		}
	}
	return s
}

// pendingString describes what of the table is not ACTIVE: "table:
// CREATING", "index by_bucket_shard: CREATING, backfilling", joined by
// "; ". hasBucketIndex false (just added, not described yet) adds
// "index by_bucket_shard: adding".
func pendingString(t *types.TableDescription, hasBucketIndex bool) string {
	var parts []string
	if t.TableStatus != types.TableStatusActive {
		parts = append(parts, "table: "+string(t.TableStatus))
	}
	for _, g := range t.GlobalSecondaryIndexes {
		if g.IndexStatus != types.IndexStatusActive {
			s := fmt.Sprintf("index %s: %s", aws.ToString(g.IndexName), g.IndexStatus)
			if aws.ToBool(g.Backfilling) {
				s += ", backfilling"
			}
			parts = append(parts, s)
		}
	}
	if !hasBucketIndex {
		parts = append(parts, "index "+BucketIndex+": adding")
	}
	return strings.Join(parts, "; ")
}

func findIndex(t *types.TableDescription, name string) *types.GlobalSecondaryIndexDescription {
	for i := range t.GlobalSecondaryIndexes {
		if aws.ToString(t.GlobalSecondaryIndexes[i].IndexName) == name {
			return &t.GlobalSecondaryIndexes[i]
		}
	}
	return nil
}

// checkSchema reports every difference between t and the ad_metrics layout.
// A missing bucket index is not one: CreateTable adds it.
func checkSchema(t *types.TableDescription) error {
	var errs []error
	if !keyIs(t.KeySchema, attrEntity, attrBucket) {
		errs = append(errs, fmt.Errorf("key schema %s, want %s HASH + %s RANGE", keyString(t.KeySchema), attrEntity, attrBucket))
	}
	for _, w := range sink.TaggedWriters {
		name := indexName(w)
		found := findIndex(t, name)
		switch {
		case found == nil:
			errs = append(errs, fmt.Errorf("no global secondary index %s", name))
		case !keyIs(found.KeySchema, name, ""):
			errs = append(errs, fmt.Errorf("index %s has key %s, want %s HASH", name, keyString(found.KeySchema), name))
		case found.Projection == nil || found.Projection.ProjectionType != types.ProjectionTypeAll:
			errs = append(errs, fmt.Errorf("index %s does not project ALL attributes", name))
		}
	}
	if found := findIndex(t, BucketIndex); found != nil {
		switch {
		case !keyIs(found.KeySchema, BucketShardAttribute, attrEntity):
			errs = append(errs, fmt.Errorf("index %s has key %s, want %s HASH + %s RANGE", BucketIndex, keyString(found.KeySchema), BucketShardAttribute, attrEntity))
		case found.Projection == nil || found.Projection.ProjectionType != types.ProjectionTypeAll:
			errs = append(errs, fmt.Errorf("index %s does not project ALL attributes", BucketIndex))
		}
	}
	for _, d := range t.AttributeDefinitions {
		switch aws.ToString(d.AttributeName) {
		case attrEntity, attrBucket, indexName(sink.Fast), indexName(sink.Late), BucketShardAttribute:
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
