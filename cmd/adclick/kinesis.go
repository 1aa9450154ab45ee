package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/adclick/adclick/preagg"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kpl"
)

// newKinesisClient returns a Kinesis client with the SDK's retries off:
// the readers, Put and the stream setup retry themselves (see
// kinesis.NewClient).
func newKinesisClient(ctx context.Context) (*awskinesis.Client, error) {
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	return kinesis.NewClient(cfg), nil
}

// parseStartAt parses --start-at: trim_horizon, latest or an RFC 3339 time.
func parseStartAt(v string, o *kinesis.Options) error {
	switch strings.ToLower(v) {
	case "", "trim_horizon":
		o.StartAt = kinesis.StartTrimHorizon
	case "latest":
		o.StartAt = kinesis.StartLatest
	default:
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return usageError{fmt.Errorf("--start-at %q: want trim_horizon, latest or an RFC 3339 time", v)}
		}
		o.StartAt, o.StartTimestamp = kinesis.StartAtTimestamp, t
	}
	return nil
}

func streamName(to string) (string, error) {
	s, ok := strings.CutPrefix(to, "kinesis:")
	if !ok || s == "" {
		return "", usageError{fmt.Errorf("--to %q: want kinesis:STREAM", to)}
	}
	return s, nil
}

const putSummary = `Puts a click file (the file-source format) into a Kinesis stream with
PutRecords: the file's n-th distinct "shard" value goes to the stream's n-th
open shard (by ExplicitHashKey), in file order, in batches of up to 500
records, retrying only the failed entries. With --aggregate the records are
KPL-aggregated first.

Each record's partition key is the line's click_id, or the hex SHA-256 of
the line when the click_id is missing, unparseable or longer than 256 bytes.
(A producer without explicit hash keys should do the same: keyed by click
id, a hot ad's clicks spread over every shard; keyed by ad id they would all
go to one.) Blank lines are ignored, as the file source ignores them. A line
that cannot be one Kinesis record (1 MiB of data plus partition key; less
with --aggregate, for the KPL framing) is reported by its line number and
skipped; the rest is sent, and the command then exits 1. If a put fails, the
error says how many records were confirmed written, through which line.

Clicks whose impression is more than --horizon-ms before now are counted by
the stream (by event time) but rejected by the recount (arrival minus
impression beyond the horizon), so they are never billed: put warns on
stderr with their number. A trace from adclick gen with its default
--start-ms now has none but its heavy tail.`

// Kinesis limits of one record.
const (
	// maxRecordBytes is the most data plus partition key of one record.
	maxRecordBytes = 1 << 20
	// maxPartitionKey is the longest partition key, in characters (here
	// bytes, which is stricter).
	maxPartitionKey = 256
)

func cmdPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", putSummary, stderr)
	from := fs.String("from", "", "click file (JSON Lines, file-source format)")
	to := fs.String("to", "", "kinesis:STREAM")
	aggregate := fs.Bool("aggregate", false, "KPL-aggregate the records")
	horizonMs := fs.Int64("horizon-ms", preagg.DefaultHorizonMs, "the job's acceptance horizon, ms, for the warning about clicks the recount will reject")
	if err := parse(fs, args); err != nil {
		return err
	}
	stream, err := streamName(*to)
	if err != nil {
		return err
	}
	if *from == "" {
		return usageError{errors.New("--from FILE is required")}
	}
	f, err := os.Open(*from)
	if err != nil {
		return err
	}
	defer f.Close()
	api, err := newKinesisClient(ctx)
	if err != nil {
		return err
	}
	p, err := newPutter(ctx, api, stream, *aggregate, *horizonMs)
	if err != nil {
		return err
	}
	var in io.Reader = f
	var bar *progress
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		bar = newProgress(stderr, fi.Size(), "put into "+stream, "bytes")
		in = progressReader{f, bar}
	}
	var skipped []int
	lines := 0 // non-blank
	err = eachLine(in, maxRecordBytes, func(n int, line []byte, size int) error {
		if size == 0 {
			return nil
		}
		lines++
		if size > len(line) {
			fmt.Fprintf(stderr, "adclick put: line %d: %d bytes, more than a Kinesis record holds (%d bytes of data plus partition key): skipped\n",
				n, size, maxRecordBytes)
			skipped = append(skipped, n)
			return nil
		}
		err := p.add(ctx, line, n)
		var tl *tooLargeError
		if errors.As(err, &tl) {
			fmt.Fprintf(stderr, "adclick put: line %d: %v: skipped\n", n, tl)
			skipped = append(skipped, n)
			return nil
		}
		return err
	})
	if err == nil {
		err = p.flush(ctx)
	}
	bar.finish()
	warnOld(stderr, "put", p.old, *horizonMs)
	if err != nil {
		return p.failed(err)
	}
	fmt.Fprintf(stdout, "put %d records into %s\n", p.sent, stream)
	if len(skipped) > 0 {
		return fmt.Errorf("skipped %d of %d lines, too large for one Kinesis record (lines %s); the other %d were sent",
			len(skipped), lines, lineList(skipped, 20), lines-len(skipped))
	}
	return nil
}

// lineList formats line numbers, the first max of them and a count of the
// rest.
func lineList(ns []int, max int) string {
	var b strings.Builder
	for i, n := range ns {
		if i == max {
			fmt.Fprintf(&b, " and %d more", len(ns)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// eachLine calls fn for each line of r, numbered from 1, without its "\n" or
// "\r\n". size is the line's length; at most limit+2 bytes of it are kept, so
// when size > len(line) the line was cut and only its start is given. A
// blank line has size 0. line is valid until fn returns.
func eachLine(r io.Reader, limit int, fn func(n int, line []byte, size int) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	for n := 1; ; n++ {
		buf = buf[:0]
		size := 0
		var last, prev byte // the line's last two bytes read
		var err error
		for {
			var frag []byte
			frag, err = br.ReadSlice('\n')
			if len(frag) > 0 {
				size += len(frag)
				if len(frag) >= 2 {
					prev = frag[len(frag)-2]
				} else {
					prev = last
				}
				last = frag[len(frag)-1]
				if room := limit + 2 - len(buf); room > 0 {
					buf = append(buf, frag[:min(len(frag), room)]...)
				}
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return fmt.Errorf("read line %d: %w", n, err)
		}
		if size == 0 {
			return nil // end of input, after a final "\n" or none
		}
		if last == '\n' {
			size--
			if size > 0 && prev == '\r' {
				size--
			}
		}
		if err := fn(n, buf[:min(size, len(buf))], size); err != nil {
			return err
		}
		if eof {
			return nil // a last line without "\n"
		}
	}
}

// partitionKey returns the partition key of a click line: its click_id
// (from c, the line decoded) when that is 1 to maxPartitionKey bytes, else
// the hex SHA-256 of the whole line. Keyed by click id, the clicks of one
// ad spread over all shards, and a resent duplicate gets its original's
// key; the job de-duplicates by click id across shards either way.
func partitionKey(line []byte, c *ingest.Click) string {
	if id := c.ClickID; id != "" && len(id) <= maxPartitionKey {
		return id
	}
	h := sha256.Sum256(line)
	return hex.EncodeToString(h[:])
}

// tooLargeError is a line that cannot be put as one Kinesis record.
type tooLargeError struct {
	bytes      int  // data plus partition key
	aggregated bool // it would fit a plain record but not a KPL-aggregated one
}

func (e *tooLargeError) Error() string {
	if e.aggregated {
		return fmt.Sprintf("%d bytes of data plus partition key, too large for one KPL-aggregated record (at most %d bytes with its framing)",
			e.bytes, kpl.MaxRecordBytes)
	}
	return fmt.Sprintf("%d bytes of data plus partition key, more than a Kinesis record holds (%d)", e.bytes, maxRecordBytes)
}

// putter puts click lines into a stream in batches, mapping the lines'
// shard values to the stream's shards in order of first appearance, and
// counts the records confirmed written. Not safe for concurrent use.
type putter struct {
	api       kinesis.API
	stream    string
	aggregate bool
	keys      []string // the open shards' starting hash keys
	shardOf   map[string]int
	c         ingest.Click

	batch      []kinesis.PutRecord
	batchBytes int // data plus partition keys in batch
	batchLast  int // line number of the last record in batch

	sent     int // user records confirmed written
	sentLast int // line number of the last of them

	horizonMs int64
	nowMs     int64 // the clock, read at each batch
	old       oldClicks
}

// oldClicks counts the clicks put whose impression was more than the
// horizon before they were put: the recount rejects them.
type oldClicks struct {
	n, of    int   // old clicks, of the valid ones
	oldestMs int64 // the oldest impression among them
	maxAgeMs int64 // now - oldestMs when it was seen
}

// warnOld warns on stderr about the clicks the recount will reject.
func warnOld(stderr io.Writer, cmd string, o oldClicks, horizonMs int64) {
	if o.n == 0 {
		return
	}
	fmt.Fprintf(stderr, "adclick %s: warning: %d of %d valid clicks have an impression more than %v before they were put "+
		"(the oldest %v before, at %s): the stream counts them by event time, but the recount rejects them as beyond the horizon, "+
		"so they are never billed; a trace from adclick gen should keep its default --start-ms now\n",
		cmd, o.n, o.of, time.Duration(horizonMs)*time.Millisecond, (time.Duration(o.maxAgeMs) * time.Millisecond).Round(time.Second),
		time.UnixMilli(o.oldestMs).UTC().Format(time.RFC3339))
}

// aggregateBatch is the most user records put in one go with --aggregate.
const aggregateBatch = 5000

func newPutter(ctx context.Context, api kinesis.API, stream string, aggregate bool, horizonMs int64) (*putter, error) {
	keys, err := kinesis.ShardHashKeys(ctx, api, stream)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("stream %s has no open shard", stream)
	}
	return &putter{api: api, stream: stream, aggregate: aggregate, keys: keys, shardOf: map[string]int{},
		horizonMs: horizonMs, nowMs: time.Now().UnixMilli()}, nil
}

// add queues line n of the input, putting the queued records first when
// the batch is full. A line that cannot be one record is refused with a
// *tooLargeError and changes nothing.
func (p *putter) add(ctx context.Context, line []byte, n int) error {
	valid := ingest.Decode(line, &p.c) == "" && p.c.ImpressionMs > 0
	pk := partitionKey(line, &p.c)
	idx, known := p.shardOf[p.c.Shard]
	if !known {
		idx = len(p.shardOf)
	}
	ehk := p.keys[idx%len(p.keys)]
	size := len(line) + len(pk)
	if size > maxRecordBytes {
		return &tooLargeError{bytes: size}
	}
	if p.aggregate && size > kpl.MaxRecordBytes-1024 {
		// Near the limit: ask the aggregator whether the framing fits.
		if _, err := kpl.NewAggregator(kpl.MaxRecordBytes).Add(pk, ehk, line); err != nil {
			return &tooLargeError{bytes: size, aggregated: true}
		}
	}
	if !known {
		p.shardOf[p.c.Shard] = idx
	}
	full := len(p.batch) >= kinesis.MaxPutEntries
	if p.aggregate {
		full = len(p.batch) >= aggregateBatch
	}
	if full || p.batchBytes+size > kinesis.MaxPutBytes {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	p.batch = append(p.batch, kinesis.PutRecord{Data: append([]byte(nil), line...), PartitionKey: pk, ExplicitHashKey: ehk})
	p.batchBytes += size
	p.batchLast = n
	if valid {
		p.old.of++
		if age := p.nowMs - p.c.ImpressionMs; age > p.horizonMs {
			p.old.n++
			if p.old.n == 1 || p.c.ImpressionMs < p.old.oldestMs {
				p.old.oldestMs, p.old.maxAgeMs = p.c.ImpressionMs, age
			}
		}
	}
	return nil
}

// flush puts the queued records. Without --aggregate a batch is one
// PutRecords call (at most MaxPutEntries records and MaxPutBytes), so the
// count of records confirmed written is exact.
func (p *putter) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	recs := p.batch
	if p.aggregate {
		var err error
		if recs, err = kinesis.Aggregate(p.batch, 0); err != nil {
			return err
		}
	}
	if err := kinesis.Put(ctx, p.api, p.stream, recs); err != nil {
		return err
	}
	p.sent += len(p.batch)
	p.sentLast = p.batchLast
	p.batch, p.batchBytes = p.batch[:0], 0
	p.nowMs = time.Now().UnixMilli()
	return nil
}

// failed wraps a put or read error with what was written before it.
func (p *putter) failed(err error) error {
	if p.sent == 0 {
		return fmt.Errorf("no record confirmed written: %w", err)
	}
	return fmt.Errorf("%d records confirmed written, through line %d; later lines may be partly written "+
		"(the job de-duplicates by click id, so they can be put again): %w", p.sent, p.sentLast, err)
}

// putLines puts every line of each into the stream (see putter); a line
// too large for one record is an error. It returns the records written and
// the clicks older than the horizon among them.
func putLines(ctx context.Context, stream string, aggregate bool, horizonMs int64, each func(func([]byte) error) error) (int, oldClicks, error) {
	api, err := newKinesisClient(ctx)
	if err != nil {
		return 0, oldClicks{}, err
	}
	p, err := newPutter(ctx, api, stream, aggregate, horizonMs)
	if err != nil {
		return 0, oldClicks{}, err
	}
	n := 0
	err = each(func(line []byte) error {
		n++
		err := p.add(ctx, line, n)
		var tl *tooLargeError
		if errors.As(err, &tl) {
			return fmt.Errorf("line %d: %w", n, err)
		}
		return err
	})
	if err == nil {
		err = p.flush(ctx)
	}
	if err != nil {
		return p.sent, p.old, p.failed(err)
	}
	return p.sent, p.old, nil
}
