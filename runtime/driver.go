package runtime

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"io"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/operator"
	"github.com/adclick/adclick/recount"
)

// driver reads the source, decodes and validates each record, clamps its
// time, tracks the per-shard watermarks, routes clicks to the
// pre-aggregators by click id, and coordinates checkpoints. It is one
// goroutine, so every pre-aggregator sees the same watermarks and barriers
// in the same order relative to its clicks.
type driver struct {
	j   *Job
	src source.Source
	// sm decides: watermarks and their tick, the routing of clicks, the
	// records of invalid ones.
	sm *operator.Source
	// sched decides when periodic checkpoints begin.
	sched      operator.Schedule
	virtual    bool // the source drives a virtual clock (file replay)
	records    int64
	invalid    int64
	blocked    prometheus.Counter
	lake       *recount.Writer
	lakeEpoch  int64
	lastRecord int64 // processing time of the last record (real-time sources)
	forgotten  int64 // epochs below this are forgotten by the totals store
	eof        bool  // the source ended (bounded input read to its end)
	// wipes watches the running-total store for a loss of its data (nil
	// unless the store can tell, as sink/valkey's can).
	wipes *wipeWatch
	// Checkpoint failures: a failed periodic checkpoint is retried at
	// ckptRetryAt (processing time) with backoff; failSince is when the
	// failures began (wall clock), bounded by the checkpoint timeout.
	ckptFails   int
	ckptRetryAt int64
	failSince   time.Time
	c           ingest.Click
	notOwned    int64 // the source machine's NotOwned at the last publish
}

func newDriver(j *Job, src source.Source) (*driver, error) {
	sm, err := operator.NewSource(operator.SourceOptions{
		Watermarks: j.cfg.Watermarks,
		Pres:       len(j.pres), BatchSize: j.cfg.BatchSize,
		KeyGroups: j.cfg.KeyGroups,
		NewBatch: func() []ingest.Click {
			select {
			case b := <-j.freeBatches:
				return b
			default:
				return make([]ingest.Click, 0, j.cfg.BatchSize)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	d := &driver{
		j:         j,
		src:       src,
		sm:        sm,
		sched:     operator.Schedule{IntervalMs: j.cfg.CheckpointIntervalMs, PauseMs: j.cfg.CheckpointPauseMs},
		lake:      j.sourceLake,
		blocked:   j.m.blocked.WithLabelValues("source"),
		lakeEpoch: j.epoch0,
	}
	// Every shard the restored checkpoint tracked takes part in the
	// watermark from the start, as it did before the restore: a shard with
	// no record after the checkpoint must not be invisible (a file source
	// registers shards only at their first record). Each starts without a
	// watermark and goes idle as usual.
	for _, id := range j.restored.Shards {
		d.sm.AddShard(id, 0)
	}
	return d, nil
}

// run drives the graph. ctx is the caller's (cancel = stop with a final
// checkpoint); runCtx is the graph's (cancelled when a subtask fails).
func (d *driver) run(ctx, runCtx context.Context) error {
	virtual := d.src.Virtual()
	d.virtual = virtual
	if w, ok := d.j.plainTotals.(WipeDetector); ok {
		d.wipes = startWipeWatch(runCtx, d.j, w, virtual)
		defer d.wipes.stop()
	}
	if !virtual {
		d.start(d.j.cfg.Clock.NowMs())
		d.lastRecord = d.j.cfg.Clock.NowMs()
	}
	for n := 0; ; n++ {
		// The progress heartbeat: at every tick, and every 4,096 records
		// (a replay whose lines share one arrival time has no ticks), not
		// a clock read per record.
		if n&4095 == 0 {
			d.j.beat()
		}
		if runCtx.Err() != nil {
			return context.Cause(runCtx)
		}
		if ctx.Err() != nil {
			return d.stop(runCtx, d.j.drain.Load())
		}
		var wait time.Duration
		if !virtual {
			now := d.j.cfg.Clock.NowMs()
			if err := d.advance(runCtx, now); errors.Is(err, errStopped) {
				return d.drain(runCtx)
			} else if err != nil {
				return err
			}
			if d.idleExit(now) {
				d.j.log.Info("source caught up and idle: stopping", "idle_for", d.j.cfg.ExitWhenIdle)
				return d.stop(runCtx, d.j.drain.Load())
			}
			wait = time.Duration(max(d.sm.NextTick()-now, 1)) * time.Millisecond
		}
		r, ok, err := d.src.Next(ctx, wait)
		if errors.Is(err, io.EOF) {
			d.eof = true
			return d.stop(runCtx, true)
		}
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if r.Event != source.NoEvent {
			d.shardEvent(r)
			d.src.Routed()
			continue
		}
		if err := d.consume(runCtx, r, virtual); errors.Is(err, errStopped) {
			// Stopped by an operator while this record was pending: it is
			// not routed, and the final checkpoint does not cover it.
			return d.drain(runCtx)
		} else if err != nil {
			return err
		}
		d.src.Routed()
		d.records++
		if !virtual {
			d.lastRecord = d.j.cfg.Clock.NowMs()
		}
		if n := d.j.cfg.FailAfterRecords; n > 0 && d.records >= n {
			d.j.cfg.Crash()
		}
	}
}

// idleExit reports whether an --exit-when-idle stop is due.
func (d *driver) idleExit(now int64) bool {
	idle := d.j.cfg.ExitWhenIdle
	if idle <= 0 || now-d.lastRecord < idle.Milliseconds() {
		return false
	}
	cu, ok := d.src.(source.CaughtUpper)
	return !ok || cu.CaughtUp()
}

func (d *driver) shardEvent(r source.Record) {
	switch r.Event {
	case source.ShardAdded:
		d.sm.AddShard(r.Shard, d.sm.ProcMs())
	case source.ShardClosed:
		d.sm.CloseShard(r.Shard)
	case source.ShardReader:
		d.sm.Reader(r.Shard, r.Reader)
	}
}

func (d *driver) start(procMs int64) {
	d.sm.Start(procMs)
	d.sched.Start(procMs)
}

// consume decodes one record and routes it.
func (d *driver) consume(ctx context.Context, r source.Record, virtual bool) error {
	c := &d.c
	var reason ingest.Reason
	if r.Bad != "" {
		*c = ingest.Click{}
		reason = ingest.Reason(r.Bad)
	} else {
		reason = ingest.Decode(r.Line, c)
	}
	if r.Truncated && reason == "" {
		reason = ingest.ReasonMalformedJSON
	}
	if r.Shard != "" {
		c.Shard = r.Shard
	}
	c.Seq = r.Seq
	if reason == "" {
		if r.ArrivalMs != 0 {
			reason = c.Finish(r.ArrivalMs)
		} else {
			reason = c.FinishLine()
		}
	}
	if virtual {
		if c.HasArrival && c.ArrivalMs > 0 {
			if !d.sm.Started() {
				d.start(c.ArrivalMs - 1)
			}
			// One line moves the virtual clock by at most maxVirtualStepMs:
			// a line whose arrival_ms is a day ahead (or near the year
			// 9999) must not switch the dedup guard on for every later
			// line, nor make the tick loop run for ever. A real gap in the
			// file is caught up over the following lines.
			if err := d.advance(ctx, min(c.ArrivalMs, eventtime.SatAdd(d.sm.ProcMs(), maxVirtualStepMs))); err != nil {
				return err
			}
		}
	}
	if reason != "" {
		if c.ArrivalMs == 0 {
			c.ArrivalMs = r.ArrivalMs
		}
		// The payload as read, for every invalid record: a line that
		// parses but fails validation ("spend_micros":"100") keeps what it
		// said, not the zero it was decoded to. A record of another
		// range's ad is that range's to log and count.
		if !d.sm.Reject(c, reason, r.Line) {
			return nil
		}
		d.invalid++
		d.j.m.invalid.Inc()
		if err := d.deliver(ctx, nil); err != nil {
			return err
		}
		return d.lake.Spill(ctx, d.lakeEpoch)
	}
	d.sm.Click(c)
	return d.deliver(ctx, nil)
}

// deliver carries out the source machine's Ready: the records of invalid
// clicks go to the lake, the messages to the pre-aggregators in order (b is
// the barrier a Barrier message carries).
func (d *driver) deliver(ctx context.Context, b *barrier) error {
	rd := d.sm.Ready()
	if len(rd.Sends) == 0 && len(rd.Lake) == 0 {
		return nil
	}
	defer d.sm.Advance()
	for i := range rd.Lake {
		d.lake.Add(&rd.Lake[i])
	}
	for _, snd := range rd.Sends {
		m := toPre{Msg: snd.Msg}
		var err error
		switch snd.Msg.Kind {
		case operator.Clicks:
			m.sentNs = time.Now().UnixNano()
			err = sendTimed(ctx, d.j.pres[snd.To].in, m, d.blocked)
		case operator.Barrier:
			m.barrier = b
			fallthrough
		default:
			err = send(ctx, d.j.pres[snd.To].in, m)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// broadcast sends m to every pre-aggregator, after the clicks buffered for
// them.
func (d *driver) broadcast(ctx context.Context, m operator.Msg) error {
	d.sm.Broadcast(m)
	return d.deliver(ctx, nil)
}

// advance moves processing time to now, running every watermark emission
// tick (and any due checkpoint) on the way, each at its own time.
func (d *driver) advance(ctx context.Context, now int64) error {
	for d.sm.NextTick() <= now {
		if err := d.tick(ctx); err != nil {
			return err
		}
	}
	d.sm.Move(now)
	return nil
}

func (d *driver) tick(ctx context.Context) error {
	d.j.beat()
	t, wm, _ := d.sm.Tick()
	if err := d.deliver(ctx, nil); err != nil {
		return err
	}
	d.publish(t, wm)
	if d.wipes.lost() {
		// The store lost its data: the open windows' totals now, from state.
		if err := d.broadcast(ctx, operator.Msg{Kind: operator.TotalsLost, ProcMs: t}); err != nil {
			return err
		}
	}
	if !d.j.cfg.NoCheckpoint {
		if d.sched.Due(t) {
			if t >= d.ckptRetryAt {
				if _, err := d.checkpoint(ctx, t, false); err != nil {
					if err := d.checkpointFailed(ctx, t, err); err != nil {
						return err
					}
				}
			}
		} else if d.sched.PreflushDue(t) {
			// A tenth of the interval before the checkpoint, write the
			// state's memtable out while the graph runs: the checkpoint,
			// which stops the graph, then flushes only the rest.
			// Only a speed-up: a failure leaves the whole flush to the
			// checkpoint.
			if err := d.j.st.FlushSoon(); err != nil {
				d.j.log.Warn("early state flush failed; the checkpoint flushes everything", "err", err)
			}
		}
	}
	select {
	case r := <-d.j.ctl:
		return d.control(ctx, r)
	default:
	}
	return nil
}

// maxVirtualStepMs bounds how far one line of a file replay moves the
// virtual clock: well under the dedup guard's trigger (a watermark stuck for
// GuardMs − HorizonMs, a day by default), and a bounded number of ticks.
const maxVirtualStepMs = 10 * 60_000

// checkpointFailed handles a failed periodic checkpoint: it is retried
// after a backoff (1 s, doubling up to 10 s of processing time) while the
// graph runs on, until failures have lasted the checkpoint timeout; then
// the job ends with the root cause, so a supervisor restarts it (Flink's
// tolerable-failed-checkpoints, with a time budget). The readiness probe
// reports not ready meanwhile.
func (d *driver) checkpointFailed(ctx context.Context, t int64, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d.ckptFails == 0 {
		d.failSince = time.Now()
	}
	d.ckptFails++
	d.j.setFailing(true)
	timeout := time.Duration(d.j.cfg.CheckpointTimeoutMs) * time.Millisecond
	if since := time.Since(d.failSince); since >= timeout {
		return fmt.Errorf("runtime: checkpoints failed for %s (%d attempts, the checkpoint timeout is %s): %w",
			since.Round(time.Millisecond), d.ckptFails, timeout, err)
	}
	backoff := min(int64(1000)<<min(d.ckptFails-1, 4), 10_000)
	d.ckptRetryAt = t + backoff
	d.j.log.Warn("checkpoint failed; retrying", "attempt", d.ckptFails, "retry_in_ms", backoff, "err", err)
	return nil
}

// checkpointRetry takes a checkpoint that must complete (the final one, or
// a stop's), retrying with backoff until the checkpoint timeout.
func (d *driver) checkpointRetry(ctx context.Context, final, savepoint bool) (Meta, string, error) {
	start := time.Now()
	timeout := time.Duration(d.j.cfg.CheckpointTimeoutMs) * time.Millisecond
	for attempt := 1; ; attempt++ {
		m, loc, err := d.checkpointAs(ctx, d.sm.ProcMs(), final, savepoint)
		if err == nil || ctx.Err() != nil {
			return m, loc, err
		}
		d.j.setFailing(true)
		wait := time.Duration(min(int64(250)<<min(attempt-1, 5), 5_000)) * time.Millisecond
		if time.Since(start)+wait >= timeout {
			return Meta{}, "", fmt.Errorf("runtime: final checkpoint failed for %s (%d attempts): %w", time.Since(start).Round(time.Millisecond), attempt, err)
		}
		d.j.log.Warn("final checkpoint failed; retrying", "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return Meta{}, "", context.Cause(ctx)
		}
	}
}

// errStopped ends the driver's loop after an operator's stop.
var errStopped = errors.New("runtime: stopped by operator")

func (d *driver) control(ctx context.Context, r ctlReq) error {
	var resp ctlResp
	switch r.kind {
	case ctlSavepoint:
		// A failed savepoint is the operator's to retry; the job goes on
		// (a broken graph ends it at the next step anyway).
		resp.meta, resp.path, resp.err = d.checkpointAs(ctx, d.sm.ProcMs(), false, true)
		r.reply <- resp
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	case ctlStop:
		resp.meta, resp.path, resp.err = d.checkpointRetry(ctx, true, r.savepoint)
	case ctlRewrite:
		resp.err = d.broadcast(ctx, operator.Msg{Kind: operator.Rewrite})
	case ctlCheckpoint:
		resp.meta, resp.path, resp.err = d.checkpointAs(ctx, d.sm.ProcMs(), false, false)
		r.reply <- resp
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	r.reply <- resp
	if resp.err != nil {
		return resp.err
	}
	if r.kind == ctlStop {
		return errStopped
	}
	return nil
}

func (d *driver) publish(t, wm int64) {
	d.j.m.watermark.Set(unixSeconds(wm))
	lag := ingest.Lag(t, wm)
	if wm != eventtime.NoWatermark {
		d.j.m.watermarkLag.Set(float64(lag) / 1000)
	}
	shards := d.sm.Watermarks().Shards()
	for _, sh := range shards {
		d.j.m.shardWatermark.WithLabelValues(sh.ID).Set(unixSeconds(sh.Watermark))
		idle := 0.0
		if sh.Idle || sh.Closed {
			idle = 1
		}
		d.j.m.shardIdle.WithLabelValues(sh.ID).Set(idle)
	}
	if n := d.sm.NotOwned(); n > d.notOwned {
		d.j.m.notOwned.Add(float64(n - d.notOwned))
		d.notOwned = n
	}
	d.j.mu.Lock()
	d.j.status.ProcessingMs = t
	d.j.status.WatermarkMs = wm
	d.j.status.WatermarkLagMs = lag
	d.j.status.Records = d.records
	d.j.status.Invalid = d.invalid
	d.j.status.Shards = shards
	d.j.mu.Unlock()
}

// stop ends the run: at the end of bounded input a final watermark fires
// every window first; then a final checkpoint; then the graph is drained.
func (d *driver) stop(ctx context.Context, endOfInput bool) error {
	if endOfInput {
		wm := d.sm.Final()
		if err := d.deliver(ctx, nil); err != nil {
			return err
		}
		d.publish(d.sm.ProcMs(), wm)
	}
	return d.stopBefore(ctx)
}

func (d *driver) stopBefore(ctx context.Context) error {
	if !d.j.cfg.NoCheckpoint {
		if _, _, err := d.checkpointRetry(ctx, true, false); err != nil {
			return err
		}
	}
	return d.drain(ctx)
}

// drain ends every subtask after the final checkpoint.
func (d *driver) drain(ctx context.Context) error {
	if err := d.broadcast(ctx, operator.Msg{Kind: operator.End}); err != nil {
		return err
	}
	return d.lake.Flush(ctx, d.lakeEpoch)
}

// checkpoint takes aligned checkpoint n: record n as the epoch high-water
// mark (before any write can carry it), save the source positions, inject
// the barrier, collect every subtask's acknowledgement and state, write the
// Pebble checkpoint and the metadata, then let the graph go on.
func (d *driver) checkpoint(ctx context.Context, procMs int64, final bool) (Meta, error) {
	m, _, err := d.checkpointAs(ctx, procMs, final, false)
	return m, err
}

// checkpointAs takes a checkpoint, also kept as a savepoint if savepoint is
// set; it returns the savepoint's location. Every failure is counted.
func (d *driver) checkpointAs(ctx context.Context, procMs int64, final, savepoint bool) (Meta, string, error) {
	m, loc, err := d.checkpointOnce(ctx, procMs, final, savepoint)
	if err != nil {
		d.j.m.ckpts.WithLabelValues("failed").Inc()
		return m, loc, err
	}
	d.ckptFails, d.ckptRetryAt = 0, 0
	d.j.setFailing(false)
	return m, loc, nil
}

func (d *driver) checkpointOnce(ctx context.Context, procMs int64, final, savepoint bool) (Meta, string, error) {
	j := d.j
	id := j.nextID
	j.nextID++
	began := time.Now()
	if err := j.ckpts.setHigh(ctx, id); err != nil {
		return Meta{}, "", err
	}
	d.sm.Flush()
	if err := d.deliver(ctx, nil); err != nil {
		return Meta{}, "", err
	}
	positions := d.src.Positions()
	if err := d.lake.Flush(ctx, d.lakeEpoch); err != nil {
		return Meta{}, "", err
	}
	d.lakeEpoch = id
	b := &barrier{id: id, final: final, resume: make(chan struct{})}
	defer close(b.resume)
	d.sm.Broadcast(operator.Msg{Kind: operator.Barrier, Ckpt: id, ProcMs: procMs})
	if err := d.deliver(ctx, b); err != nil {
		return Meta{}, "", err
	}
	floors := make([]int64, len(j.pres))
	forgotten := make([]int64, len(j.pres))
	var win, late []operator.Blob
	var errs []error
	winWm := int64(math.MaxInt64)
	for n := 0; n < len(j.pres)+len(j.wins); n++ {
		var a ack
		select {
		case a = <-j.acks:
			j.beat()
		case <-ctx.Done():
			return Meta{}, "", context.Cause(ctx)
		}
		if a.err != nil {
			errs = append(errs, fmt.Errorf("%s subtask %d: %w", a.role, a.index, a.err))
		}
		if a.role == "pre" {
			floors[a.index] = a.floor
			forgotten[a.index] = a.forgotten
		} else {
			winWm = min(winWm, a.wm)
		}
		win = append(win, a.win...)
		late = append(late, a.late...)
	}
	if err := errors.Join(errs...); err != nil {
		return Meta{}, "", fmt.Errorf("runtime: checkpoint %d: %w", id, err)
	}
	aligned := time.Since(began)
	meta, loc, err := d.write(ctx, id, positions, cut{floors: floors, forgotten: forgotten}, win, late, final, savepoint, began)
	if err != nil {
		return Meta{}, "", err
	}
	end := procMs
	if !d.virtual {
		end = d.j.cfg.Clock.NowMs()
	}
	d.sched.Completed(procMs, end)
	if !final {
		// Every window closed by winWm was closed, and its rows written,
		// before this checkpoint completed.
		d.wipes.checkpointed(ckptDone{began: began, closedBy: winWm, oldest: d.forgotten})
	}
	j.ckptCount++
	j.m.ckpts.WithLabelValues("completed").Inc()
	if !final {
		d.sweepDue(ctx, id)
	}
	j.m.ckptDuration.Observe(float64(meta.DurationMs) / 1000)
	j.m.ckptSize.Set(float64(meta.SizeBytes))
	j.m.ckptUploaded.Set(float64(meta.Uploaded))
	j.m.lastCkptID.Set(float64(id))
	j.m.lastCkptTime.Set(float64(time.Now().UnixMilli()) / 1000)
	j.mu.Lock()
	j.status.LastCheckpoint = &meta
	j.mu.Unlock()
	j.log.Debug("checkpoint", "id", id, "duration_ms", meta.DurationMs, "aligned_ms", aligned.Milliseconds(),
		"size_bytes", meta.SizeBytes, "final", final)
	return meta, loc, nil
}

// cut is what the pre-aggregators saved at a barrier.
type cut struct {
	floors, forgotten []int64
}

func (d *driver) write(ctx context.Context, id int64, positions map[string]string, pc cut, win, late []operator.Blob, final, savepoint bool, began time.Time) (Meta, string, error) {
	j := d.j
	for _, op := range []struct {
		name  string
		blobs []operator.Blob
	}{{"win", win}, {"late", late}} {
		if err := j.st.DeleteBlobs(op.name); err != nil {
			return Meta{}, "", fmt.Errorf("runtime: checkpoint %d: %w", id, err)
		}
		for _, b := range op.blobs {
			if err := j.st.PutBlob(op.name, b.KG, b.Data); err != nil {
				return Meta{}, "", fmt.Errorf("runtime: checkpoint %d: %w", id, err)
			}
		}
	}
	// A running-total store that writes back (the embedded one) makes
	// everything set before this barrier durable before the checkpoint can
	// be restored. It writes its own store, so it runs beside the state
	// checkpoint; both finish before the checkpoint is put.
	syncDone := d.startSync(ctx)
	fp, desc := j.cfg.fingerprint()
	wm := d.sm.Watermarks().Current()
	endOfInput := wm == math.MaxInt64 && d.eof
	if wm == math.MaxInt64 && !endOfInput {
		// A drained stop of a live source: the hours are not complete,
		// whatever the drain fired; the last real watermark says how far
		// they are.
		wm = floorsMin(pc.floors)
	}
	if wm == eventtime.NoWatermark && len(pc.floors) > 0 {
		// Nothing read since a restore: the restored floors are the last
		// real watermark, and what they closed stays closed. Recording none
		// would move the recount's readiness (and a sweep's rebuild bound)
		// back until records arrive.
		wm = floorsMin(pc.floors)
	}
	var shards []string
	for _, s := range d.sm.Watermarks().Shards() {
		if !s.Closed {
			shards = append(shards, s.ID)
		}
	}
	meta := Meta{ID: id, JobGen: j.cfg.JobGen, Fingerprint: fp, Settings: desc, Positions: positions, Floors: pc.floors,
		Forgotten: pc.forgotten, Shards: shards, Watermark: wm, AllowanceMs: new(j.cfg.allowance()), Parallelism: j.cfg.Parallelism, Restored: j.c,
		TakenAtMs: d.sm.ProcMs(), Final: final, EndOfInput: endOfInput}
	meta, loc, err := j.ckpts.put(ctx, meta, savepoint, began, func(dir string) error {
		cerr := j.st.Checkpoint(filepath.Join(dir, "state"))
		if cerr != nil {
			cerr = fmt.Errorf("runtime: checkpoint %d: %w", id, cerr)
		}
		if serr := syncDone(); serr != nil {
			cerr = errors.Join(cerr, fmt.Errorf("runtime: checkpoint %d: sync running totals: %w", id, serr))
		}
		return cerr
	})
	// Also when put failed before calling the function: no sync outlives
	// the checkpoint.
	_ = syncDone()
	if err != nil {
		return Meta{}, "", err
	}
	meta.DurationMs = time.Since(began).Milliseconds()
	if err := j.ckpts.prune(ctx); err != nil {
		j.log.Warn("checkpoint prune failed; old checkpoints stay until the next one", "err", err)
	}
	d.forgetEpochs(ctx)
	return meta, loc, nil
}

// TotalsSyncer is an optional capability of a running-total store that
// writes back (the embedded one): Sync makes everything set so far durable.
// The job syncs it beside every checkpoint, so that a checkpoint is never
// restorable before the totals it covers are.
type TotalsSyncer interface{ Sync(context.Context) error }

// startSync starts the running-total store's sync, if it has one, and
// returns a function that waits for it and returns its error (the same
// error on every call).
func (d *driver) startSync(ctx context.Context) func() error {
	ts, ok := d.j.totals.(TotalsSyncer)
	if !ok {
		return func() error { return nil }
	}
	ch := make(chan error, 1)
	go func() { ch <- ts.Sync(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { err = <-ch })
		return err
	}
}

// forgetEpochs drops the running-total store's bookkeeping of epochs no
// restore can go back to: below the oldest kept checkpoint and every
// savepoint. A failure only leaves bookkeeping to expire.
func (d *driver) forgetEpochs(ctx context.Context) {
	j := d.j
	if j.totals == nil {
		return
	}
	oldest, ok := j.ckpts.oldestRestorable(ctx)
	if !ok || oldest <= d.forgotten {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := j.totals.ForgetEpochs(fctx, d.forgotten, oldest); err == nil {
		d.forgotten = oldest
	}
}

// unixSeconds returns a watermark (Unix ms) as Prometheus wants times: in
// seconds; NoWatermark as 0.
func unixSeconds(ms int64) float64 {
	if ms == eventtime.NoWatermark {
		return 0
	}
	return float64(ms) / 1000
}

func floorsMin(f []int64) int64 {
	m := int64(math.MaxInt64)
	for _, v := range f {
		m = min(m, v)
	}
	return m
}
