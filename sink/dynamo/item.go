package dynamo

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink"
)

// Attribute names of the ad_metrics table.
const (
	attrEntity = "entity"
	attrBucket = "bucket"
	attrJobGen = "job_gen"

	attrFinalValid = "final_valid"
	attrFinalSpend = "final_spend_micros"
	attrFinalGen   = "final_gen"
	attrFinalAt    = "final_at"
)

// writerAttrs are the attribute names of one tagged writer.
type writerAttrs struct {
	valid, spend, ckpt, ix, gen string
}

func (a writerAttrs) all() []string { return []string{a.valid, a.spend, a.ckpt, a.ix, a.gen} }

func attrsOf(w sink.Writer) writerAttrs {
	p := w.String()
	return writerAttrs{valid: p + "_valid", spend: p + "_spend_micros", ckpt: p + "_ckpt", ix: p + "_ix", gen: p + "_gen"}
}

// indexName returns the name of w's tag index (the GSI), which is also the
// name of its hash-key attribute.
func indexName(w sink.Writer) string { return w.String() + "_ix" }

func keyOf(k sink.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrEntity: &types.AttributeValueMemberS{Value: k.Entity},
		attrBucket: &types.AttributeValueMemberS{Value: k.Bucket},
	}
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// decodeItem turns a DynamoDB item into a sink.Item. Unknown attributes are
// ignored; a known attribute of the wrong type is an error.
func decodeItem(av map[string]types.AttributeValue) (sink.Item, error) {
	var it sink.Item
	var err error
	if it.Entity, _, err = getS(av, attrEntity); err != nil {
		return it, err
	}
	if it.Bucket, _, err = getS(av, attrBucket); err != nil {
		return it, err
	}
	if it.JobGen, it.HasJobGen, err = getN(av, attrJobGen); err != nil {
		return it, err
	}
	for _, w := range []sink.Writer{sink.Fast, sink.Late} {
		a, t := attrsOf(w), it.Attrs(w)
		var p [5]bool
		if t.Valid, p[0], err = getN(av, a.valid); err != nil {
			return it, err
		}
		if t.SpendMicros, p[1], err = getN(av, a.spend); err != nil {
			return it, err
		}
		if t.Ckpt, p[2], err = getN(av, a.ckpt); err != nil {
			return it, err
		}
		if t.Ix, p[3], err = getS(av, a.ix); err != nil {
			return it, err
		}
		if t.Gen, p[4], err = getN(av, a.gen); err != nil {
			return it, err
		}
		t.Present = p[0] || p[1] || p[2] || p[3] || p[4]
	}
	f := &it.Final
	var p [4]bool
	if f.Valid, p[0], err = getN(av, attrFinalValid); err != nil {
		return it, err
	}
	if f.SpendMicros, p[1], err = getN(av, attrFinalSpend); err != nil {
		return it, err
	}
	if f.Gen, p[2], err = getN(av, attrFinalGen); err != nil {
		return it, err
	}
	if f.AtMs, p[3], err = getN(av, attrFinalAt); err != nil {
		return it, err
	}
	f.Present = p[0] || p[1] || p[2] || p[3]
	return it, nil
}

func getS(av map[string]types.AttributeValue, name string) (string, bool, error) {
	v, ok := av[name]
	if !ok {
		return "", false, nil
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return "", false, fmt.Errorf("dynamo: attribute %s is %T, want a string", name, v)
	}
	return s.Value, true, nil
}

func getN(av map[string]types.AttributeValue, name string) (int64, bool, error) {
	v, ok := av[name]
	if !ok {
		return 0, false, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, fmt.Errorf("dynamo: attribute %s is %T, want a number", name, v)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("dynamo: attribute %s: %w", name, err)
	}
	return i, true, nil
}
