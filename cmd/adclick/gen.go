package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/adclick/adclick/ingest"
)

const genSummary = `Writes a synthetic click file in the file-source format (JSON Lines: the
click fields plus "shard" and "arrival_ms"), in arrival order, with late,
out-of-order, duplicate, invalid and clock-skewed clicks.

By default (--start-ms now) the trace ends now: its first click arrives
clicks/rate seconds ago, its last about now. So a trace put into a stream
right away is counted and recounted like live traffic: no impression lies
after its arrival in the stream, and only the heavy tail is beyond the
horizon (a click whose impression is more than the horizon, 2 h, plus the
allowance before its arrival is rejected, by the job and the recount). The same flags with an explicit --start-ms (Unix ms)
give the same file: use one for a reproducible trace.`

// startMs is the --start-ms flag: "now" (the trace ends at the current
// time) or the Unix ms of the first arrival.
type startMs struct {
	ms  int64
	now bool
}

func (s *startMs) String() string {
	if s == nil || s.now {
		return "now"
	}
	return strconv.FormatInt(s.ms, 10)
}

func (s *startMs) Set(v string) error {
	if v == "now" {
		*s = startMs{now: true}
		return nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return errors.New("want now or a positive Unix time in ms")
	}
	*s = startMs{ms: ms}
	return nil
}

// resolve returns the arrival time of the first of o's clicks: for "now",
// the current time less the trace's length (o.Clicks at o.Rate per second
// of arrival time).
func (s *startMs) resolve(o ingest.GenOptions) int64 {
	if !s.now {
		return s.ms
	}
	rate := o.Rate
	if rate <= 0 {
		rate = 2000 // the generator's default
	}
	return time.Now().UnixMilli() - int64(float64(o.Clicks)*1000/rate)
}

func cmdGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen", genSummary, stderr)
	o := ingest.GenOptions{Clicks: 100_000}
	out := fs.String("out", "-", "output file (- = standard output)")
	to := fs.String("to", "", "put the trace into kinesis:STREAM instead of writing a file")
	aggregate := fs.Bool("aggregate", false, "with --to: KPL-aggregate the records")
	var hz horizonFlags
	hz.register(fs, "with --to: ")
	start := startMs{now: true}
	fs.Var(&start, "start-ms", "arrival time of the first click, Unix ms (1795946400000 is 2026-11-29T10:00:00Z), for a reproducible trace; now = the trace ends at the current time")
	genFlags(fs, &o, "")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.Clicks <= 0 {
		return usageError{fmt.Errorf("--clicks must be positive for a file")}
	}
	o.StartMs = start.resolve(o)
	if *to != "" {
		stream, err := streamName(*to)
		if err != nil {
			return err
		}
		g := ingest.NewGen(o)
		bar := newProgress(stderr, o.Clicks, "gen: put into "+stream, "clicks")
		n, old, err := putLines(ctx, stream, *aggregate, hz, func(fn func([]byte) error) error {
			var buf []byte
			for ctx.Err() == nil {
				line, _, ok := g.Next(buf[:0])
				if !ok {
					return nil
				}
				buf = line
				if err := fn(line); err != nil {
					return err
				}
				bar.add(1)
			}
			return ctx.Err()
		})
		bar.finish()
		warnOld(stderr, "gen", old, hz)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "put %d records into %s\n", n, stream)
		return nil
	}
	var w io.Writer = stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bar := newProgress(stderr, o.Clicks, "gen", "clicks")
	defer bar.finish()
	_, err := ingest.WriteTrace(w, o, func(n int64) error {
		// Ctrl-C and SIGTERM stop a long generation (what was written is
		// flushed, and the command says it was interrupted).
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted after %d clicks: %w", n, err)
		}
		bar.set(n)
		return nil
	})
	return err
}
