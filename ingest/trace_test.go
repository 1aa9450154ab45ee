package ingest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// genLines returns the lines of NewGen(o), each with its "\n".
func genLines(o GenOptions) string {
	var b strings.Builder
	g := NewGen(o)
	for {
		line, _, ok := g.Next(nil)
		if !ok {
			return b.String()
		}
		b.Write(line)
		b.WriteByte('\n')
	}
}

// TestWriteTrace: the trace is the generator's lines, one a line, and
// progress is called before the first line and every 4,096 lines.
func TestWriteTrace(t *testing.T) {
	for _, clicks := range []int64{1, 4096, 10_000} {
		o := GenOptions{Clicks: clicks, Seed: 3}
		var out bytes.Buffer
		var calls []int64
		n, err := WriteTrace(&out, o, func(n int64) error { calls = append(calls, n); return nil })
		if err != nil {
			t.Fatalf("%d clicks: %v", clicks, err)
		}
		if n != clicks {
			t.Errorf("%d clicks: got %d lines written, want %d", clicks, n, clicks)
		}
		if got, want := out.String(), genLines(o); got != want {
			t.Errorf("%d clicks: the trace (%d bytes) differs from the generator's lines (%d bytes)", clicks, len(got), len(want))
		}
		var want []int64
		for i := int64(0); i < clicks; i += 4096 {
			want = append(want, i)
		}
		if clicks%4096 == 0 {
			want = append(want, clicks) // the check before the line after the last
		}
		if !slices.Equal(calls, want) {
			t.Errorf("%d clicks: progress got %v, want %v", clicks, calls, want)
		}
	}
	// Without a progress function.
	var out bytes.Buffer
	if n, err := WriteTrace(&out, GenOptions{Clicks: 50}, nil); err != nil || n != 50 || strings.Count(out.String(), "\n") != 50 {
		t.Errorf("nil progress: got %d lines (%d newlines), %v; want 50", n, strings.Count(out.String(), "\n"), err)
	}
}

// TestWriteTraceStopped: an error of progress ends an unbounded trace
// with what was written flushed; a failing writer's error is returned.
func TestWriteTraceStopped(t *testing.T) {
	stop := errors.New("stop")
	var out bytes.Buffer
	n, err := WriteTrace(&out, GenOptions{}, func(n int64) error {
		if n >= 3*4096 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3*4096 {
		t.Fatalf("got %d, %v; want %d lines and the progress error", n, err, 3*4096)
	}
	if got := strings.Count(out.String(), "\n"); int64(got) != n || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("got %d complete lines flushed, want %d", got, n)
	}

	n, err = WriteTrace(failingWriter{}, GenOptions{Clicks: 100_000}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "ingest: write trace: ") || !errors.Is(err, errDiskFull) {
		t.Errorf("failing writer: got %d, %v; want an ingest: write trace error wrapping the writer's", n, err)
	}
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }
