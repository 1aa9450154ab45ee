package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/recount"
)

// sweepDue carries out, at barrier id, the fence sweeps whose signature
// window has passed (docs/scale-out.md §6.5.4). It runs after checkpoint id
// is committed and before the subtasks resume: every subtask is paused at
// the barrier, so the state the sweep rewrites from is checkpoint id's, and
// its writes are tagged id, the epoch that starts there (opened before the
// barrier). A failed sweep stays owed and is tried again at the next
// checkpoint; the checkpoint itself is complete either way.
func (d *driver) sweepDue(ctx context.Context, id int64) {
	j := d.j
	j.m.sweepsOwed.Set(float64(len(j.sweeps)))
	if len(j.sweeps) == 0 {
		return
	}
	sl, ok := j.lease.l.(SweepLease)
	if !ok {
		return
	}
	now := time.UnixMilli(j.cfg.Clock.NowMs())
	var left []Sweep
	done := 0
	for i, s := range j.sweeps {
		if now.Before(s.NotBefore) {
			left = append(left, s)
			continue
		}
		if err := j.sweep(ctx, s, id); err != nil {
			j.m.sweeps.WithLabelValues("failed").Inc()
			j.log.Error("fence sweep failed; it stays owed and runs again at the next checkpoint",
				"of_fence", s.Fence, "from_epoch", s.From, "to_epoch", s.To, "err", err)
			left = append(left, j.sweeps[i:]...) // this one and the later ones
			break
		}
		j.m.sweeps.WithLabelValues("done").Inc()
		done++
	}
	if done == 0 {
		return
	}
	if err := sl.SweepsDone(ctx, left); err != nil {
		// Done but not recorded: the next holder (or this one, at the
		// next checkpoint) sweeps again, which changes nothing.
		j.log.Error("fence sweep done, but recording it in the lease failed; it runs again", "err", err)
		return
	}
	j.sweeps = left
	j.m.sweepsOwed.Set(float64(len(left)))
}

// sweep removes what a taken-over predecessor wrote in epochs
// [s.From, s.To]: the restore flush's rule (flush.Full) applied again,
// from current state, to the rows tagged there; the running totals
// recorded there that state lacks (those it holds are rewritten by the
// early firings); and the lake objects of those epochs. Nothing this
// holder wrote is tagged there (its epochs start above the high the take
// read, and its restore flush tags its rewrites with its own first epoch),
// so what the sweep finds is a write the predecessor signed before the
// takeover and that landed after the restore flush looked.
func (j *Job) sweep(ctx context.Context, s Sweep, epoch int64) error {
	log := j.log.With("sweep_of_fence", s.Fence)
	rep, err := flush.Full(ctx, j.rows, j.totals, flushState{j}, flushTotals{j}, flush.Options{
		Restored: s.From, High: s.To, RewriteEpoch: epoch, StaleTotalsOnly: true, Gen: j.cfg.JobGen, Fence: j.fence,
		WritesPerSec: j.cfg.FlushWritesPerSec, Registerer: j.cfg.Registerer, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("runtime: fence sweep of epochs %d-%d: %w", s.From, s.To, err)
	}
	n, err := recount.RemoveEpochsBetween(ctx, j.lake, j.cfg.KeyGroups.Scope(), s.From, s.To)
	if err != nil {
		return fmt.Errorf("runtime: fence sweep of epochs %d-%d: %w", s.From, s.To, err)
	}
	log.Info("fence sweep done", "from_epoch", s.From, "to_epoch", s.To, "epoch", epoch,
		"items_deleted", rep.ItemsDeleted, "attrs_removed", rep.AttrsRemoved, "rows_rewritten", rep.FastRewritten+rep.LateRewritten,
		"totals_rewritten", rep.TotalsRewritten, "totals_deleted", rep.TotalsDeleted, "lake_objects_removed", n)
	return nil
}
