package source

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/adclick/adclick/ingest"
)

// File returns the Open of a JSON Lines replay of path: processing time is
// virtual (each line's arrival_ms), and the position is the byte offset
// after the last routed line.
func File(path string) Open {
	return func(_ context.Context, at Start) (Source, error) {
		var off int64
		if v, ok := at.Positions["file"]; ok {
			var err error
			if off, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("source: checkpoint %d: bad file position %q", at.Checkpoint, v)
			}
		}
		fs, err := ingest.OpenFile(path, off)
		if err != nil {
			return nil, err
		}
		return &fileSource{fs: fs, done: off}, nil
	}
}

type fileSource struct {
	fs   *ingest.FileSource
	done int64 // offset after the last routed line
	pos  positions
}

func (f *fileSource) Next(context.Context, time.Duration) (Record, bool, error) {
	at := f.fs.Offset()
	l, tr, err := f.fs.Next()
	if err != nil {
		return Record{}, false, err
	}
	return Record{Line: l, Truncated: tr, Seq: f.pos.format(at)}, true, nil
}

func (f *fileSource) Routed() { f.done = f.fs.Offset() }
func (f *fileSource) Positions() map[string]string {
	return map[string]string{"file": strconv.FormatInt(f.done, 10)}
}
func (f *fileSource) Virtual() bool { return true }
func (f *fileSource) Close() error  { return f.fs.Close() }

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
