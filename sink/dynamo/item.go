package dynamo

import (
	"crypto/sha256"
	"encoding/binary"
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
	attrFence  = "wf" // the fence of the last tagged write (sink.Item.Fence)

	attrFinalValid = "final_valid"
	attrFinalSpend = "final_spend_micros"
	attrFinalGen   = "final_gen"
	attrFinalAt    = "final_at"
)

// TTLAttribute is the attribute DynamoDB's TTL deletes rows by: expires_at,
// a number of Unix seconds (sink.Retention.ExpiresAt). decodeItem ignores
// it; no sink.Item carries it.
const TTLAttribute = "expires_at"

// BucketIndex is the global secondary index by bucket shard: key
// bucket_shard (HASH, BucketShardAttribute) + entity (RANGE), projecting ALL
// attributes. QueryBucket reads it, one query per shard.
const BucketIndex = "by_bucket_shard"

// BucketShardAttribute is the attribute BucketIndex is keyed by:
// BucketShardKey(bucket, entity), "<bucket>#<n>". Every write that can create
// a row sets it (the same value on every write of the row). decodeItem
// ignores it; no sink.Item carries it.
const BucketShardAttribute = "bucket_shard"

// BucketShards is the number of shards of a bucket in BucketIndex, S.
// It is part of the data contract, like BucketShard's hash: stored rows
// carry "<bucket>#<n>" with n < BucketShards, and QueryBucket queries
// exactly these S keys. Changing either means rewriting bucket_shard on
// every row (see Store.BackfillBucketShards).
//
// Why 32: one index partition key takes about 1,000 writes a second, and
// every ad's row of a minute (or hour) is written in a burst when the
// watermark closes it; 32 shards take about 32,000 a second per bucket,
// and a page of QueryBucket costs 32 small queries.
const BucketShards = 32

// BucketShard returns the shard of entity (the ad id) in BucketIndex: the
// first four bytes of SHA-256(entity), big-endian, mod BucketShards. It
// depends on the entity only, so an ad's rows of every bucket share a
// shard number. It is stable across releases: stored keys depend on it.
func BucketShard(entity string) int {
	sum := sha256.Sum256([]byte(entity))
	return int(binary.BigEndian.Uint32(sum[:4]) % BucketShards)
}

// BucketShardKey returns "<bucket>#<n>", the BucketIndex partition key of
// the row of entity in bucket.
func BucketShardKey(bucket, entity string) string {
	return bucketShardKeyOf(bucket, BucketShard(entity))
}

func bucketShardKeyOf(bucket string, shard int) string {
	return bucket + "#" + strconv.Itoa(shard)
}

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
	if it.Fence, _, err = getN(av, attrFence); err != nil {
		return it, err
	}
	for _, w := range sink.TaggedWriters {
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
