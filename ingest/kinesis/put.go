package kinesis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest/kpl"
)

// Service limits of PutRecords.
const (
	MaxPutEntries = 500     // entries per call
	MaxPutBytes   = 5 << 20 // data plus partition keys per call, bytes
)

// PutRecord is one record to put. ExplicitHashKey (a decimal 128-bit
// number) picks the shard directly; empty means the MD5 of PartitionKey.
type PutRecord struct {
	Data            []byte
	PartitionKey    string
	ExplicitHashKey string
}

// PutOptions tunes Put. Zero fields take the defaults noted.
type PutOptions struct {
	// MaxAttempts bounds the calls per batch, the first included. Default 10.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the jittered backoff between
	// attempts. Defaults 100 ms and 5 s.
	BackoffBase, BackoffMax time.Duration
}

// Put puts recs with default PutOptions; see PutWith.
func Put(ctx context.Context, api API, stream string, recs []PutRecord) error {
	return PutWith(ctx, api, stream, recs, PutOptions{})
}

// PutWith puts recs into stream with PutRecords, in batches of at most
// MaxPutEntries entries and MaxPutBytes bytes, in order. Entries that fail
// (throttled or an internal error) are retried alone, with jittered
// backoff, up to MaxAttempts calls per batch; a retried entry can land
// after later entries of its shard. A throttled or failed call is retried
// the same way; a fatal error (no such stream, bad request) is returned at
// once.
func PutWith(ctx context.Context, api API, stream string, recs []PutRecord, o PutOptions) error {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffBase {
		o.BackoffMax = max(5*time.Second, o.BackoffBase)
	}
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n < MaxPutEntries {
			sz := len(recs[n].Data) + len(recs[n].PartitionKey)
			if n > 0 && size+sz > MaxPutBytes {
				break
			}
			size += sz
			n++
		}
		if err := putBatch(ctx, api, stream, recs[:n], o); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

func putBatch(ctx context.Context, api API, stream string, recs []PutRecord, o PutOptions) error {
	entries := make([]types.PutRecordsRequestEntry, len(recs))
	for i, r := range recs {
		entries[i] = types.PutRecordsRequestEntry{Data: r.Data, PartitionKey: aws.String(r.PartitionKey)}
		if r.ExplicitHashKey != "" {
			entries[i].ExplicitHashKey = aws.String(r.ExplicitHashKey)
		}
	}
	var last error
	for attempt := 1; ; attempt++ {
		out, err := api.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("kinesis: put records into %s: %w", stream, ctx.Err())
			}
			if classify(err) == errFatal {
				return fmt.Errorf("kinesis: put records into %s: %w", stream, err)
			}
			last = err
		case aws.ToInt32(out.FailedRecordCount) == 0 && len(out.Records) == len(entries):
			return nil
		default:
			if len(out.Records) != len(entries) {
				return fmt.Errorf("kinesis: put records into %s: %d results for %d entries", stream, len(out.Records), len(entries))
			}
			failed := entries[:0:0]
			for i, r := range out.Records {
				if r.ErrorCode != nil {
					failed = append(failed, entries[i])
					last = fmt.Errorf("%s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				}
			}
			if len(failed) == 0 {
				return nil
			}
			entries = failed
		}
		if attempt >= o.MaxAttempts {
			return fmt.Errorf("kinesis: put records into %s: %d entries still failing after %d attempts: %w",
				stream, len(entries), attempt, last)
		}
		if !sleep(ctx, backoff(o.BackoffBase, o.BackoffMax, attempt)) {
			return fmt.Errorf("kinesis: put records into %s: %w", stream, ctx.Err())
		}
	}
}

// Aggregate packs recs into KPL aggregated records of at most maxBytes
// (≤ 0: kpl.DefaultMaxBytes). Records are grouped by ExplicitHashKey, or by
// PartitionKey when it is empty, so every aggregated record goes to the
// shard its user records would have gone to; within a group the order is
// kept, and groups are emitted in the order of their first record.
func Aggregate(recs []PutRecord, maxBytes int) ([]PutRecord, error) {
	type group struct {
		a   *kpl.Aggregator
		out []PutRecord
	}
	groups := map[string]*group{}
	var order []*group
	for _, r := range recs {
		key := "h" + r.ExplicitHashKey
		if r.ExplicitHashKey == "" {
			key = "p" + r.PartitionKey
		}
		g := groups[key]
		if g == nil {
			g = &group{a: kpl.NewAggregator(maxBytes)}
			groups[key] = g
			order = append(order, g)
		}
		full, err := g.a.Add(r.PartitionKey, r.ExplicitHashKey, r.Data)
		if err != nil {
			return nil, fmt.Errorf("kinesis: aggregate: %w", err)
		}
		if full != nil {
			g.out = append(g.out, PutRecord{Data: full.Data, PartitionKey: full.PartitionKey, ExplicitHashKey: full.ExplicitHashKey})
		}
	}
	var out []PutRecord
	for _, g := range order {
		if last := g.a.Flush(); last != nil {
			g.out = append(g.out, PutRecord{Data: last.Data, PartitionKey: last.PartitionKey, ExplicitHashKey: last.ExplicitHashKey})
		}
		out = append(out, g.out...)
	}
	return out, nil
}

// ShardHashKeys returns the starting hash key (decimal) of each open shard
// of stream, in hash key order: putting a record with the n-th key as its
// ExplicitHashKey sends it to the n-th shard.
func ShardHashKeys(ctx context.Context, api API, stream string) ([]string, error) {
	var shards []types.Shard
	err := retryCall(ctx, func() error {
		var err error
		shards, err = listShards(ctx, api, stream)
		return err
	})
	if err != nil {
		return nil, err
	}
	type key struct {
		s string
		n *big.Int
	}
	var keys []key
	for _, sh := range shards {
		if sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil {
			continue
		}
		if sh.HashKeyRange == nil {
			return nil, fmt.Errorf("kinesis: shard %s of %s has no hash key range", aws.ToString(sh.ShardId), stream)
		}
		s := aws.ToString(sh.HashKeyRange.StartingHashKey)
		n, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("kinesis: shard %s of %s: bad starting hash key %q", aws.ToString(sh.ShardId), stream, s)
		}
		keys = append(keys, key{s, n})
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Compare(a.n.Cmp(b.n), 0) })
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.s
	}
	return out, nil
}

// EnsureStream creates stream with the given number of shards if it does
// not exist (another creator winning the race is fine), and waits until it
// is ACTIVE or ctx ends. An existing stream is left as it is, whatever its
// shard count.
func EnsureStream(ctx context.Context, api API, stream string, shards int) error {
	err := retryCall(ctx, func() error {
		_, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		return err
	})
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		err = retryCall(ctx, func() error {
			_, err := api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(shards))})
			var riu *types.ResourceInUseException
			if errors.As(err, &riu) {
				return nil // another creator won the race
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("kinesis: create stream %s: %w", stream, err)
		}
	} else if err != nil {
		return fmt.Errorf("kinesis: describe stream %s: %w", stream, err)
	}
	return WaitActive(ctx, api, stream)
}

// WaitActive polls the stream's status until it is ACTIVE or ctx ends (a
// stream is UPDATING for a while after SplitShard and MergeShards).
func WaitActive(ctx context.Context, api API, stream string) error {
	wait := 50 * time.Millisecond
	for {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		var rnf *types.ResourceNotFoundException
		switch {
		case err == nil && out.StreamDescriptionSummary != nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive:
			return nil
		case err != nil && !errors.As(err, &rnf) && classify(err) == errFatal:
			return fmt.Errorf("kinesis: wait for stream %s: %w", stream, err)
		}
		if !sleep(ctx, wait) {
			return fmt.Errorf("kinesis: wait for stream %s to be active: %w", stream, ctx.Err())
		}
		wait = min(2*wait, time.Second)
	}
}
