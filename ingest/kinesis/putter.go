package kinesis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kpl"
	"github.com/adclick/adclick/preagg"
)

// Service limits of one record.
const (
	// MaxRecordBytes is the most data plus partition key of one record.
	MaxRecordBytes = 1 << 20
	// MaxPartitionKey is the longest partition key, in characters
	// (PartitionKey counts bytes, which is stricter).
	MaxPartitionKey = 256
)

// aggregateBatch is the most user records a Putter puts in one go when
// it aggregates them.
const aggregateBatch = 5000

// PartitionKey returns the partition key of a click line: its click_id
// (from c, the line decoded) when that is 1 to MaxPartitionKey bytes, else
// the hex SHA-256 of the whole line. Keyed by click id, the clicks of one
// ad spread over all shards, and a resent duplicate gets its original's
// key; the job de-duplicates by click id across shards either way.
func PartitionKey(line []byte, c *ingest.Click) string {
	if id := c.ClickID; id != "" && len(id) <= MaxPartitionKey {
		return id
	}
	h := sha256.Sum256(line)
	return hex.EncodeToString(h[:])
}

// TooLargeError is a line that cannot be put as one record.
type TooLargeError struct {
	Bytes      int  // data plus partition key
	Aggregated bool // it would fit a plain record but not a KPL-aggregated one
}

func (e *TooLargeError) Error() string {
	if e.Aggregated {
		return fmt.Sprintf("kinesis: %d bytes of data plus partition key, too large for one KPL-aggregated record (at most %d bytes with its framing)",
			e.Bytes, kpl.MaxRecordBytes)
	}
	return fmt.Sprintf("kinesis: %d bytes of data plus partition key, more than a Kinesis record holds (%d)", e.Bytes, MaxRecordBytes)
}

// OldClicks counts the valid clicks a Putter put that the job will judge
// beyond the acceptance horizon (preagg.PastHorizon against
// preagg.ArrivalJudge, the time of the put standing in for the arrival
// time Kinesis stamps): the stream logs them as beyond_horizon and counts
// them nowhere, and the recount rejects them too, so they are never billed.
type OldClicks struct {
	N        int   // old clicks
	Of       int   // valid clicks put
	OldestMs int64 // the oldest impression among the old ones, Unix ms
	MaxAgeMs int64 // how long before it was put that one was, ms
}

// PutterOptions configure a Putter. Zero fields take the defaults noted.
type PutterOptions struct {
	// Aggregate KPL-aggregates the records, up to 5,000 user records a
	// batch.
	Aggregate bool
	// HorizonMs and AllowanceMs are the job's acceptance horizon and
	// out-of-orderness allowance, for OldClicks (zero is a real allowance).
	HorizonMs, AllowanceMs int64
	// Now is the clock, read at the start and after each batch, for
	// OldClicks. Default time.Now.
	Now func() time.Time
}

// Putter puts click lines (the file-source format) into a stream in
// batches with Put: a line's "shard" value picks the stream's open shard
// (by ExplicitHashKey), the n-th distinct value the n-th shard in hash key
// order, wrapping around; its partition key is PartitionKey's. It counts
// the records confirmed written and the clicks older than the horizon.
// Not safe for concurrent use.
type Putter struct {
	api     API
	stream  string
	o       PutterOptions
	keys    []string // the open shards' starting hash keys
	shardOf map[string]int
	c       ingest.Click

	batch      []PutRecord
	batchBytes int // data plus partition keys in batch
	batchLast  int // line number of the last record in batch

	sent     int // user records confirmed written
	sentLast int // line number of the last of them

	nowMs int64 // the clock, read at each batch
	old   OldClicks
}

// NewPutter returns a Putter into stream, which must have an open shard.
func NewPutter(ctx context.Context, api API, stream string, o PutterOptions) (*Putter, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	keys, err := ShardHashKeys(ctx, api, stream)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("kinesis: stream %s has no open shard", stream)
	}
	return &Putter{api: api, stream: stream, o: o, keys: keys, shardOf: map[string]int{}, nowMs: o.Now().UnixMilli()}, nil
}

// Add queues line n of the input (numbered by the caller, for Failed),
// putting the queued records first when the batch is full: a plain batch
// is one PutRecords call, at most MaxPutEntries records and MaxPutBytes. A
// line that cannot be one record is refused with a *TooLargeError and
// changes nothing. line is copied.
func (p *Putter) Add(ctx context.Context, line []byte, n int) error {
	valid := ingest.Decode(line, &p.c) == "" && p.c.ImpressionMs > 0
	pk := PartitionKey(line, &p.c)
	idx, known := p.shardOf[p.c.Shard]
	if !known {
		idx = len(p.shardOf)
	}
	ehk := p.keys[idx%len(p.keys)]
	size := len(line) + len(pk)
	if size > MaxRecordBytes {
		return &TooLargeError{Bytes: size}
	}
	if p.o.Aggregate && size > kpl.MaxRecordBytes-1024 {
		// Near the limit: ask the aggregator whether the framing fits.
		if _, err := kpl.NewAggregator(kpl.MaxRecordBytes).Add(pk, ehk, line); err != nil {
			return &TooLargeError{Bytes: size, Aggregated: true}
		}
	}
	if !known {
		p.shardOf[p.c.Shard] = idx
	}
	full := len(p.batch) >= MaxPutEntries
	if p.o.Aggregate {
		full = len(p.batch) >= aggregateBatch
	}
	if full || p.batchBytes+size > MaxPutBytes {
		if err := p.Flush(ctx); err != nil {
			return err
		}
	}
	p.batch = append(p.batch, PutRecord{Data: append([]byte(nil), line...), PartitionKey: pk, ExplicitHashKey: ehk})
	p.batchBytes += size
	p.batchLast = n
	if valid {
		p.old.Of++
		if preagg.PastHorizon(p.c.ImpressionMs, preagg.ArrivalJudge(p.nowMs, p.o.AllowanceMs), p.o.HorizonMs) {
			p.old.N++
			if p.old.N == 1 || p.c.ImpressionMs < p.old.OldestMs {
				p.old.OldestMs, p.old.MaxAgeMs = p.c.ImpressionMs, p.nowMs-p.c.ImpressionMs
			}
		}
	}
	return nil
}

// Flush puts the queued records. Without aggregation a batch is one
// PutRecords call, so the count of records confirmed written is exact.
func (p *Putter) Flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	recs := p.batch
	if p.o.Aggregate {
		var err error
		if recs, err = Aggregate(p.batch, 0); err != nil {
			return err
		}
	}
	if err := Put(ctx, p.api, p.stream, recs); err != nil {
		return err
	}
	p.sent += len(p.batch)
	p.sentLast = p.batchLast
	p.batch, p.batchBytes = p.batch[:0], 0
	p.nowMs = p.o.Now().UnixMilli()
	return nil
}

// Sent returns the number of user records confirmed written.
func (p *Putter) Sent() int { return p.sent }

// Old returns the clicks put so far that were older than the horizon.
func (p *Putter) Old() OldClicks { return p.old }

// Failed wraps an error of Add, Flush or of reading the input with what
// was confirmed written before it.
func (p *Putter) Failed(err error) error {
	if p.sent == 0 {
		return fmt.Errorf("kinesis: no record confirmed written: %w", err)
	}
	return fmt.Errorf("kinesis: %d records confirmed written, through line %d; later lines may be partly written "+
		"(the job de-duplicates by click id, so they can be put again): %w", p.sent, p.sentLast, err)
}
