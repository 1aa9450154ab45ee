package source

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/ingest"
)

// Gen returns the Open of the built-in generator, paced on the real clock.
// Its position is the number of clicks routed: a restore regenerates the
// same clicks (the start time is saved too) and skips them. A zero StartMs
// starts at the clock's now.
func Gen(o ingest.GenOptions) Open {
	return func(_ context.Context, at Start) (Source, error) {
		clk := at.Clock
		if clk == nil {
			clk = clock.Real{}
		}
		var skip int64
		if v, ok := at.Positions["gen_start"]; ok {
			o.StartMs, _ = strconv.ParseInt(v, 10, 64)
			skip, _ = strconv.ParseInt(at.Positions["gen"], 10, 64)
		} else if o.StartMs == 0 {
			o.StartMs = clk.NowMs()
		}
		g := ingest.NewGen(o)
		var buf []byte
		for i := int64(0); i < skip; i++ {
			if _, _, ok := g.Next(buf[:0]); !ok {
				break
			}
		}
		return &genSource{g: g, clk: clk, start: o.StartMs, routedN: skip}, nil
	}
}

type genSource struct {
	g       *ingest.Gen
	clk     clock.Clock
	start   int64
	buf     []byte
	line    []byte
	arr     int64
	have    bool
	routedN int64
	pos     positions
}

func (s *genSource) Next(ctx context.Context, wait time.Duration) (Record, bool, error) {
	if !s.have {
		l, arr, ok := s.g.Next(s.buf[:0])
		if !ok {
			return Record{}, false, io.EOF
		}
		s.buf, s.line, s.arr, s.have = l, l, arr, true
	}
	if d := time.Duration(s.arr-s.clk.NowMs()) * time.Millisecond; d > 0 {
		t := time.NewTimer(min(d, wait))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Record{}, false, nil
		}
		if s.arr > s.clk.NowMs() {
			return Record{}, false, nil
		}
	}
	s.have = false
	return Record{Line: s.line, Seq: s.pos.format(s.routedN)}, true, nil
}

func (s *genSource) Routed() { s.routedN++ }
func (s *genSource) Positions() map[string]string {
	return map[string]string{"gen_start": strconv.FormatInt(s.start, 10), "gen": strconv.FormatInt(s.routedN, 10)}
}
func (s *genSource) Virtual() bool { return false }
func (s *genSource) Close() error  { return nil }
