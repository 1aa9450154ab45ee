package dynamo

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink"
)

// markTable is a fake of the one fence mark item RaiseFenceMark reads and
// writes: it evaluates the two conditions RaiseFenceMark sends and applies
// its SET. meddle, if set, runs before each update is judged (another
// raise landing between the read and the write).
type markTable struct {
	mu      sync.Mutex
	item    map[string]types.AttributeValue // nil: no item
	gets    int
	updates int
	meddle  func(n int, item map[string]types.AttributeValue) map[string]types.AttributeValue
}

func (m *markTable) api() *fakeAPI {
	return &fakeAPI{
		get: func(_ context.Context, in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.gets++
			if !*in.ConsistentRead {
				return nil, errors.New("test: the mark item must be read consistently")
			}
			return &dynamodb.GetItemOutput{Item: maps.Clone(m.item)}, nil
		},
		update: func(_ context.Context, in *dynamodb.UpdateItemInput) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.updates++
			if m.meddle != nil {
				m.item = m.meddle(m.updates, m.item)
			}
			v, versioned := m.item[attrMarkVersion]
			switch cond := *in.ConditionExpression; cond {
			case "attribute_not_exists(#v)":
				if versioned {
					return sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{})
				}
			case "#v = :v":
				if !versioned || v.(*types.AttributeValueMemberN).Value != in.ExpressionAttributeValues[":v"].(*types.AttributeValueMemberN).Value {
					return sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{})
				}
			default:
				return errors.New("test: unexpected condition " + cond)
			}
			if m.item == nil {
				m.item = map[string]types.AttributeValue{}
			}
			for _, a := range strings.Split(strings.TrimPrefix(*in.UpdateExpression, "SET "), ", ") {
				name, ph, _ := strings.Cut(a, " = ")
				if n, ok := in.ExpressionAttributeNames[name]; ok {
					name = n
				}
				m.item[name] = in.ExpressionAttributeValues[ph]
			}
			return nil
		},
	}
}

// marksItem returns a mark item of version v with fence f for key groups
// [from, to).
func marksItem(v int64, from, to int, f int64) map[string]types.AttributeValue {
	it := map[string]types.AttributeValue{attrEntity: str(FenceMarkEntity), attrBucket: str("g1"), attrMarkVersion: num(v)}
	for kg := from; kg < to; kg++ {
		it[markAttr(kg)] = num(f)
	}
	return it
}

// TestRaiseFenceMarkReadsAgainAfterAConflict: a raise whose conditional
// write meets another raise's (ConditionalCheckFailed on the version)
// reads the item again and judges the marks it finds then.
func TestRaiseFenceMarkReadsAgainAfterAConflict(t *testing.T) {
	cases := []struct {
		name string
		// before is the item before the raise of [16, 32) to fence 2;
		// meddle what lands before the first update.
		before  map[string]types.AttributeValue
		meddle  map[string]types.AttributeValue
		ahead   *sink.FenceAheadError
		marks   map[int]int64
		version int64
		gets    int
		updates int
	}{
		{name: "new item", marks: marksOfRange(16, 32, 2), version: 1, gets: 1, updates: 1},
		{name: "disjoint raise first", meddle: marksItem(1, 0, 16, 5),
			marks: merge(marksOfRange(0, 16, 5), marksOfRange(16, 32, 2)), version: 2, gets: 2, updates: 2},
		{name: "overlapping higher raise first", before: marksItem(3, 0, 8, 1), meddle: marksItem(4, 0, 32, 9),
			ahead: &sink.FenceAheadError{Gen: 1, KeyGroup: 16, Mark: 9, Fence: 2}, marks: marksOfRange(0, 32, 9), version: 4, gets: 2, updates: 1},
		{name: "marked already", before: marksItem(7, 0, 128, 2), marks: marksOfRange(0, 128, 2), version: 7, gets: 1, updates: 0},
		{name: "an item without a version", before: map[string]types.AttributeValue{markAttr(3): num(1)},
			marks: merge(marksOfRange(3, 4, 1), marksOfRange(16, 32, 2)), version: 1, gets: 1, updates: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &markTable{item: c.before}
			if c.meddle != nil {
				m.meddle = func(n int, it map[string]types.AttributeValue) map[string]types.AttributeValue {
					if n == 1 {
						return c.meddle
					}
					return it
				}
			}
			s := newStore(t, m.api(), fastRetry)
			err := s.RaiseFenceMark(context.Background(), 1, 16, 32, 2)
			var ahead *sink.FenceAheadError
			switch {
			case c.ahead == nil && err != nil:
				t.Fatalf("RaiseFenceMark = %v, want nil", err)
			case c.ahead != nil && !errors.As(err, &ahead):
				t.Fatalf("RaiseFenceMark = %v, want a *sink.FenceAheadError", err)
			case c.ahead != nil && *ahead != *c.ahead:
				t.Fatalf("refusal %+v, want %+v", *ahead, *c.ahead)
			}
			marks, version, _, err := s.readMarks(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(marks, c.marks) || version != c.version {
				t.Errorf("marks %v version %d, want %v version %d", marks, version, c.marks, c.version)
			}
			if m.gets-1 != c.gets || m.updates != c.updates {
				t.Errorf("%d reads and %d updates, want %d and %d", m.gets-1, m.updates, c.gets, c.updates)
			}
		})
	}
}

// TestRaiseFenceMarkGivesUp: a raise whose every write meets another's
// gives up after maxMarkAttempts with an error that is no refusal.
func TestRaiseFenceMarkGivesUp(t *testing.T) {
	m := &markTable{meddle: func(n int, _ map[string]types.AttributeValue) map[string]types.AttributeValue {
		return marksItem(int64(1000+n), 0, 1, 1) // always a new version
	}}
	err := newStore(t, m.api(), fastRetry).RaiseFenceMark(context.Background(), 1, 16, 32, 2)
	var ahead *sink.FenceAheadError
	if err == nil || errors.As(err, &ahead) || !strings.Contains(err.Error(), "changed under each of 64 attempts") {
		t.Fatalf("RaiseFenceMark = %v, want an error after %d attempts", err, maxMarkAttempts)
	}
	if m.updates != maxMarkAttempts {
		t.Errorf("%d updates, want %d", m.updates, maxMarkAttempts)
	}
}

// TestScanSkipsFenceMarks: Scan hands out rows only, also a row of an ad
// whose id is the mark items' entity.
func TestScanSkipsFenceMarks(t *testing.T) {
	row := sink.Key{Entity: FenceMarkEntity, Bucket: "H2026-11-29T10Z"}
	f := &fakeAPI{scan: func(context.Context, *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
		return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{
			marksItem(3, 0, 16, 4),
			keyOf(k1),
			keyOf(row),
			{attrEntity: str(FenceMarkEntity), attrBucket: str("g2"), attrMarkVersion: num(1)},
		}}, nil
	}}
	var got []sink.Key
	if err := newStore(t, f, fastRetry).Scan(context.Background(), func(it sink.Item) error { got = append(got, it.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []sink.Key{k1, row}; !slices.Equal(got, want) {
		t.Fatalf("Scan gave %v, want %v", got, want)
	}
}

func marksOfRange(from, to int, f int64) map[int]int64 {
	out := map[int]int64{}
	for kg := from; kg < to; kg++ {
		out[kg] = f
	}
	return out
}

func merge(a, b map[int]int64) map[int]int64 {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
