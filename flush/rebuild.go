package flush

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
)

// DefaultRebuildWritesPerSec is the default rate limit of RebuildTotals'
// writes. They go to the running-total store only (Valkey), never to the
// rows, so the limit is higher than the flush's.
const DefaultRebuildWritesPerSec = 5000

const (
	minuteMs = int64(time.Minute / time.Millisecond)
	hourMs   = int64(time.Hour / time.Millisecond)
)

// RebuildOptions configures RebuildTotals. The zero value of each optional
// field selects its default.
type RebuildOptions struct {
	// ClosedBy is a watermark (Unix ms): only minutes and hours whose last
	// millisecond is at or before it are rebuilt. Required. Pass the
	// watermark of a checkpoint that completed after the store was found
	// wiped: every window it closes was closed, and its rows written,
	// before that checkpoint completed, so the rows hold final values and
	// the job will not write those totals again. Windows after ClosedBy
	// are the job's to rewrite from state.
	ClosedBy int64
	// HourFromMs is the first hour start (Unix ms) rebuilt. Default: the
	// fromMs argument. Minutes and hours expire after different times in
	// Valkey (MinuteTTL 48 h, HourTTL 8 days), so the caller passes
	// now − MinuteTTL as fromMs and now − HourTTL here.
	HourFromMs int64
	// OldestEpoch is the oldest checkpoint a restore can still go back to
	// (the oldest kept checkpoint or savepoint; the runtime passes it to
	// ForgetEpochs as the end of the range it forgets). A rebuilt total is
	// recorded under its row's tag when that tag is at or above
	// OldestEpoch, and under OldestEpoch − 1 otherwise: no flush reads an
	// epoch below OldestEpoch, so those epochs are all alike, and one set
	// for all of them keeps the epoch registry (and the cost of
	// DeleteTotals) small. Default 0: every total under its row's tag.
	OldestEpoch int64

	// Owns, when set, limits the rebuild to the ads it reports true for:
	// a range pipeline's own key groups. A range records what it rebuilds
	// in its own epoch sets, and its next flush deletes what restored
	// state lacks there, so it must not rebuild another range's totals.
	// Default nil: every ad (a job owning every key group).
	Owns func(ad string) bool

	// WritesPerSec limits the totals written per second. Default
	// DefaultRebuildWritesPerSec; math.Inf(1) turns the limit off.
	WritesPerSec float64
	// Burst, Clock, Registerer, Logger, RetryBackoff, MaxRetryBackoff and
	// RetryLogEvery are as in Options.
	Burst           int
	Clock           Clock
	Registerer      prometheus.Registerer
	Logger          *slog.Logger
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	RetryLogEvery   time.Duration
}

// EnsureDefaults fills in the defaults of unset optional fields; fromMs is
// RebuildTotals' argument.
func (o *RebuildOptions) EnsureDefaults(fromMs int64) {
	if o.HourFromMs == 0 {
		o.HourFromMs = fromMs
	}
	if o.WritesPerSec == 0 {
		o.WritesPerSec = DefaultRebuildWritesPerSec
	}
	l := o.limits()
	l.ensureDefaults()
	o.WritesPerSec, o.Burst, o.Clock, o.Logger = l.writesPerSec, l.burst, l.clock, l.logger
	o.RetryBackoff, o.MaxRetryBackoff, o.RetryLogEvery = l.retryBackoff, l.maxRetryBackoff, l.retryLogEvery
}

// Validate reports every problem with the options, not just the first.
func (o *RebuildOptions) Validate() error {
	var errs []error
	if o.OldestEpoch < 0 {
		errs = append(errs, fmt.Errorf("flush: rebuild: oldest epoch %d must not be negative", o.OldestEpoch))
	}
	l := o.limits()
	errs = append(errs, l.validate()...)
	return errors.Join(errs...)
}

func (o *RebuildOptions) limits() limits {
	return limits{writesPerSec: o.WritesPerSec, burst: o.Burst, clock: o.Clock, logger: o.Logger,
		retryBackoff: o.RetryBackoff, maxRetryBackoff: o.MaxRetryBackoff, retryLogEvery: o.RetryLogEvery}
}

// rebuildBounds are what RebuildDecide needs to know of a rebuild.
type rebuildBounds struct {
	minuteFrom, hourFrom int64 // first minute and hour start rebuilt
	closedBy             int64 // last millisecond of the newest window rebuilt
	oldestEpoch          int64
}

// rebuildDecide returns the running total item implies for dashboards, or
// ok false when it implies none that a rebuild writes. Pure: no I/O, no
// clock.
//
//   - Only fast_* counts: the running totals are the stream's (closed
//     minutes plus open minutes); late clicks and the recount go to the
//     rows only. An item without fast_* (an hour with late clicks only)
//     implies no total.
//   - A minute row's fast_* is its final count, which is also its running
//     total.
//   - An hour row's fast_* is the sum of its closed minutes; once the hour
//     is closed (no minute of it can open any more) that is its running
//     total, closed minutes plus 0 open ones.
//   - Windows not closed by b.closedBy, and windows before the retention
//     (b.minuteFrom, b.hourFrom), are left out.
//   - The epoch is the row's fast_ckpt: a window's running total is
//     written with its row, in the same epoch, so a later flush treats the
//     rebuilt total as it treats the row (deleted with it if the row is
//     from after the restored checkpoint, kept otherwise). Tags below
//     b.oldestEpoch are recorded under b.oldestEpoch − 1.
func rebuildDecide(it sink.Item, b rebuildBounds) (t sink.Total, ok bool) {
	if !it.Fast.Present {
		return sink.Total{}, false
	}
	start, hour, err := sink.ParseBucket(it.Bucket)
	if err != nil {
		return sink.Total{}, false
	}
	from, length := b.minuteFrom, minuteMs
	if hour {
		from, length = b.hourFrom, hourMs
	}
	if start < from || start+length-1 > b.closedBy {
		return sink.Total{}, false
	}
	epoch := it.Fast.Ckpt
	if epoch < b.oldestEpoch {
		epoch = b.oldestEpoch - 1
	}
	return sink.Total{Ad: it.Entity, StartMs: start, Hour: hour, Valid: it.Fast.Valid,
		SpendMicros: it.Fast.SpendMicros, Epoch: epoch}, true
}

// RebuildTotals rewrites, from the rows, the running totals of every minute
// and hour that closed by o.ClosedBy and starts at or after fromMs (hours:
// o.HourFromMs), into totals. It is what the job runs once the running-total
// store is found wiped (valkey.Store.Wiped): the job itself rewrites only
// the windows its state still holds, so without a rebuild every window
// that closed before the wipe stays missing until it expires.
//
// A minute's total is its row's fast_valid and fast_spend_micros; an
// hour's, the hour row's fast_* (closed minutes, and no open one). Items
// without fast_* imply no total. Each total is recorded under its row's
// tag (see RebuildOptions.OldestEpoch), not under a restored checkpoint:
// the rows, not restored state, are the source, and a total recorded under
// the same epoch as its row is kept and deleted by later flushes exactly as
// the row is. (Recording everything under the restored checkpoint c, as Full
// does for the totals it rewrites from state, would let a later restore
// from a savepoint older than c delete totals whose rows it keeps.)
//
// The tag index is by epoch, and the epochs of the rows in the retention
// are not known. So RebuildTotals reads the whole table with one Scan and
// drops, as it reads, what lies outside [fromMs, o.ClosedBy]; the cost is
// the size of the table, not of the retention. (sink.Rows.QueryBucket
// could read only the buckets of the retention, one query per minute and
// hour; not done yet.) Totals are written in batches through a token bucket of
// o.WritesPerSec, from inside the scan, so the scan advances at that pace
// and nothing but one batch is held in memory. Transient row-store errors
// are waited out as in Full (a retried scan starts again from the
// beginning; rewriting a total is harmless); a failure of totals stops the
// rebuild, which the caller runs again later.
//
// Totals are absolute values, so RebuildTotals may run beside the live job:
// the job does not write the totals of windows closed by o.ClosedBy again,
// and a total that both write (a window that closed after the wipe) gets
// the same value from both. It is idempotent, starts no goroutines, and
// logs one line. n counts the totals written, including those written again
// by a retried scan.
func RebuildTotals(ctx context.Context, rows sink.Rows, totals sink.Totals, fromMs int64, o RebuildOptions) (n int, err error) {
	o.EnsureDefaults(fromMs)
	if err := o.Validate(); err != nil {
		return 0, err
	}
	switch {
	case rows == nil:
		return 0, errors.New("flush: rebuild: no row store")
	case totals == nil:
		return 0, errors.New("flush: rebuild: no totals store")
	}
	l := o.limits()
	r := newRunner(rows, &l, "rebuild", newMetrics(o.Registerer))
	b := rebuildBounds{minuteFrom: fromMs, hourFrom: o.HourFromMs, closedBy: o.ClosedBy, oldestEpoch: o.OldestEpoch}
	var scanned, minutes, hours, skipped int
	batch := make([]sink.Total, 0, totalsBatch)
	write := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := r.lim.take(ctx, len(batch)); err != nil {
			return err
		}
		if err := totals.SetTotals(ctx, batch); err != nil {
			return fmt.Errorf("flush: rebuild: write totals: %w", err)
		}
		for _, t := range batch {
			if t.Hour {
				hours++
			} else {
				minutes++
			}
		}
		batch = batch[:0]
		return nil
	}
	var werr error // a failed write, which ends the scan and is not retried
	err = r.retry.do(ctx, "scan", func() error {
		// A retried scan starts again from the first item.
		batch, werr = batch[:0], nil
		return rows.Scan(ctx, func(it sink.Item) error {
			scanned++
			if o.Owns != nil && !o.Owns(it.Entity) {
				skipped++
				return nil
			}
			t, ok := rebuildDecide(it, b)
			if !ok {
				skipped++
				return nil
			}
			batch = append(batch, t)
			if len(batch) == totalsBatch {
				werr = write()
				return werr
			}
			return nil
		})
	})
	switch {
	case werr != nil:
		err = werr
	case err != nil:
		err = fmt.Errorf("flush: rebuild: scan: %w", err)
	default:
		err = write()
	}
	n = minutes + hours
	d := r.clock.Now().Sub(r.start)
	r.m.items.WithLabelValues("rebuild", "scanned").Add(float64(scanned))
	r.m.totals.WithLabelValues("rebuilt").Add(float64(n))
	result := "ok"
	if err != nil {
		result = "error"
	}
	r.m.runs.WithLabelValues("rebuild", result).Inc()
	r.m.seconds.WithLabelValues("rebuild").Observe(d.Seconds())
	attrs := []any{"from_ms", fromMs, "hour_from_ms", o.HourFromMs, "closed_by", o.ClosedBy,
		"scanned", scanned, "minutes", minutes, "hours", hours, "skipped", skipped,
		"retries", r.rep.Retries, "duration", d}
	if err != nil {
		o.Logger.Error("rebuild of running totals failed; run it again", append(attrs, "err", err)...)
		return n, err
	}
	o.Logger.Info("running totals rebuilt from the rows", attrs...)
	return n, nil
}
