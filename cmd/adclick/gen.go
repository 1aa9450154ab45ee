package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/adclick/adclick/ingest"
)

const genSummary = `Writes a synthetic click file in the file-source format (JSON Lines: the
click fields plus "shard" and "arrival_ms"), in arrival order, with late,
out-of-order, duplicate, invalid and clock-skewed clicks. The same flags give
the same file.`

func cmdGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen", genSummary, stderr)
	o := ingest.GenOptions{Clicks: 100_000}
	out := fs.String("out", "-", "output file (- = standard output)")
	to := fs.String("to", "", "put the trace into kinesis:STREAM instead of writing a file")
	aggregate := fs.Bool("aggregate", false, "with --to: KPL-aggregate the records")
	fs.Int64Var(&o.StartMs, "start-ms", 1_795_946_400_000, "arrival time of the first click, Unix ms (default 2026-11-29T10:00:00Z)")
	genFlags(fs, &o, "")
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.Clicks <= 0 {
		return usageError{fmt.Errorf("--clicks must be positive for a file")}
	}
	if *to != "" {
		stream, err := streamName(*to)
		if err != nil {
			return err
		}
		g := ingest.NewGen(o)
		n, err := putLines(ctx, stream, *aggregate, func(fn func([]byte) error) error {
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
			}
			return ctx.Err()
		})
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
	bw := bufio.NewWriterSize(w, 1<<20)
	g := ingest.NewGen(o)
	var buf []byte
	for n := 0; ; n++ {
		// Ctrl-C and SIGTERM stop a long generation (what was written is
		// flushed, and the command says it was interrupted).
		if n%4096 == 0 && ctx.Err() != nil {
			if err := bw.Flush(); err != nil {
				return err
			}
			return fmt.Errorf("interrupted after %d clicks: %w", n, ctx.Err())
		}
		line, _, ok := g.Next(buf[:0])
		if !ok {
			break
		}
		buf = append(line, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func bufioWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 1<<20) }
