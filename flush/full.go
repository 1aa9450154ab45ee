package flush

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/adclick/adclick/sink"
)

// TotalsState is the set of running totals restored state implies (the
// open windows' totals per ad and minute, and per ad and hour). The runtime
// implements it over restored state; Full calls it from one goroutine.
type TotalsState interface {
	// Totals calls fn for every running total restored state implies, and
	// stops at fn's first error, returning it. The totals' Epoch is
	// ignored: the flush tags them with the restored checkpoint.
	Totals(fn func(sink.Total) error) error
	// HasTotal reports whether restored state implies a total for k.
	HasTotal(k sink.TotalKey) bool
}

// Report says what a Full or Sweep run did.
type Report struct {
	// ItemsScanned counts the items the tag-index queries returned (an item
	// found through both writers' indexes counts twice).
	ItemsScanned int
	// ItemsDeleted counts minute items deleted whole.
	ItemsDeleted int
	// AttrsRemoved counts writers' attribute groups removed from items that
	// stay.
	AttrsRemoved int
	// LateRewritten counts late totals rewritten from restored state.
	LateRewritten int
	// FastRewritten counts hour roll-ups rewritten from restored state.
	FastRewritten int
	// TotalsRewritten counts running totals rewritten from restored state.
	TotalsRewritten int
	// TotalsDeleted counts running totals written since the checkpoint that
	// restored state lacks, deleted.
	TotalsDeleted int
	// Refused counts writes refused by their condition and left alone: a
	// rewrite refused by job_gen (a newer generation owns the item), or an
	// item that kept changing under the flush.
	Refused int
	// Fenced counts attribute groups left alone because a newer generation
	// than the flushing job's wrote them.
	Fenced int
	// Superseded counts attribute groups left alone because a newer owner
	// of the range wrote their item: its job_gen is the run's and its wf
	// above the run's fence (Options.Fence). This run's lease was taken.
	Superseded int
	// Duration is the run's duration on the options' clock.
	Duration time.Duration
	// Epochs is the number of epochs queried.
	Epochs int
	// Retries counts row-store calls sent again after a transient error.
	Retries int
}

// LogValue returns the report as a slog group.
func (r Report) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("epochs", r.Epochs),
		slog.Int("scanned", r.ItemsScanned),
		slog.Int("deleted", r.ItemsDeleted),
		slog.Int("removed", r.AttrsRemoved),
		slog.Int("late_rewritten", r.LateRewritten),
		slog.Int("fast_rewritten", r.FastRewritten),
		slog.Int("totals_rewritten", r.TotalsRewritten),
		slog.Int("totals_deleted", r.TotalsDeleted),
		slog.Int("refused", r.Refused),
		slog.Int("fenced", r.Fenced),
		slog.Int("superseded", r.Superseded),
		slog.Int("retries", r.Retries),
		slog.Duration("duration", r.Duration),
	)
}

// writers are the tagged writers, in the order the drivers query them.
var writers = sink.TaggedWriters

// Full runs the full flush after a restore from checkpoint o.Restored (c),
// before the job writes any new output (seed 001 Part 8, FULL FLUSH;
// DESIGN.md §6):
//
//  1. For every epoch e in [c, o.High], every index shard n in
//     0..sink.IndexShards-1 and each writer w (Fast, Late), it queries w's
//     tag index for "e#n" (in the scope of rows, when rows is a store's
//     view with an index scope, such as a range pipeline's: then only that
//     scope's writes are found) and applies Decide to each item: minute items are
//     deleted (or only stripped of fast_* if they carry other attributes);
//     late totals and the fast roll-ups of hour items are rewritten from st
//     with tag o.RewriteEpoch (c unless given) and generation o.Gen, or
//     removed where st holds none. Deletes and removes
//     are conditioned on the <w>_ckpt seen; an item found changed is read
//     again and decided again. Attributes written by a newer generation
//     than o.Gen are left alone (job_gen fencing), and so are items a
//     newer owner of the range wrote (o.Fence, the lease fence). Every
//     rewrite, Remove and Delete carries the token (o.Gen, o.Fence).
//  2. If totals is not nil: every total in ts is written with Epoch
//     o.RewriteEpoch (c unless given; SetTotals records it under that
//     epoch, which must survive: a later restore from c or earlier has to
//     find it); every key recorded under an epoch in [c, o.High] that ts
//     lacks is deleted; and only then the bookkeeping of epochs
//     (c, o.High] is dropped, since every key in it has by then been
//     rewritten under the rewrite epoch or deleted. When totals is a view
//     with an index scope, all of this bookkeeping is that scope's.
//
// Every write goes through a token bucket of o.WritesPerSec. Row-store calls
// that fail with a transient error (IsTransient) are retried with backoff
// until ctx ends (see Options.RetryBackoff); other errors end the run. The
// flush is idempotent and restartable: each step converges to the same table
// whatever was done before, so after a failure the caller runs Full again
// from the start with the same options (and, if the failed run was itself
// writing, an o.High that covers it).
//
// Reads cost one query per (epoch, shard, writer) plus the items written
// since c; the rest of the table is never read. st must not be nil; ts must
// not be nil when totals is not. Full logs one line with its Report, and
// while it runs a progress line at most every 10 s on o.Clock (a flush
// shorter than that logs none); o.Progress, if set, follows it closely.
func Full(ctx context.Context, rows sink.Rows, totals sink.Totals, st State, ts TotalsState, o Options) (Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	switch {
	case rows == nil:
		return Report{}, errors.New("flush: no row store")
	case st == nil:
		return Report{}, errors.New("flush: no restored state")
	case totals != nil && ts == nil:
		return Report{}, errors.New("flush: a totals store but no restored totals")
	}
	tok := sink.Token{Gen: o.Gen, Fence: o.Fence}
	rows, err := fencedRows(rows, tok)
	if err != nil {
		return Report{}, err
	}
	l := o.limits()
	r := newRunner(rows, &l, "flush", newMetrics(o.Registerer))
	r.tok = &tok
	r.prog = progress{fn: o.Progress, logger: o.Logger, lastLog: r.start, queriesTotal: queriesOf(o.Restored, o.High)}
	f := &fullRun{runner: r, c: o.Restored, epoch: o.RewriteEpoch, gen: o.Gen, fence: o.Fence, st: st, staleOnly: o.StaleTotalsOnly}
	if f.epoch == 0 {
		f.epoch = o.Restored
	}
	r.setPhase(PhaseRows)
	err = r.eachIndexed(ctx, o.Restored, o.High, f.item)
	if err == nil && totals != nil {
		r.setPhase(PhaseTotals)
		err = f.totals(ctx, totals, ts, o.High)
	}
	r.setPhase(PhaseDone)
	rep := r.finish(o.High - o.Restored + 1)
	r.m.observe("flush", rep, err)
	attrs := []any{"restored", o.Restored, "high", o.High, "gen", o.Gen, "fence", o.Fence, "report", rep}
	if err != nil {
		o.Logger.Error("flush failed; run it again before any new output", append(attrs, "err", err)...)
		return rep, err
	}
	o.Logger.Info("flush done", attrs...)
	return rep, nil
}

// fullRun is the state of one Full call.
type fullRun struct {
	*runner
	c     int64
	epoch int64 // the tag of the run's own writes (Options.RewriteEpoch)
	// staleOnly: the totals state holds are left alone (Options.StaleTotalsOnly).
	staleOnly bool
	gen       int64
	fence     int64
	st        State
}

// item applies the flush to writer w's attributes on it, an item the tag
// index query returned.
func (f *fullRun) item(ctx context.Context, it sink.Item, w sink.Writer) error {
	// The query returned it under the row store's scoped key, so its key
	// tells the scope the store writes in (sink.Rows.QueryIndex).
	scope, _ := sink.SplitIndexKey(it.Attrs(w).Ix)
	for attempt := 1; ; attempt++ {
		if a := it.Attrs(w); a.Present && a.Ckpt >= f.c && a.Gen > f.gen {
			f.rep.Fenced++
			return nil
		}
		act := Decide(it, w, f.c, f.st)
		if act.Kind == Keep {
			return nil
		}
		if f.superseded(it) {
			return nil
		}
		var applied bool
		switch act.Kind {
		case RewriteLate, RewriteFast:
			act.Epoch = f.epoch
			if upToDate(it, act, f.gen, f.fence, scope) {
				return nil
			}
			if err := f.lim.take(ctx, 1); err != nil {
				return err
			}
			put := []sink.Put{{
				Key: it.Key, Writer: act.Writer, Valid: act.Valid, SpendMicros: act.SpendMicros,
				Epoch: act.Epoch, Gen: f.gen, Fence: f.fence,
			}}
			var refused int
			err := f.retry.do(ctx, "put", func() error {
				var err error
				refused, err = f.rows.Put(ctx, put)
				return err
			})
			if err != nil {
				return fmt.Errorf("flush: rewrite %s total of %s/%s: %w", act.Writer, it.Entity, it.Bucket, err)
			}
			switch {
			case refused > 0: // a newer job_gen, or a newer owner, wrote the item
				f.rep.Refused++
			case act.Kind == RewriteFast:
				f.rep.FastRewritten++
			default:
				f.rep.LateRewritten++
			}
			return nil
		default:
			var err error
			applied, err = f.undo(ctx, it.Key, w, act)
			if err != nil {
				return err
			}
		}
		if applied {
			return nil
		}
		// The item changed since it was read: read it again and decide on
		// what it holds now.
		if attempt == maxAttempts {
			f.rep.Refused++
			return nil
		}
		next, ok, err := f.get(ctx, it.Key)
		if err != nil || !ok {
			return err
		}
		it = next
	}
}

// totals rewrites the running totals from restored state and deletes those
// written since c that it lacks.
func (f *fullRun) totals(ctx context.Context, totals sink.Totals, ts TotalsState, high int64) error {
	batch := make([]sink.Total, 0, totalsBatch)
	write := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := f.lim.take(ctx, len(batch)); err != nil {
			return err
		}
		if err := totals.SetTotals(ctx, batch); err != nil {
			return fmt.Errorf("flush: rewrite totals: %w", err)
		}
		f.rep.TotalsRewritten += len(batch)
		batch = batch[:0]
		f.report()
		return nil
	}
	if !f.staleOnly {
		err := ts.Totals(func(t sink.Total) error {
			t.Epoch = f.epoch
			batch = append(batch, t)
			if len(batch) == totalsBatch {
				return write()
			}
			return nil
		})
		if err == nil {
			err = write()
		}
		if err != nil {
			return err
		}
	}

	stale := map[sink.TotalKey]struct{}{}
	for e := f.c; e <= high; e++ {
		err := totals.TotalsWritten(ctx, e, func(k sink.TotalKey) error {
			if !ts.HasTotal(k) {
				stale[k] = struct{}{}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("flush: totals written at epoch %d: %w", e, err)
		}
	}
	keys := make([]sink.TotalKey, 0, len(stale))
	for k := range stale {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareTotalKeys)
	for len(keys) > 0 {
		n := min(len(keys), totalsBatch)
		if err := f.lim.take(ctx, n); err != nil {
			return err
		}
		if err := totals.DeleteTotals(ctx, keys[:n]); err != nil {
			return fmt.Errorf("flush: delete totals: %w", err)
		}
		f.rep.TotalsDeleted += n
		keys = keys[n:]
		f.report()
	}
	if high > f.c {
		if err := totals.ForgetEpochs(ctx, f.c+1, high+1); err != nil {
			return fmt.Errorf("flush: forget epochs: %w", err)
		}
	}
	return nil
}

func compareTotalKeys(a, b sink.TotalKey) int {
	if c := cmp.Compare(a.Ad, b.Ad); c != 0 {
		return c
	}
	if c := cmp.Compare(a.StartMs, b.StartMs); c != 0 {
		return c
	}
	switch {
	case a.Hour == b.Hour:
		return 0
	case b.Hour:
		return -1
	}
	return 1
}

// runner holds what Full and Sweep share: the store, the rate limit, the
// retries of transient errors and the counts. Not safe for concurrent use.
type runner struct {
	rows  sink.Rows
	tok   *sink.Token // the run's token; nil: unfenced
	clock Clock
	lim   *bucket
	retry *retrier
	m     *metrics
	start time.Time
	rep   Report
	prog  progress
}

// newRunner returns the runner of one run of kind with defaulted limits l.
func newRunner(rows sink.Rows, l *limits, kind string, m *metrics) *runner {
	r := &runner{
		rows:  rows,
		clock: l.clock,
		lim:   newBucket(l.clock, l.writesPerSec, l.burst),
		m:     m,
		start: l.clock.Now(),
	}
	r.retry = l.retrier(kind, m, &r.rep.Retries)
	return r
}

// fencedRows returns rows's view under t (sink.Fenced). A store that takes
// no token is used as it is when t's fence is 0: it holds no fence above 0
// (unless a newer owner wrote through another view of it, which a flush
// without a lease cannot tell).
func fencedRows(rows sink.Rows, t sink.Token) (sink.Rows, error) {
	fr, err := sink.Fenced(rows, t)
	switch {
	case err == nil:
		return fr, nil
	case errors.Is(err, sink.ErrNoFence) && t.Fence == 0:
		return rows, nil
	}
	return nil, fmt.Errorf("flush: %w", err)
}

// superseded reports whether a newer owner of the run's generation wrote
// it (wf above the run's fence), and counts it: the run leaves it alone.
func (r *runner) superseded(it sink.Item) bool {
	if r.tok == nil || !it.HasJobGen || it.JobGen != r.tok.Gen || it.Fence <= r.tok.Fence {
		return false
	}
	r.rep.Superseded++
	return true
}

// eachIndexed calls fn for every item of each writer's tag index, for every
// epoch in [from, to] and every index shard. A query's items are read to
// the end before fn sees any of them, so fn's writes never run against an
// open query.
func (r *runner) eachIndexed(ctx context.Context, from, to int64, fn func(context.Context, sink.Item, sink.Writer) error) error {
	var items []sink.Item
	for e := from; e <= to; e++ {
		for n := range sink.IndexShards {
			ix := sink.IndexKeyOf(e, n)
			for _, w := range writers {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("flush: %w", err)
				}
				err := r.retry.do(ctx, "query", func() error {
					// A retried query starts again from its first page.
					items = items[:0]
					return r.rows.QueryIndex(ctx, w, ix, func(it sink.Item) error {
						items = append(items, it)
						return nil
					})
				})
				if err != nil {
					return fmt.Errorf("flush: query %s index %s: %w", w, ix, err)
				}
				r.rep.ItemsScanned += len(items)
				for i, it := range items {
					if i > 0 && i%progressEvery == 0 {
						r.report()
					}
					if err := fn(ctx, it, w); err != nil {
						return err
					}
				}
				r.prog.queries++
				r.report()
			}
		}
	}
	return nil
}

// undo applies a DeleteItem or RemoveAttrs action. applied is false when
// the store's condition failed (the item changed or is gone).
func (r *runner) undo(ctx context.Context, k sink.Key, w sink.Writer, act Action) (applied bool, err error) {
	if err := r.lim.take(ctx, 1); err != nil {
		return false, err
	}
	switch act.Kind {
	case DeleteItem:
		var deleted, ok bool
		err := r.retry.do(ctx, "delete", func() error {
			var err error
			deleted, ok, err = r.rows.Delete(ctx, k, w, act.Ckpt)
			return err
		})
		if err != nil {
			return false, fmt.Errorf("flush: delete %s/%s: %w", k.Entity, k.Bucket, err)
		}
		switch {
		case deleted:
			r.rep.ItemsDeleted++
		case ok:
			r.rep.AttrsRemoved++
		}
		return ok, nil
	case RemoveAttrs:
		var ok bool
		err := r.retry.do(ctx, "remove", func() error {
			var err error
			ok, err = r.rows.Remove(ctx, k, w, act.Ckpt)
			return err
		})
		if err != nil {
			return false, fmt.Errorf("flush: remove %s from %s/%s: %w", w, k.Entity, k.Bucket, err)
		}
		if ok {
			r.rep.AttrsRemoved++
		}
		return ok, nil
	}
	return true, nil
}

func (r *runner) get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	var (
		it sink.Item
		ok bool
	)
	err := r.retry.do(ctx, "get", func() error {
		var err error
		it, ok, err = r.rows.Get(ctx, k)
		return err
	})
	if err != nil {
		return sink.Item{}, false, fmt.Errorf("flush: get %s/%s: %w", k.Entity, k.Bucket, err)
	}
	return it, ok, nil
}

func (r *runner) finish(epochs int64) Report {
	r.rep.Epochs = int(epochs)
	r.rep.Duration = r.clock.Now().Sub(r.start)
	return r.rep
}
