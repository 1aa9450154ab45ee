package runtime

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
)

// record is one item a source hands the driver: a payload, or (Kinesis) a
// shard lifecycle event.
type record struct {
	line      []byte
	truncated bool
	arrivalMs int64  // 0 when the arrival time is inside the line (file)
	shard     string // set when the source knows the shard (Kinesis)
	seq       string // the record's position, for the exceptions log
	event     string // kinesis.EventShardAdded / EventShardClosed
	bad       string // a reason the payload could not be unpacked (KPL)
}

// source is what the driver reads, one record at a time, in arrival order
// per shard.
type source interface {
	// next returns the next record. A real-time source waits at most wait
	// and returns ok false if nothing came; io.EOF ends bounded input.
	next(ctx context.Context, wait time.Duration) (r record, ok bool, err error)
	// routed tells the source that the record last returned has been
	// routed into the graph: positions now cover it.
	routed()
	// positions returns the position after the last routed record.
	positions() map[string]string
	// virtual reports whether processing time is the records' arrival time.
	virtual() bool
	close()
}

// fileSource replays a JSON Lines file; processing time is virtual.
type fileSource struct {
	fs   *ingest.FileSource
	done int64 // offset after the last routed line
	pos  positions
}

func (f *fileSource) next(context.Context, time.Duration) (record, bool, error) {
	at := f.fs.Offset()
	l, tr, err := f.fs.Next()
	if err != nil {
		return record{}, false, err
	}
	return record{line: l, truncated: tr, seq: f.pos.format(at)}, true, nil
}

// posWidth is the width of a formatted position: 20 digits, zero-padded,
// so that positions sort as strings.
const posWidth = 20

// positions formats file offsets and generator indexes as position strings
// without an allocation per record: each string is cut from a chunk that
// is never written again once handed out (a new chunk replaces a full one),
// so the strings stay valid for as long as anything refers to them.
type positions struct{ chunk []byte }

func (p *positions) format(n int64) string {
	if len(p.chunk)+posWidth > cap(p.chunk) {
		p.chunk = make([]byte, 0, 4096*posWidth)
	}
	off := len(p.chunk)
	p.chunk = p.chunk[:off+posWidth]
	b := p.chunk[off:]
	for i := posWidth - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return unsafe.String(&b[0], posWidth)
}
func (f *fileSource) routed() { f.done = f.fs.Offset() }
func (f *fileSource) positions() map[string]string {
	return map[string]string{"file": strconv.FormatInt(f.done, 10)}
}
func (f *fileSource) virtual() bool { return true }
func (f *fileSource) close()        { f.fs.Close() }

// genSource paces the built-in generator on the real clock; its position is
// the number of clicks routed (it regenerates and skips them on restore).
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

func (s *genSource) next(ctx context.Context, wait time.Duration) (record, bool, error) {
	if !s.have {
		l, arr, ok := s.g.Next(s.buf[:0])
		if !ok {
			return record{}, false, io.EOF
		}
		s.buf, s.line, s.arr, s.have = l, l, arr, true
	}
	if d := time.Duration(s.arr-s.clk.NowMs()) * time.Millisecond; d > 0 {
		t := time.NewTimer(min(d, wait))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return record{}, false, nil
		}
		if s.arr > s.clk.NowMs() {
			return record{}, false, nil
		}
	}
	s.have = false
	return record{line: s.line, seq: s.pos.format(s.routedN)}, true, nil
}
func (s *genSource) routed() { s.routedN++ }
func (s *genSource) positions() map[string]string {
	return map[string]string{"gen_start": strconv.FormatInt(s.start, 10), "gen": strconv.FormatInt(s.routedN, 10)}
}
func (s *genSource) virtual() bool { return false }
func (s *genSource) close()        {}

// kinesisSource reads a Kinesis stream. Positions cover exactly the records
// routed, per shard ("<sequence>/<sub-sequence>", or "closed").
type kinesisSource struct {
	src  *kinesis.Source
	pos  map[string]string
	last kinesis.Record
}

func (k *kinesisSource) next(ctx context.Context, wait time.Duration) (record, bool, error) {
	r, ok, err := k.src.Next(ctx, wait)
	if err != nil || !ok {
		if ctx.Err() != nil {
			return record{}, false, nil
		}
		return record{}, false, err
	}
	k.last = r
	return record{line: r.Data, arrivalMs: r.ArrivalMs, shard: r.Shard, seq: kinesis.FormatPosition(r.Seq, r.Sub),
		event: r.Event, bad: r.Bad}, true, nil
}

func (k *kinesisSource) routed() {
	switch k.last.Event {
	case kinesis.EventShardClosed:
		k.pos[k.last.Shard] = kinesis.PositionClosed
	case "":
		k.pos[k.last.Shard] = kinesis.FormatPosition(k.last.Seq, k.last.Sub)
	}
}
func (k *kinesisSource) positions() map[string]string { return maps.Clone(k.pos) }
func (k *kinesisSource) virtual() bool                { return false }
func (k *kinesisSource) close()                       { k.src.Close() }

func (j *Job) openSource(ctx context.Context) (source, error) {
	pos := j.restored.Positions
	switch {
	case strings.HasPrefix(j.cfg.Source, "file:"):
		var off int64
		if v, ok := pos["file"]; ok {
			var err error
			if off, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("runtime: checkpoint %d: bad file position %q", j.c, v)
			}
		}
		fs, err := ingest.OpenFile(strings.TrimPrefix(j.cfg.Source, "file:"), off)
		if err != nil {
			return nil, err
		}
		return &fileSource{fs: fs, done: off}, nil
	case strings.HasPrefix(j.cfg.Source, "kinesis:"):
		if j.cfg.Kinesis.API == nil {
			return nil, fmt.Errorf("runtime: source %s: no Kinesis client configured", j.cfg.Source)
		}
		o := j.cfg.Kinesis.Options
		o.Stream = strings.TrimPrefix(j.cfg.Source, "kinesis:")
		o.Positions = maps.Clone(pos)
		o.Registerer = j.cfg.Registerer
		o.Logger = j.log
		src, err := kinesis.Open(ctx, j.cfg.Kinesis.API, o)
		if err != nil {
			return nil, err
		}
		p := maps.Clone(pos)
		if p == nil {
			p = map[string]string{}
		}
		return &kinesisSource{src: src, pos: p}, nil
	}
	o := j.cfg.Gen
	var skip int64
	if v, ok := pos["gen_start"]; ok {
		o.StartMs, _ = strconv.ParseInt(v, 10, 64)
		skip, _ = strconv.ParseInt(pos["gen"], 10, 64)
	} else if o.StartMs == 0 {
		o.StartMs = j.cfg.Clock.NowMs()
	}
	g := ingest.NewGen(o)
	var buf []byte
	for i := int64(0); i < skip; i++ {
		if _, _, ok := g.Next(buf[:0]); !ok {
			break
		}
	}
	return &genSource{g: g, clk: j.cfg.Clock, start: o.StartMs, routedN: skip}, nil
}

// caughtUp reports whether every open shard is read to its tip.
func (k *kinesisSource) caughtUp() bool { return k.src.CaughtUp() }
