package ingest

import (
	"bufio"
	"fmt"
	"io"
)

// traceProgressEvery is the number of lines WriteTrace writes between two
// calls of its progress function.
const traceProgressEvery = 4096

// WriteTrace writes the lines of NewGen(o) to w, each ended by "\n": a trace
// in the file-source format (JSON Lines), in arrival order. Writes to w are
// buffered (1 MiB) and flushed before WriteTrace returns; w is not closed.
// It returns the number of lines written.
//
// progress, if not nil, is called with the number of lines written so far
// before the first line and then every 4,096 lines. An error it returns
// stops the trace: what was written is flushed, and WriteTrace returns the
// count and that error as it is (a caller stops a long generation on Ctrl-C
// this way). With o.Clicks 0 the generator is unbounded, and only progress
// or w ends the trace.
func WriteTrace(w io.Writer, o GenOptions, progress func(n int64) error) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	g := NewGen(o)
	var buf []byte
	var n int64
	for ; ; n++ {
		if progress != nil && n%traceProgressEvery == 0 {
			if err := progress(n); err != nil {
				if ferr := bw.Flush(); ferr != nil {
					return n, fmt.Errorf("ingest: write trace: %w", ferr)
				}
				return n, err
			}
		}
		line, _, ok := g.Next(buf[:0])
		if !ok {
			break
		}
		buf = append(line, '\n')
		if _, err := bw.Write(buf); err != nil {
			return n, fmt.Errorf("ingest: write trace: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("ingest: write trace: %w", err)
	}
	return n, nil
}
