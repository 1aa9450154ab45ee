package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/adclick/adclick/flush"
)

// WipeDetector is an optional capability of a running-total store: it can
// tell it lost its data (sink/valkey.Store: a marker key, see its package
// documentation). The job then rewrites every total from state.
type WipeDetector interface {
	Wiped(ctx context.Context) (bool, error)
	BeginRebuild(ctx context.Context) error
	Arm(ctx context.Context) (bool, error)
	TTLs() (minute, hour time.Duration)
}

// ckptDone is what the watcher learns of a completed checkpoint.
type ckptDone struct {
	began    time.Time // before its barrier went out
	closedBy int64     // the lowest window watermark at its barrier
	oldest   int64     // epochs below it are forgotten: no restore goes there
}

// wipeWatch runs beside the driver. After each completed checkpoint it
// checks the running-total store (one GETEX). When the store lost its data,
// it records a rebuild as begun, asks the driver (lost) to make the window
// subtasks rewrite every total their state holds, and, after the next
// checkpoint whose barrier went out after the discovery, rebuilds the
// totals of the windows that checkpoint closes from the rows
// (flush.RebuildTotals), then arms the store again. A failed or overtaken
// rebuild leaves the marker unarmed, so the next check starts over.
//
// The driver calls checkpointed and lost from its goroutine; the watcher's
// goroutine ends when the run's context ends, and stop waits for it.
type wipeWatch struct {
	ckpts  chan ckptDone
	wiped  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// startWipeWatch starts the watcher. virtual is true for a source whose
// processing time is its records' (a file replay): every total it wrote
// then went to the store within the TTL, whatever its event time, so the
// rebuild is not bounded by time.
func startWipeWatch(ctx context.Context, j *Job, w WipeDetector, virtual bool) *wipeWatch {
	ctx, cancel := context.WithCancel(ctx)
	ww := &wipeWatch{ckpts: make(chan ckptDone, 1), wiped: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ww.done)
		ww.loop(ctx, j, w, virtual)
	}()
	return ww
}

// checkpointed hands a completed checkpoint to the watcher, or drops it if
// the watcher is busy (a rebuild runs): the next one will do. Nil-safe.
func (ww *wipeWatch) checkpointed(c ckptDone) {
	if ww == nil {
		return
	}
	select {
	case ww.ckpts <- c:
	default:
	}
}

// lost reports, once per discovery, that the store lost its data.
// Nil-safe.
func (ww *wipeWatch) lost() bool {
	if ww == nil {
		return false
	}
	select {
	case <-ww.wiped:
		return true
	default:
		return false
	}
}

// stop ends the watcher (and a rebuild in progress) and waits for it.
func (ww *wipeWatch) stop() {
	ww.cancel()
	<-ww.done
}

func (ww *wipeWatch) loop(ctx context.Context, j *Job, w WipeDetector, virtual bool) {
	var found time.Time // when the store was found wiped; zero if it was not
	for {
		var c ckptDone
		select {
		case c = <-ww.ckpts:
		case <-ctx.Done():
			return
		}
		if !found.IsZero() {
			if !c.began.After(found) {
				continue // its barrier may predate the discovery
			}
			found = time.Time{}
			if err := rebuildTotals(ctx, j, w, c, virtual); err != nil {
				j.log.Warn("rebuild of running totals failed; starting over after the next checkpoint", "err", err)
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		wiped, err := w.Wiped(cctx)
		if err == nil && wiped {
			err = w.BeginRebuild(cctx)
		}
		cancel()
		if err != nil || !wiped {
			// Unreachable (the outage path rewrites from state once it
			// answers), or intact.
			continue
		}
		j.log.Warn("running-total store lost its data: rewriting the open windows from state, the closed ones from the rows after the next checkpoint")
		found = time.Now()
		select {
		case ww.wiped <- struct{}{}:
		default:
		}
	}
}

// rebuildTotals rewrites the closed windows' totals from the rows and arms
// the store again.
func rebuildTotals(ctx context.Context, j *Job, w WipeDetector, c ckptDone, virtual bool) error {
	// The store expires a total its TTL after writing it: with a real-time
	// source, windows older than that would be gone anyway.
	var minuteFrom, hourFrom int64
	if !virtual {
		minTTL, hourTTL := w.TTLs()
		now := j.cfg.Clock.NowMs()
		minuteFrom, hourFrom = now-minTTL.Milliseconds(), now-hourTTL.Milliseconds()
	}
	var owns func(string) bool
	if !j.cfg.KeyGroups.All() {
		owns = j.cfg.KeyGroups.Owns
	}
	if _, err := flush.RebuildTotals(ctx, j.rows, j.totals, minuteFrom, flush.RebuildOptions{
		Owns:     owns,
		ClosedBy: c.closedBy, HourFromMs: hourFrom, OldestEpoch: c.oldest,
		Registerer: j.cfg.Registerer, Logger: j.log,
	}); err != nil {
		return err
	}
	armed, err := w.Arm(ctx)
	if err != nil {
		return err
	}
	if !armed {
		return errors.New("runtime: running-total store lost its data again during the rebuild")
	}
	return nil
}
