package ingest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxLine is the longest line a FileSource accepts; a longer line is
// returned truncated and flagged, so the caller can log it as invalid.
const MaxLine = 64 << 10

// FileSource reads a JSON Lines click file (DESIGN.md §5) line by line and
// knows the byte offset after each line, which is its checkpoint position.
// Not safe for concurrent use.
type FileSource struct {
	f    *os.File
	r    *bufio.Reader
	off  int64
	line []byte
}

// OpenFile opens path and seeks to offset (0 for the start).
func OpenFile(path string, offset int64) (*FileSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ingest: open source: %w", err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("ingest: seek source to %d: %w", offset, err)
		}
	}
	return &FileSource{f: f, r: bufio.NewReaderSize(f, 1<<20), off: offset}, nil
}

// Next returns the next non-empty line (without its newline) and whether it
// was cut at MaxLine. The slice is valid until the next call. It returns
// io.EOF at the end of the file.
func (s *FileSource) Next() (line []byte, truncated bool, err error) {
	for {
		s.line = s.line[:0]
		for {
			frag, err := s.r.ReadSlice('\n')
			s.off += int64(len(frag))
			if len(s.line)+len(frag) <= MaxLine {
				s.line = append(s.line, frag...)
			} else {
				truncated = true
				if room := MaxLine - len(s.line); room > 0 {
					s.line = append(s.line, frag[:room]...)
				}
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(s.line) == 0 {
					return nil, false, io.EOF
				}
				break
			}
			return nil, false, fmt.Errorf("ingest: read source: %w", err)
		}
		l := s.line
		for len(l) > 0 && (l[len(l)-1] == '\n' || l[len(l)-1] == '\r') {
			l = l[:len(l)-1]
		}
		if len(l) == 0 {
			continue
		}
		return l, truncated, nil
	}
}

// Offset returns the byte offset after the last line returned.
func (s *FileSource) Offset() int64 { return s.off }

// Close closes the file.
func (s *FileSource) Close() error { return s.f.Close() }
