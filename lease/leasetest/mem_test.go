package leasetest_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
)

// The lease item's attributes these tests write, and the table.
const (
	attrKey     = "lease_key"
	attrOwner   = "owner"
	attrCounter = "counter"
	attrRenewed = "renewed_at"
	testTable   = "leases"
)

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// newTable returns a Mem with the lease table.
func newTable(t testing.TB) *leasetest.Mem {
	t.Helper()
	m := leasetest.NewMem()
	if err := lease.CreateTable(context.Background(), m, testTable); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return m
}

// seeded returns a Mem whose table holds {k: "x", owner: "a", counter: 3}.
func seeded(t *testing.T) *leasetest.Mem {
	t.Helper()
	m := newTable(t)
	_, err := m.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")},
		UpdateExpression:          aws.String("SET #o = :o, #c = :c"),
		ExpressionAttributeNames:  map[string]string{"#o": attrOwner, "#c": attrCounter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS("a"), ":c": avN(3)},
	})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return m
}

func TestMemConditions(t *testing.T) {
	for _, tc := range []struct {
		cond string
		vals map[string]types.AttributeValue
		ok   bool
	}{
		{"attribute_exists(#o)", nil, true},
		{"attribute_not_exists(#o)", nil, false},
		{"attribute_not_exists(#m)", nil, true},
		{"#o = :v", map[string]types.AttributeValue{":v": avS("a")}, true},
		{"#o = :v", map[string]types.AttributeValue{":v": avS("b")}, false},
		{"#o <> :v", map[string]types.AttributeValue{":v": avS("b")}, true},
		{"#c = :v", map[string]types.AttributeValue{":v": avN(3)}, true},
		{"#c = :v", map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "3.0"}}, true}, // numbers compare by value
		{"#c = :v", map[string]types.AttributeValue{":v": avS("3")}, false},                                  // types differ
		{"#c < :v", map[string]types.AttributeValue{":v": avN(10)}, true},                                    // not as strings ("10" < "3")
		{"#c >= :v", map[string]types.AttributeValue{":v": avN(4)}, false},
		{"#m = :v", map[string]types.AttributeValue{":v": avN(3)}, false}, // missing attribute
		{"#o = :v AND #c = :w", map[string]types.AttributeValue{":v": avS("a"), ":w": avN(3)}, true},
		{"#o = :v AND #c = :w", map[string]types.AttributeValue{":v": avS("a"), ":w": avN(4)}, false},
		{"#o = :v OR #c = :w", map[string]types.AttributeValue{":v": avS("b"), ":w": avN(3)}, true},
		{"NOT (#o = :v) and #c = :w", map[string]types.AttributeValue{":v": avS("b"), ":w": avN(3)}, true},
		{"attribute_not_exists(#o) OR (#o = :v AND #c = :w)", map[string]types.AttributeValue{":v": avS("a"), ":w": avN(3)}, true},
	} {
		t.Run(tc.cond, func(t *testing.T) {
			m := seeded(t)
			names := map[string]string{}
			for _, ph := range []string{"#o", "#c", "#m"} {
				if regexp.MustCompile(regexp.QuoteMeta(ph) + `\b`).MatchString(tc.cond) {
					names[ph] = map[string]string{"#o": attrOwner, "#c": attrCounter, "#m": "missing"}[ph]
				}
			}
			names["#r"] = attrRenewed
			vals := map[string]types.AttributeValue{":r": avS("now")}
			for k, v := range tc.vals {
				vals[k] = v
			}
			_, err := m.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
				TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")},
				ConditionExpression: aws.String(tc.cond), UpdateExpression: aws.String("SET #r = :r"),
				ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
			})
			var ccf *types.ConditionalCheckFailedException
			switch {
			case tc.ok && err != nil:
				t.Errorf("got %v, want the update applied", err)
			case !tc.ok && !errors.As(err, &ccf):
				t.Errorf("got %v, want ConditionalCheckFailedException", err)
			}
			out, err := m.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")}})
			if err != nil {
				t.Fatal(err)
			}
			_, applied := out.Item[attrRenewed]
			if applied != tc.ok {
				t.Errorf("renewed_at present = %v, want %v", applied, tc.ok)
			}
		})
	}
}

// Mem refuses what DynamoDB refuses, with a ValidationException.
func TestMemValidation(t *testing.T) {
	key := map[string]types.AttributeValue{attrKey: avS("x")}
	for _, tc := range []struct {
		name string
		in   dynamodb.UpdateItemInput
	}{
		{"unused name", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #o = :o"),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#x": "x"}, ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS("a")}}},
		{"unused value", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #o = :o"),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner}, ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS("a"), ":x": avS("x")}}},
		{"undefined value", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #o = :o"),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner}}},
		{"empty values", dynamodb.UpdateItemInput{UpdateExpression: aws.String("REMOVE #o"),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner}, ExpressionAttributeValues: map[string]types.AttributeValue{}}},
		{"key update", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #k = :k"),
			ExpressionAttributeNames: map[string]string{"#k": attrKey}, ExpressionAttributeValues: map[string]types.AttributeValue{":k": avS("y")}}},
		{"arithmetic", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #c = #c + :one"),
			ExpressionAttributeNames: map[string]string{"#c": attrCounter}, ExpressionAttributeValues: map[string]types.AttributeValue{":one": avN(1)}}},
		{"ADD", dynamodb.UpdateItemInput{UpdateExpression: aws.String("ADD #c :one"),
			ExpressionAttributeNames: map[string]string{"#c": attrCounter}, ExpressionAttributeValues: map[string]types.AttributeValue{":one": avN(1)}}},
		{"bad condition", dynamodb.UpdateItemInput{UpdateExpression: aws.String("REMOVE #o"), ConditionExpression: aws.String("#o = "),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner}}},
		{"two actions on one attribute", dynamodb.UpdateItemInput{UpdateExpression: aws.String("SET #o = :o REMOVE #o"),
			ExpressionAttributeNames: map[string]string{"#o": attrOwner}, ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS("a")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seeded(t)
			in := tc.in
			in.TableName, in.Key = aws.String(testTable), key
			_, err := m.UpdateItem(context.Background(), &in)
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
				t.Errorf("got %v, want a ValidationException", err)
			}
		})
	}
}

func TestMemTables(t *testing.T) {
	ctx := context.Background()
	m := leasetest.NewMem()
	_, err := m.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("nope"), Key: map[string]types.AttributeValue{attrKey: avS("x")}})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("GetItem on a missing table: got %v, want ResourceNotFoundException", err)
	}
	if _, err := m.CreateTable(ctx, lease.TableInput(testTable)); err != nil {
		t.Fatal(err)
	}
	_, err = m.CreateTable(ctx, lease.TableInput(testTable))
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Errorf("second CreateTable: got %v, want ResourceInUseException", err)
	}
	out, err := m.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(testTable)})
	if err != nil || out.Table.TableStatus != types.TableStatusActive || out.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("DescribeTable = %+v, %v; want an ACTIVE on-demand table", out, err)
	}
	// A returned item is a copy.
	if _, err := m.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")},
		UpdateExpression: aws.String("SET o = :o"), ExpressionAttributeValues: map[string]types.AttributeValue{":o": avS("a")}}); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		out, err := m.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")}})
		if err != nil {
			t.Fatal(err)
		}
		s := out.Item["o"].(*types.AttributeValueMemberS)
		v := s.Value
		s.Value = "changed"
		return v
	}
	if get() != "a" || get() != "a" {
		t.Error("changing a returned item changed the stored one")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")}}); !errors.Is(err, context.Canceled) {
		t.Errorf("GetItem with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestMemBeginsWith(t *testing.T) {
	for _, tc := range []struct {
		cond string
		ok   bool
	}{
		{"begins_with(#o, :p)", true},
		{"begins_with(#o, :q)", false},
		{"begins_with(#c, :p)", false}, // a number
		{"begins_with(#m, :p)", false}, // missing
		{"NOT begins_with(#o, :q)", true},
	} {
		t.Run(tc.cond, func(t *testing.T) {
			m := seeded(t)
			names := map[string]string{"#r": attrRenewed}
			for _, ph := range []string{"#o", "#c", "#m"} {
				if regexp.MustCompile(regexp.QuoteMeta(ph) + `\b`).MatchString(tc.cond) {
					names[ph] = map[string]string{"#o": attrOwner, "#c": attrCounter, "#m": "missing"}[ph]
				}
			}
			vals := map[string]types.AttributeValue{":r": avS("now")}
			for ph, v := range map[string]string{":p": "a", ":q": "b"} {
				if regexp.MustCompile(regexp.QuoteMeta(ph) + `\b`).MatchString(tc.cond) {
					vals[ph] = avS(v)
				}
			}
			_, err := m.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
				TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("x")},
				ConditionExpression: aws.String(tc.cond), UpdateExpression: aws.String("SET #r = :r"),
				ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
			})
			if (err == nil) != tc.ok {
				t.Errorf("got %v, want applied = %v", err, tc.ok)
			}
		})
	}
}
