package main

import (
	"context"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is a progress bar on stderr for work a person waits for (gen,
// put, sweep, recount). It is shown only on a terminal: a nil *progress
// (stderr is a log file, a pipe or a test's buffer) does nothing, so the
// callers need no checks. Not safe for concurrent use.
type progress struct{ bar *progressbar.ProgressBar }

// newProgress returns a bar on w for total units, or nil if w is not a
// terminal. total -1 means unknown: a spinner with the count so far and the
// elapsed time. unit names what is counted ("clicks", "rows"); "bytes"
// shows sizes; "" shows no count. The bar is cleared by finish, which
// must be called.
func newProgress(w io.Writer, total int64, desc, unit string) *progress {
	if !isTerminal(w) {
		return nil
	}
	opts := []progressbar.Option{progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionThrottle(100 * time.Millisecond), progressbar.OptionClearOnFinish()}
	switch unit {
	case "":
		opts = append(opts, progressbar.OptionSetElapsedTime(true))
	case "bytes":
		opts = append(opts, progressbar.OptionShowBytes(true))
	default:
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetItsString(unit), progressbar.OptionShowIts())
	}
	p := &progress{progressbar.NewOptions64(total, opts...)}
	p.bar.Add64(0) // shown at once, not at the first unit
	return p
}

// add counts n more units.
func (p *progress) add(n int64) {
	if p != nil {
		p.bar.Add64(n)
	}
}

// set sets the count to n.
func (p *progress) set(n int64) {
	if p != nil {
		p.bar.Set64(n)
	}
}

// describe replaces the description.
func (p *progress) describe(s string) {
	if p != nil {
		p.bar.Describe(s)
	}
}

// finish removes the bar (and ends a spinner's redrawing).
func (p *progress) finish() {
	if p != nil {
		p.bar.Finish()
	}
}

// progressReader counts what is read from r on p.
type progressReader struct {
	r io.Reader
	p *progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.add(int64(n))
	return n, err
}

// spinnerDelay is how long a command runs before withSpinner shows that it
// is still waiting (a quick answer, --help or a usage error shows none).
const spinnerDelay = time.Second

// withSpinner runs a command that waits for one long answer (sweep: the
// job answers when the sweep is done) with a spinner and the elapsed time
// on a terminal's stderr, from spinnerDelay on.
func withSpinner(name string, cmd func(context.Context, []string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if !isTerminal(stderr) {
			return cmd(ctx, args, stdout, stderr)
		}
		done := make(chan struct{})
		shown := make(chan *progress, 1)
		go func() {
			t := time.NewTimer(spinnerDelay)
			defer t.Stop()
			select {
			case <-done:
				shown <- nil
			case <-t.C:
				shown <- newProgress(stderr, -1, name+": waiting for the job", "")
			}
		}()
		err := cmd(ctx, args, stdout, stderr)
		close(done)
		(<-shown).finish()
		return err
	}
}
