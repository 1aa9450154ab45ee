package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/adclick/adclick/flush"
)

// ErrNotRunning is returned by operator actions when the job is not
// running (not started yet, or finished).
var ErrNotRunning = errors.New("runtime: job is not running")

type ctlKind uint8

const (
	ctlSavepoint ctlKind = iota + 1
	ctlStop
	ctlRewrite
	ctlCheckpoint // a checkpoint now (not kept as a savepoint)
)

type ctlReq struct {
	kind      ctlKind
	savepoint bool
	reply     chan ctlResp
}

type ctlResp struct {
	meta Meta
	path string
	err  error
}

// Savepoint takes a checkpoint now and keeps a copy of it under
// DataDir/savepoints/sp-<id>, which retention never removes. It returns the
// savepoint's metadata and path. Start another job from it with
// Config.FromSavepoint (blue/green, rescaling, upgrades).
func (j *Job) Savepoint(ctx context.Context) (Meta, string, error) {
	return j.control(ctx, ctlReq{kind: ctlSavepoint, savepoint: true})
}

// Stop stops the job with a final checkpoint (and, if savepoint is set, a
// savepoint of it) and returns its metadata once Run is about to return.
func (j *Job) Stop(ctx context.Context, savepoint bool) (Meta, string, error) {
	return j.control(ctx, ctlReq{kind: ctlStop, savepoint: savepoint})
}

func (j *Job) control(ctx context.Context, r ctlReq) (Meta, string, error) {
	r.reply = make(chan ctlResp, 1)
	select {
	case j.ctl <- r:
	case <-j.done:
		return Meta{}, "", ErrNotRunning
	case <-ctx.Done():
		return Meta{}, "", ctx.Err()
	}
	select {
	case resp := <-r.reply:
		return resp.meta, resp.path, resp.err
	case <-ctx.Done():
		return Meta{}, "", ctx.Err()
	}
}

// Sweep is the second sweep after a blue/green switch: once the old version
// (generation gen) has stopped writing, it removes what that generation
// wrote since savepoint since, per writer, up to epoch high (0 = this job's
// current epoch plus a margin of 100 epochs, since both versions count from
// the savepoint).
func (j *Job) Sweep(ctx context.Context, gen, since, high int64) (flush.Report, error) {
	if gen >= j.cfg.JobGen {
		return flush.Report{}, fmt.Errorf("runtime: sweep of generation %d refused: it is not older than this job's generation %d", gen, j.cfg.JobGen)
	}
	if high == 0 {
		h, _, err := j.ckpts.high(ctx)
		if err != nil {
			return flush.Report{}, err
		}
		high = max(h, since) + 100
	}
	rep, err := flush.Sweep(ctx, j.rows, j.totals, flush.SweepOptions{Gen: gen, Since: since, High: high,
		WritesPerSec: j.cfg.FlushWritesPerSec, Registerer: j.cfg.Registerer, Logger: j.log})
	if err != nil {
		return rep, err
	}
	// The sweep removed the old generation's values; an hour row this job
	// holds in state but has not written since (its late total or roll-up
	// did not change) would stay without them. Rewrite them from state.
	if _, _, err := j.control(ctx, ctlReq{kind: ctlRewrite}); err != nil && !errors.Is(err, ErrNotRunning) {
		return rep, fmt.Errorf("runtime: rewrite after sweep: %w", err)
	}
	// Running totals carry no generation: a window both versions closed
	// keeps the total the old one wrote last. Once a checkpoint has
	// completed after the sweep, every window it closes has this
	// generation's row (or the old one's from before the savepoint): the
	// totals of those windows are rebuilt from the rows.
	if j.totals == nil {
		return rep, nil
	}
	meta, _, err := j.control(ctx, ctlReq{kind: ctlCheckpoint})
	if errors.Is(err, ErrNotRunning) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("runtime: checkpoint after sweep: %w", err)
	}
	var minuteFrom, hourFrom int64
	j.mu.Lock()
	virtual := j.virtualSrc
	j.mu.Unlock()
	if w, ok := j.plainTotals.(WipeDetector); ok && !virtual {
		minTTL, hourTTL := w.TTLs()
		now := j.cfg.Clock.NowMs()
		minuteFrom, hourFrom = now-minTTL.Milliseconds(), now-hourTTL.Milliseconds()
	}
	oldest, _ := j.ckpts.oldestRestorable(ctx)
	if _, err := flush.RebuildTotals(ctx, j.rows, j.totals, minuteFrom, flush.RebuildOptions{
		ClosedBy: meta.Watermark, HourFromMs: hourFrom, OldestEpoch: oldest,
		Registerer: j.cfg.Registerer, Logger: j.log,
	}); err != nil {
		return rep, fmt.Errorf("runtime: rebuild running totals after sweep: %w", err)
	}
	return rep, nil
}
