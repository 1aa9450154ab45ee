package flush

import (
	"log/slog"
	"time"

	"github.com/adclick/adclick/sink"
)

// Phase is the part of a Full run a Progress reports on.
type Phase string

const (
	// PhaseRows is the first part: the tag-index queries and the item
	// writes they lead to.
	PhaseRows Phase = "rows"
	// PhaseTotals is the second: the running totals rewritten and deleted.
	PhaseTotals Phase = "totals"
	// PhaseDone is the final report, whether the run succeeded or not.
	PhaseDone Phase = "done"
)

// Progress is how far a Full run has got, for a person waiting on it.
type Progress struct {
	// Phase is the part of the run under way; PhaseDone in the final call.
	Phase Phase
	// Queries counts the tag-index queries done, out of QueriesTotal
	// (epochs × sink.IndexShards × 2 writers): the run's known share of its
	// work. The totals phase has no known size.
	Queries, QueriesTotal int
	// Examined counts the items the queries returned (Report.ItemsScanned).
	Examined int
	// Removed counts minute items deleted, attribute groups removed and
	// running totals deleted.
	Removed int
	// Rewritten counts late totals, hour roll-ups and running totals
	// rewritten from restored state.
	Rewritten int
	// Elapsed is the time since the run started, on the options' clock.
	Elapsed time.Duration
}

// LogValue returns the progress as a slog group.
func (p Progress) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("phase", string(p.Phase)),
		slog.Int("queries", p.Queries),
		slog.Int("queries_total", p.QueriesTotal),
		slog.Int("examined", p.Examined),
		slog.Int("removed", p.Removed),
		slog.Int("rewritten", p.Rewritten),
		slog.Duration("elapsed", p.Elapsed),
	)
}

// progressEvery is how many items a query's results are worked through
// between two progress reports within it (a report also follows every
// query and every batch of totals).
const progressEvery = 256

// progressLogEvery is the least time between two progress lines in the
// log: a flush shorter than that logs none, only its "flush done" line.
const progressLogEvery = 10 * time.Second

// progress reports a Full run's progress: to the Options.Progress callback
// at every step, and to the log at most once per progressLogEvery. A zero
// progress (Sweep) reports nothing. It runs on the caller's goroutine and
// reads the run's clock only.
type progress struct {
	fn           func(Progress)
	logger       *slog.Logger
	lastLog      time.Time
	phase        Phase
	queries      int
	queriesTotal int
}

func (r *runner) setPhase(p Phase) {
	r.prog.phase = p
	r.report()
}

// report sends the run's progress to the callback, and to the log if
// progressLogEvery has passed since the run started or since the last line.
func (r *runner) report() {
	pr := &r.prog
	if pr.fn == nil && pr.logger == nil {
		return
	}
	now := r.clock.Now()
	rep := r.rep
	p := Progress{
		Phase: pr.phase, Queries: pr.queries, QueriesTotal: pr.queriesTotal,
		Examined:  rep.ItemsScanned,
		Removed:   rep.ItemsDeleted + rep.AttrsRemoved + rep.TotalsDeleted,
		Rewritten: rep.LateRewritten + rep.FastRewritten + rep.TotalsRewritten,
		Elapsed:   now.Sub(r.start),
	}
	if pr.fn != nil {
		pr.fn(p)
	}
	if pr.logger != nil && pr.phase != PhaseDone && now.Sub(pr.lastLog) >= progressLogEvery {
		pr.lastLog = now
		pr.logger.Info("flush progress", "progress", p)
	}
}

// queriesOf is the number of tag-index queries of epochs [from, to].
func queriesOf(from, to int64) int {
	return int(to-from+1) * sink.IndexShards * len(writers)
}
