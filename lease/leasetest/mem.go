package leasetest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Mem is an in-memory API: DynamoDB tables with a hash key (no range key),
// with DynamoDB's semantics for what a lease uses.
//   - CreateTable makes a table ACTIVE at once; ResourceInUseException if
//     it exists.
//   - DescribeTable; ResourceNotFoundException for a missing table, as
//     for every other call.
//   - GetItem is always consistent.
//   - UpdateItem creates the item if missing, evaluates the condition on
//     the item as stored (an empty one if missing) and applies SET and
//     REMOVE actions atomically, or fails with a
//     ConditionalCheckFailedException. Expressions follow the grammar in
//     expr.go; unsupported syntax, undefined or unused placeholders and
//     updates of the key fail with a ValidationException, as DynamoDB's.
//     ReturnValues may be NONE, ALL_NEW (the item as written) or ALL_OLD
//     (the item before, nothing for a new one).
//   - Scan is always consistent and returns items in the order of their
//     key values; Limit bounds the items evaluated (before the
//     FilterExpression, as in DynamoDB), and a page that stops at the limit
//     carries LastEvaluatedKey, from which ExclusiveStartKey resumes. The
//     1 MB page limit is not modelled.
//
// It is the lease table of the tests (lease.API and lease.RangeAPI, as
// lease's tests check), the in-process twin of DynamoDB beside sinktest's
// and kinesistest's. Safe for concurrent use; it honours a cancelled ctx.
type Mem struct {
	mu     sync.Mutex
	tables map[string]*memTable
}

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

type memTable struct {
	desc  types.TableDescription
	hash  string
	items map[string]map[string]types.AttributeValue // by hash key value
}

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{tables: map[string]*memTable{}} }

func validation(format string, args ...any) error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

func notFound(table string) error {
	return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: Table: " + table + " not found")}
}

// table returns the table named in, or the error DynamoDB gives.
func (m *Mem) table(name *string) (*memTable, error) {
	t, ok := m.tables[aws.ToString(name)]
	if !ok {
		return nil, notFound(aws.ToString(name))
	}
	return t, nil
}

// CreateTable creates a table with one HASH key.
func (m *Mem) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := aws.ToString(in.TableName)
	if !tableName.MatchString(name) {
		return nil, validation("invalid table name %q", name)
	}
	if len(in.KeySchema) != 1 || in.KeySchema[0].KeyType != types.KeyTypeHash {
		return nil, validation("mem: only tables with exactly one HASH key are supported")
	}
	hash := aws.ToString(in.KeySchema[0].AttributeName)
	defined := false
	for _, d := range in.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == hash {
			defined = true
		}
	}
	if !defined || len(in.AttributeDefinitions) != 1 {
		return nil, validation("attribute definitions must define exactly the key attribute %s", hash)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.tables[name]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("Table already exists: " + name)}
	}
	billing := in.BillingMode
	if billing == "" {
		billing = types.BillingModeProvisioned
	}
	t := &memTable{hash: hash, items: map[string]map[string]types.AttributeValue{}, desc: types.TableDescription{
		TableName:            aws.String(name),
		TableStatus:          types.TableStatusActive,
		KeySchema:            append([]types.KeySchemaElement(nil), in.KeySchema...),
		AttributeDefinitions: append([]types.AttributeDefinition(nil), in.AttributeDefinitions...),
		BillingModeSummary:   &types.BillingModeSummary{BillingMode: billing},
		CreationDateTime:     aws.Time(time.Now()),
	}}
	m.tables[name] = t
	d := t.describe()
	d.TableStatus = types.TableStatusCreating
	return &dynamodb.CreateTableOutput{TableDescription: &d}, nil
}

func (t *memTable) describe() types.TableDescription {
	d := t.desc
	d.ItemCount = aws.Int64(int64(len(t.items)))
	return d
}

// DescribeTable describes a table.
func (m *Mem) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	d := t.describe()
	return &dynamodb.DescribeTableOutput{Table: &d}, nil
}

// keyOf returns the stored form of key, which must hold exactly the hash
// attribute, a string or a number.
func (t *memTable) keyOf(key map[string]types.AttributeValue) (string, types.AttributeValue, error) {
	v, ok := key[t.hash]
	if len(key) != 1 || !ok {
		return "", nil, validation("the provided key element does not match the schema")
	}
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		if x.Value == "" {
			return "", nil, validation("the key attribute %s is an empty string", t.hash)
		}
		return "S" + x.Value, v, nil
	case *types.AttributeValueMemberN:
		return "N" + x.Value, v, nil
	}
	return "", nil, validation("mem: key attribute %s must be a string or a number", t.hash)
}

// GetItem returns the item at the key (every read is consistent).
func (m *Mem) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in.ProjectionExpression != nil || in.AttributesToGet != nil {
		return nil, validation("mem: projections are not supported")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	k, _, err := t.keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	it, ok := t.items[k]
	if !ok {
		return &dynamodb.GetItemOutput{}, nil
	}
	return &dynamodb.GetItemOutput{Item: copyItem(it)}, nil
}

// UpdateItem applies SET and REMOVE actions to the item at the key (creating
// it), if the condition holds.
func (m *Mem) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in.AttributeUpdates != nil || in.Expected != nil {
		return nil, validation("mem: legacy parameters are not supported")
	}
	switch in.ReturnValues {
	case "", types.ReturnValueNone, types.ReturnValueAllNew, types.ReturnValueAllOld:
	default:
		return nil, validation("mem: ReturnValues %s is not supported", in.ReturnValues)
	}
	env, err := newExprEnv(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	if err != nil {
		return nil, err
	}
	cond, err := env.optionalCondition(in.ConditionExpression, "ConditionExpression")
	if err != nil {
		return nil, err
	}
	acts, err := parseUpdate(aws.ToString(in.UpdateExpression), env)
	if err != nil {
		return nil, validation("invalid UpdateExpression: %v", err)
	}
	if err := env.unused(); err != nil {
		return nil, validation("%v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	k, kv, err := t.keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	for _, a := range acts {
		if a.path == t.hash {
			return nil, validation("cannot update attribute %s: it is part of the key", a.path)
		}
	}
	cur, exists := t.items[k]
	if !exists {
		cur = map[string]types.AttributeValue{}
	}
	if cond != nil && !cond(cur) {
		return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	}
	next := copyItem(cur)
	next[t.hash] = copyValue(kv)
	for _, a := range acts {
		if !a.set {
			delete(next, a.path)
			continue
		}
		v, ok := a.source.eval(cur) // every operand reads the item as it was
		if !ok {
			return nil, validation("the provided expression refers to an attribute that does not exist in the item")
		}
		next[a.path] = copyValue(v)
	}
	t.items[k] = next
	out := &dynamodb.UpdateItemOutput{}
	switch in.ReturnValues {
	case types.ReturnValueAllNew:
		out.Attributes = copyItem(next)
	case types.ReturnValueAllOld:
		if exists {
			out.Attributes = copyItem(cur)
		}
	}
	return out, nil
}

// Scan returns the table's items that pass the FilterExpression, a page of
// at most Limit evaluated items at a time.
func (m *Mem) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case in.IndexName != nil:
		return nil, validation("mem: indexes are not supported")
	case in.Segment != nil || in.TotalSegments != nil:
		return nil, validation("mem: parallel scans are not supported")
	case in.ProjectionExpression != nil || in.AttributesToGet != nil:
		return nil, validation("mem: projections are not supported")
	case in.ScanFilter != nil || in.ConditionalOperator != "":
		return nil, validation("mem: legacy parameters are not supported")
	case in.Select != "" && in.Select != types.SelectAllAttributes:
		return nil, validation("mem: Select %s is not supported", in.Select)
	case in.Limit != nil && *in.Limit < 1:
		return nil, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1", *in.Limit)
	}
	env, err := newExprEnv(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	if err != nil {
		return nil, err
	}
	filter, err := env.optionalCondition(in.FilterExpression, "FilterExpression")
	if err != nil {
		return nil, err
	}
	if err := env.unused(); err != nil {
		return nil, validation("%v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	after := ""
	if in.ExclusiveStartKey != nil {
		k, _, err := t.keyOf(in.ExclusiveStartKey)
		if err != nil {
			return nil, validation("The provided starting key is invalid: %v", err)
		}
		after = k
	}
	keys := make([]string, 0, len(t.items))
	for k := range t.items {
		if k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := &dynamodb.ScanOutput{}
	for i, k := range keys {
		if in.Limit != nil && int32(i) == *in.Limit {
			break
		}
		it := t.items[k]
		out.ScannedCount++
		if in.Limit != nil && out.ScannedCount == *in.Limit {
			out.LastEvaluatedKey = map[string]types.AttributeValue{t.hash: copyValue(it[t.hash])}
		}
		if filter == nil || filter(it) {
			out.Items = append(out.Items, copyItem(it))
			out.Count++
		}
	}
	return out, nil
}

func copyItem(it map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		out[k] = copyValue(v)
	}
	return out
}

// copyValue deep-copies v, so that neither a caller's later change to its
// input nor to a returned item reaches what is stored.
func copyValue(v types.AttributeValue) types.AttributeValue {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: x.Value}
	case *types.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: x.Value}
	case *types.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: x.Value}
	case *types.AttributeValueMemberNULL:
		return &types.AttributeValueMemberNULL{Value: x.Value}
	case *types.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: append([]byte(nil), x.Value...)}
	case *types.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: append([]string(nil), x.Value...)}
	case *types.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: append([]string(nil), x.Value...)}
	case *types.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(x.Value))
		for i, e := range x.Value {
			l[i] = copyValue(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: copyItem(x.Value)}
	}
	return v
}

// newExprEnv checks a request's expression attribute names and values as
// DynamoDB does (either, if present, must not be empty) and returns the
// environment its expressions are parsed in.
func newExprEnv(names map[string]string, values map[string]types.AttributeValue) (*exprEnv, error) {
	if names != nil && len(names) == 0 || values != nil && len(values) == 0 {
		return nil, validation("ExpressionAttributeNames and ExpressionAttributeValues must not be empty")
	}
	return &exprEnv{names: names, values: values, usedNames: map[string]bool{}, usedVals: map[string]bool{}}, nil
}

// optionalCondition parses the condition expression expr (nil: none, and
// a nil condition), what naming it in a validation error.
func (env *exprEnv) optionalCondition(expr *string, what string) (condFn, error) {
	if expr == nil {
		return nil, nil
	}
	c, err := parseCondition(*expr, env)
	if err != nil {
		return nil, validation("invalid %s: %v", what, err)
	}
	return c, nil
}
