package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/adclick/adclick/flush"
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
	// Rendered at once, not at the first unit: a spinner (total -1) is
	// redrawn by the library only once it has been rendered.
	opts = append(opts, progressbar.OptionSetRenderBlankState(true))
	return &progress{progressbar.NewOptions64(total, opts...)}
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

// waitSpinner is a spinner on a terminal's stderr for a command that polls
// until something is ready (setup: a table, an index, a stream), naming
// what it waits for. It appears at the first wait and goes at done. A nil
// *waitSpinner (stderr is not a terminal) shows nothing. Not safe for
// concurrent use.
type waitSpinner struct {
	w io.Writer
	p *progress
}

// newWaitSpinner returns a waitSpinner on w, or nil if w is not a terminal.
func newWaitSpinner(w io.Writer) *waitSpinner {
	if !isTerminal(w) {
		return nil
	}
	return &waitSpinner{w: w}
}

// wait shows the spinner with what ("waiting for table ad_metrics (index
// by_bucket_shard: CREATING)"), or changes its text.
func (s *waitSpinner) wait(what string) {
	switch {
	case s == nil:
	case s.p == nil:
		s.p = newProgress(s.w, -1, what, "")
	default:
		s.p.describe(what)
	}
}

// done removes the spinner; a later wait shows a new one.
func (s *waitSpinner) done() {
	if s != nil {
		s.p.finish()
		s.p = nil
	}
}

// flushProgress returns a flush.Options.Progress callback (through
// runtime.Config.FlushProgress) that draws the restore flush on w: a bar of
// the tag-index queries done, the totals phase its last step, with the
// counts so far. nil if w is not a terminal. The bar appears at the
// flush's first report (a start without a flush draws none) and goes at
// its last.
func flushProgress(w io.Writer) func(flush.Progress) {
	if !isTerminal(w) {
		return nil
	}
	var p *progress
	return func(fp flush.Progress) {
		if fp.Phase == flush.PhaseDone {
			p.finish()
			p = nil
			return
		}
		if p == nil {
			p = newProgress(w, int64(fp.QueriesTotal)+1, flushDescription(fp), "")
		}
		p.describe(flushDescription(fp))
		n := int64(fp.Queries)
		if fp.Phase == flush.PhaseTotals {
			n = int64(fp.QueriesTotal) // the last step stays open until done
		}
		p.set(n)
	}
}

// flushDescription is the flush bar's text.
func flushDescription(fp flush.Progress) string {
	what := "rows"
	if fp.Phase == flush.PhaseTotals {
		what = "running totals"
	}
	return fmt.Sprintf("flush after restore (%s): %d items examined, %d removed, %d rewritten", what, fp.Examined, fp.Removed, fp.Rewritten)
}
