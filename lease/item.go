package lease

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attributes of a lease item.
const (
	attrKey        = "lease_key"   // S, the table's key: Options.Key()
	attrOwner      = "owner"       // S, the holder; absent when the lease is free
	attrCounter    = "counter"     // N, raised by every take, renewal and release
	attrRenewedAt  = "renewed_at"  // S, RFC 3339 wall clock of the last write; informational only
	attrDurationMs = "duration_ms" // N, the holder's Duration in ms: a taker watches at least this long
	attrJob        = "job"         // S, for operators
	attrFrom       = "kg_from"     // N, for operators
	attrTo         = "kg_to"       // N, for operators
	attrLastOwner  = "last_owner"  // S, the holder before a takeover or release, for operators
)

// item is a lease item as read.
type item struct {
	exists     bool
	owner      string // "" when free
	counter    int64
	renewedAt  time.Time // zero if absent or unreadable
	durationMs int64
}

// free reports whether the lease may be taken without watching: there is
// no item, or its owner released it.
func (it item) free() bool { return !it.exists || it.owner == "" }

// decodeItem reads the attributes Acquire and the renewal need. A missing
// item gives exists false.
func decodeItem(av map[string]types.AttributeValue) (item, error) {
	if len(av) == 0 {
		return item{}, nil
	}
	it := item{exists: true}
	if v, ok := av[attrOwner]; ok {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return item{}, fmt.Errorf("attribute %s is not a string", attrOwner)
		}
		it.owner = s.Value
	}
	n, ok := av[attrCounter].(*types.AttributeValueMemberN)
	if !ok {
		return item{}, fmt.Errorf("no numeric attribute %s", attrCounter)
	}
	c, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || c < 0 {
		return item{}, fmt.Errorf("attribute %s %q is not a count", attrCounter, n.Value)
	}
	it.counter = c
	if s, ok := av[attrRenewedAt].(*types.AttributeValueMemberS); ok {
		it.renewedAt, _ = time.Parse(time.RFC3339Nano, s.Value) // informational
	}
	if n, ok := av[attrDurationMs].(*types.AttributeValueMemberN); ok {
		it.durationMs, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	return it, nil
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func wallString(t time.Time) types.AttributeValue { return avS(t.UTC().Format(time.RFC3339Nano)) }

// The conditional writes. Each one sets the counter to an absolute value
// (:n), under a condition naming the counter the writer read (:c), so that
// of any two writers that read the same counter at most one succeeds.
const (
	// condCreate: no item yet.
	condCreate = "attribute_not_exists(#k)"
	// condFree: the item is released and unchanged since it was read.
	condFree = "attribute_not_exists(#o) AND #c = :c"
	// condHeld: the item is held by :o (the taker's watched holder, or this
	// holder itself) and unchanged since it was read.
	condHeld = "#o = :o AND #c = :c"

	updTake     = "SET #o = :me, #c = :n, #r = :r, #d = :d, #j = :j, #f = :f, #t = :t"
	updTakeover = updTake + ", #lo = :o"
	updRenew    = "SET #c = :n, #r = :r, #d = :d"
	updRelease  = "SET #c = :n, #r = :r, #lo = :me REMOVE #o"
)

// names are the expression attribute names every write uses a subset of.
func names(expr ...string) map[string]string {
	all := map[string]string{"#k": attrKey, "#o": attrOwner, "#c": attrCounter, "#r": attrRenewedAt, "#d": attrDurationMs,
		"#j": attrJob, "#f": attrFrom, "#t": attrTo, "#lo": attrLastOwner}
	out := map[string]string{}
	for ph, name := range all {
		for _, e := range expr {
			if containsToken(e, ph) {
				out[ph] = name
			}
		}
	}
	return out
}

// containsToken reports whether the placeholder ph occurs in e as a whole
// token (#c must not match inside #cx).
func containsToken(e, ph string) bool {
	for i := 0; i+len(ph) <= len(e); i++ {
		if e[i:i+len(ph)] != ph {
			continue
		}
		end := i + len(ph)
		if end == len(e) || !isNameChar(e[end]) {
			return true
		}
	}
	return false
}

func isNameChar(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// update builds one conditional UpdateItem on the lease item.
func (l *Lease) update(cond, upd string, values map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	vals := map[string]types.AttributeValue{}
	for k, v := range values {
		if containsToken(cond, k) || containsToken(upd, k) {
			vals[k] = v
		}
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 aws.String(l.o.Table),
		Key:                       map[string]types.AttributeValue{attrKey: avS(l.key)},
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String(upd),
		ExpressionAttributeNames:  names(cond, upd),
		ExpressionAttributeValues: vals,
	}
	if len(vals) == 0 {
		in.ExpressionAttributeValues = nil
	}
	return in
}

// takeValues are the values of a take (a claim of a free lease or a
// takeover): this owner, the counter read (:c) and the next (:n), the
// watched holder (:o), and the attributes for operators.
func (l *Lease) takeValues(read, next int64, holder string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":me": avS(l.o.Owner), ":c": avN(read), ":n": avN(next), ":o": avS(holder),
		":r": wallString(l.o.Clock.Wall()), ":d": avN(l.o.Duration.Milliseconds()),
		":j": avS(l.o.Job), ":f": avN(int64(l.o.KeyGroupFrom)), ":t": avN(int64(l.o.KeyGroupTo)),
	}
}
