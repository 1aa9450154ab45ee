package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/fleet"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/windowing"
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

// kinesisReadFlags refuses a --kinesis-read and --kinesis-consumer pair
// the source would refuse at open, as a usage error before anything runs.
func kinesisReadFlags(o kinesis.Options) error {
	switch {
	case o.Read != kinesis.ReadPoll && o.Read != kinesis.ReadEFO:
		return usageError{fmt.Errorf("--kinesis-read %q: want %s or %s", o.Read, kinesis.ReadPoll, kinesis.ReadEFO)}
	case o.Read == kinesis.ReadEFO && o.Consumer == "":
		return usageError{fmt.Errorf("--kinesis-read %s needs --kinesis-consumer NAME: a consumer belongs to one job", kinesis.ReadEFO)}
	case o.Read == kinesis.ReadPoll && o.Consumer != "":
		return usageError{fmt.Errorf("--kinesis-consumer %q is only used with --kinesis-read %s", o.Consumer, kinesis.ReadEFO)}
	case o.Consumer != "" && !kinesis.ValidConsumerName(o.Consumer):
		return usageError{fmt.Errorf("--kinesis-consumer %q: want 1 to 128 letters, digits, '_', '.' or '-'", o.Consumer)}
	}
	return nil
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

Clicks whose impression is more than --horizon-ms (plus the job's
--allowance-ms) before they are put are rejected by the job as
beyond_horizon (it judges the horizon against the time Kinesis stamps a
record), and by the recount alike, so they are never counted or billed:
put warns on stderr with their number. A trace from adclick gen with its
default --start-ms now has none but its heavy tail.`

func cmdPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", putSummary, stderr)
	from := fs.String("from", "", "click file (JSON Lines, file-source format)")
	to := fs.String("to", "", "kinesis:STREAM")
	aggregate := fs.Bool("aggregate", false, "KPL-aggregate the records")
	var hz horizonFlags
	hz.register(fs, "")
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
	p, err := kinesis.NewPutter(ctx, api, stream, kinesis.PutterOptions{Aggregate: *aggregate, HorizonMs: hz.horizonMs, AllowanceMs: hz.allowanceMs})
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
	err = eachLine(in, kinesis.MaxRecordBytes, func(n int, line []byte, size int) error {
		if size == 0 {
			return nil
		}
		lines++
		if size > len(line) {
			fmt.Fprintf(stderr, "adclick put: line %d: %d bytes, more than a Kinesis record holds (%d bytes of data plus partition key): skipped\n",
				n, size, kinesis.MaxRecordBytes)
			skipped = append(skipped, n)
			return nil
		}
		err := p.Add(ctx, line, n)
		var tl *kinesis.TooLargeError
		if errors.As(err, &tl) {
			fmt.Fprintf(stderr, "adclick put: line %d: %v: skipped\n", n, tl)
			skipped = append(skipped, n)
			return nil
		}
		return err
	})
	if err == nil {
		err = p.Flush(ctx)
	}
	bar.finish()
	warnOld(stderr, "put", p.Old(), hz)
	if err != nil {
		return p.Failed(err)
	}
	fmt.Fprintf(stdout, "put %d records into %s\n", p.Sent(), stream)
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

// horizonFlags are the job's acceptance horizon and allowance, with which
// put and gen --to judge the clicks the job will reject.
type horizonFlags struct{ horizonMs, allowanceMs int64 }

func (h *horizonFlags) register(fs *flag.FlagSet, usagePrefix string) {
	fs.Int64Var(&h.horizonMs, "horizon-ms", preagg.DefaultHorizonMs, usagePrefix+"the job's acceptance horizon, ms, for the warning about clicks the job will reject")
	fs.Int64Var(&h.allowanceMs, "allowance-ms", ingest.DefaultAllowanceMs, usagePrefix+"the job's out-of-orderness allowance, ms, for the same warning")
}

// warnOld warns on stderr about the clicks the job and the recount will
// reject as beyond the horizon.
func warnOld(stderr io.Writer, cmd string, o kinesis.OldClicks, h horizonFlags) {
	if o.N == 0 {
		return
	}
	fmt.Fprintf(stderr, "adclick %s: warning: %d of %d valid clicks have an impression more than %v (horizon) + %v (allowance) before they were put "+
		"(the oldest %v before, at %s): the job logs them as beyond_horizon and counts them nowhere, and the recount rejects them too, "+
		"so they are never billed; a trace from adclick gen should keep its default --start-ms now\n",
		cmd, o.N, o.Of, time.Duration(h.horizonMs)*time.Millisecond, time.Duration(h.allowanceMs)*time.Millisecond,
		(time.Duration(o.MaxAgeMs) * time.Millisecond).Round(time.Second), time.UnixMilli(o.OldestMs).UTC().Format(time.RFC3339))
}

// putLines puts every line of each into the stream (see kinesis.Putter);
// a line too large for one record is an error. It returns the records
// written and the clicks older than the horizon among them.
func putLines(ctx context.Context, stream string, aggregate bool, h horizonFlags, each func(func([]byte) error) error) (int, kinesis.OldClicks, error) {
	api, err := newKinesisClient(ctx)
	if err != nil {
		return 0, kinesis.OldClicks{}, err
	}
	p, err := kinesis.NewPutter(ctx, api, stream, kinesis.PutterOptions{Aggregate: aggregate, HorizonMs: h.horizonMs, AllowanceMs: h.allowanceMs})
	if err != nil {
		return 0, kinesis.OldClicks{}, err
	}
	n := 0
	err = each(func(line []byte) error {
		n++
		err := p.Add(ctx, line, n)
		var tl *kinesis.TooLargeError
		if errors.As(err, &tl) {
			return fmt.Errorf("line %d: %w", n, err)
		}
		return err
	})
	if err == nil {
		err = p.Flush(ctx)
	}
	if err != nil {
		return p.Sent(), p.Old(), p.Failed(err)
	}
	return p.Sent(), p.Old(), nil
}

// rangeReadOptions returns the Kinesis options of range r of a fleet whose
// map has ranges ranges. Each range reads through an EFO consumer of its
// own (two subscriptions of one consumer take each other over). Every
// range polls every shard, and a shard serves 5 GetRecords calls per
// second to all its readers together: unless the operator gave
// --kinesis-call-interval-ms (intervalGiven), each range spaces its calls
// on a shard by ranges × the default, so that the fleet as a whole stays
// at the stream's limit instead of being throttled.
func rangeReadOptions(ko kinesis.Options, r windowing.KeyGroups, ranges int, intervalGiven bool) kinesis.Options {
	o := ko
	o.Consumer = fleet.Layout{Consumer: ko.Consumer}.ConsumerOf(r)
	if !intervalGiven && ranges > 1 {
		o.MinCallInterval = time.Duration(ranges) * ko.MinCallInterval
	}
	return o
}

// fleetConsumerRoom refuses a fleet that reads with enhanced fan-out when
// the consumers of its ranges (one per range, rangeReadOptions) do not fit
// the stream beside those registered on it, leaving room for a blue/green
// copy of the fleet: it is called by run --fleet with the job's ranges map
// before any range opens its source.
func fleetConsumerRoom(ctx context.Context, api kinesis.API, ko kinesis.Options, ranges []windowing.KeyGroups) error {
	if ko.Read != kinesis.ReadEFO {
		return nil
	}
	want := make([]string, len(ranges))
	for i, r := range ranges {
		want[i] = rangeReadOptions(ko, r, len(ranges), true).Consumer
	}
	if err := kinesis.StreamConsumerRoom(ctx, api, ko.Stream, want); err != nil {
		return fmt.Errorf("run --fleet: %d ranges read with --kinesis-read %s: %w", len(ranges), kinesis.ReadEFO, err)
	}
	return nil
}
