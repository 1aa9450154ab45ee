package runtime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/adclick/adclick/latepath"
)

// exlog is one writer's part of the exceptions log: every click with its
// verdict, in one file per checkpoint epoch (DataDir/exceptions/
// epoch-<e>/<writer>.jsonl). Like every other writer it is cleaned after a
// restore: epochs ≥ c are removed, so the log never holds a verdict the
// restored run did not make. Not safe for concurrent use.
type exlog struct {
	dir   string
	name  string
	epoch int64
	f     *os.File
	w     *bufio.Writer
	buf   []byte
	n     int64
}

func newExlog(dataDir, name string, epoch int64) *exlog {
	return &exlog{dir: filepath.Join(dataDir, "exceptions"), name: name, epoch: epoch}
}

func (l *exlog) write(r *latepath.Record) error {
	if l.w == nil {
		d := filepath.Join(l.dir, fmt.Sprintf("epoch-%012d", l.epoch))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("runtime: exceptions log: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(d, l.name+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("runtime: exceptions log: %w", err)
		}
		l.f, l.w = f, bufio.NewWriterSize(f, 256<<10)
	}
	l.buf = latepath.AppendJSON(l.buf[:0], r)
	l.buf = append(l.buf, '\n')
	l.n++
	if _, err := l.w.Write(l.buf); err != nil {
		return fmt.Errorf("runtime: exceptions log: %w", err)
	}
	return nil
}

// barrier makes everything written so far durable and starts epoch next.
func (l *exlog) barrier(next int64) error {
	if err := l.close(); err != nil {
		return err
	}
	l.epoch = next
	return nil
}

func (l *exlog) close() error {
	if l.w == nil {
		return nil
	}
	err := l.w.Flush()
	if err == nil {
		err = l.f.Sync()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f, l.w = nil, nil
	if err != nil {
		return fmt.Errorf("runtime: exceptions log: %w", err)
	}
	return nil
}

// removeExlogEpochs deletes the exceptions log of every epoch ≥ c.
func removeExlogEpochs(dataDir string, c int64) (int, error) {
	dir := filepath.Join(dataDir, "exceptions")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("runtime: exceptions log: %w", err)
	}
	n := 0
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "epoch-")
		if !ok {
			continue
		}
		ep, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ep < c {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return n, fmt.Errorf("runtime: exceptions log: %w", err)
		}
		n++
	}
	return n, nil
}
