// Package fleet runs one worker of a job that several processes share
// (docs/scale-out.md). The job's 128 key groups are cut into ranges, one
// lease item each in DynamoDB (package lease). A worker holds a slot lease
// (so the others count it) and, round after round, does what lease.Balance
// plans for it: take free and expired ranges up to its share, ask a loaded
// worker for one, hand over a range another worker asked for. For every
// range it holds it runs a range pipeline: a runtime.Job restricted to the
// range's key groups (runtime.Config.KeyGroups), fenced by the range's
// claim, with its own data dir, checkpoint prefix, tag-index scope and lake
// scope, reading every shard of the stream from its own positions.
//
// A worker that dies stops renewing; after a lease duration the others
// take its ranges, and each new holder restores the range's latest
// checkpoint and runs the range's full flush before it reads, exactly as a
// single process does after a crash, touching no other range. A handed-over
// range ends with a final checkpoint, and its claim is released, so the
// asker takes it without waiting.
//
// This is the first stage of the note's design: each range pipeline has its
// own feed (the note's catch-up feed, never joined to a shared one), so a
// worker reads every shard once per range it holds, and ranges are fixed
// at setup (no split or merge). The note's §15 lists what follows.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/windowing"
)

// Options configures Run.
type Options struct {
	// Worker is this worker's side of the lease table. Required.
	Worker *lease.Worker
	// Config returns the configuration of the pipeline of range r: its own
	// DataDir, checkpoint store (a prefix of its own), scoped sinks and the
	// source opener, every field but KeyGroups, Lease, Logger and
	// Registerer, which Run sets. It is called each time the worker starts
	// the range. Required.
	Config func(r windowing.KeyGroups) (runtime.Config, error)
	// Slots is the number of slot leases (the most workers the job runs at
	// once). Default 16.
	Slots int
	// ScanEvery is the time between two rounds of the balancer. Default a
	// third of the lease duration.
	ScanEvery time.Duration
	// Logger receives the worker's decisions; each pipeline logs with the
	// attribute range=kg<from>-<to>. Default: discard.
	Logger *slog.Logger
	// Registerer receives the worker's metrics (one Fleet per registry).
	// Each pipeline registers its own in a registry of its own, labelled
	// range=kg<from>-<to>, which Gatherer serves while the pipeline runs.
	// nil: none.
	Registerer prometheus.Registerer
	// OnRange, if set, is called when a range pipeline has opened
	// (restored and flushed, about to read: job is its runtime.Job) and
	// once more with a nil job when it has stopped (err is why, nil for a
	// clean stop). For the status endpoint and tests; it must not block.
	OnRange func(r windowing.KeyGroups, job *runtime.Job, err error)
	// SweepDelay is how long after taking a range over a worker waits
	// before its fence sweep (docs/scale-out.md §6.5.4): past it, no write
	// the old holder signed before the takeover can still land. Default
	// DefaultSweepDelay.
	SweepDelay time.Duration
	// FenceMarks, if set, ties the lease table's fences to the rows table
	// (see FenceMarks): Run refuses to start when a key group's mark is
	// above the lease table's counters, and each range raises the marks of
	// its key groups to its take's fence before its pipeline opens,
	// refused if one is above it. nil: neither (the embedded store).
	FenceMarks FenceMarks
	// JobGen is the job_gen the ranges write under (their Config's
	// runtime.Config.JobGen, which must agree), the generation whose fence
	// marks are checked. Default 1.
	JobGen int64
}

// DefaultSlots is Options.Slots's default.
const DefaultSlots = 16

// Fleet is a running worker. Create it with New, then call Run once.
type Fleet struct {
	o   Options
	w   *lease.Worker
	log *slog.Logger
	m   *metrics

	mu     sync.Mutex
	ranges map[string]*pipeline // by lease key
	done   chan *pipeline
	// resting holds ranges whose pipeline failed here, until when this
	// worker leaves them to the others (a range that fails on every start
	// must not spin on one worker).
	resting map[string]time.Time
	// unclean collects, once the worker stops, the errors of the ranges
	// that did not stop cleanly (only on Run's goroutine).
	unclean []error
}

// pipeline is one range pipeline and its goroutine.
type pipeline struct {
	key   string
	r     windowing.KeyGroups
	claim *lease.Claim
	stop  context.CancelFunc
	reg   *prometheus.Registry
	err   error // set before done is sent
	// handoff is set when the range is being handed over (under jobMu:
	// runPipeline reads it); stopped when this worker stopped it (a handoff
	// or the worker's own stop). Both only on Run's goroutine otherwise.
	handoff, stopped bool
	// atStop is set when the pipeline ended with the worker's own stop
	// (on Run's goroutine): it was running when the stop came. Only such
	// a range can make the stop unclean; one that failed during an
	// earlier handoff is booked then, not again at the stop.
	atStop bool

	jobMu sync.Mutex
	job   *runtime.Job
}

// cleanStopFailed reports whether a pipeline that ended with an error
// after its worker stopped it had been running: its job had opened
// (restored, flushed), and the error is not that of a source still
// opening when the stop came (cancelled: nothing was read yet). Such a
// range ended without its final checkpoint.
func (p *pipeline) cleanStopFailed() bool {
	p.jobMu.Lock()
	opened := p.job != nil
	p.jobMu.Unlock()
	if p.err == nil || !opened {
		return false
	}
	return errors.Is(p.err, lease.ErrLost) || !errors.Is(p.err, context.Canceled)
}

// finish books a pipeline that ended, and remembers it if it ended with
// the worker's stop without stopping cleanly.
func (f *Fleet) finish(p *pipeline) {
	f.ended(p)
	if p.atStop && p.cleanStopFailed() {
		f.unclean = append(f.unclean, p.err)
	}
}

// New checks o and returns the worker.
func New(o Options) (*Fleet, error) {
	var errs []error
	if o.Worker == nil {
		errs = append(errs, errors.New("no lease worker"))
	}
	if o.Config == nil {
		errs = append(errs, errors.New("no range configuration (Config)"))
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.Slots < 1 {
		errs = append(errs, fmt.Errorf("slots %d must be at least 1", o.Slots))
	}
	if o.ScanEvery < 0 {
		errs = append(errs, fmt.Errorf("scan interval %s must not be negative", o.ScanEvery))
	}
	if o.SweepDelay < 0 {
		errs = append(errs, fmt.Errorf("sweep delay %s must not be negative", o.SweepDelay))
	}
	if o.SweepDelay == 0 {
		o.SweepDelay = DefaultSweepDelay
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("fleet: %w", errors.Join(errs...))
	}
	if o.ScanEvery == 0 {
		o.ScanEvery = max(o.Worker.Options().Duration/3, 10*time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Fleet{o: o, w: o.Worker, log: o.Logger.With("worker", o.Worker.ID()), m: newMetrics(o.Registerer, o.Worker.Job()),
		ranges: map[string]*pipeline{}, done: make(chan *pipeline, 1), resting: map[string]time.Time{}}, nil
}

// Run works until ctx ends: then every range pipeline stops with a final
// checkpoint (drained if Config.Drain says so: with it, every range this
// worker holds drains, though the other workers go on with them, so it is
// for stopping a whole fleet), its claim and the slot are released, and Run
// returns nil, or an error if a running range could not stop cleanly. A
// failing range pipeline is logged, its range released and left to the
// others for a while, and the worker goes on; a lost slot is taken again.
func (f *Fleet) Run(ctx context.Context) (err error) {
	if err := f.checkFenceMarks(ctx); err != nil {
		return err
	}
	watcher := lease.NewWatcher()
	bo := f.w.BalanceOptions()
	var slot *lease.Claim
	var slotDone chan error
	defer func() {
		if serr := f.stopAll(); serr != nil && err == nil {
			err = serr
		}
		if slot != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := slot.Release(rctx); err != nil {
				f.log.Warn("releasing the slot failed", "err", err)
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-f.done:
			if ctx.Err() != nil {
				// It ended with the worker's stop (a range being handed
				// over was not running: its end is the handoff's).
				p.stopped, p.atStop = true, !p.handoff
			}
			f.finish(p)
			continue
		case err := <-slotDone:
			f.log.Warn("slot lease lost; taking a slot again", "err", err)
			slot, slotDone = nil, nil
		case <-timer.C:
		}
		timer.Reset(f.o.ScanEvery)
		scan, err := f.w.Scan(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.m.scanErrors.Inc()
			f.log.Warn("reading the lease table failed; trying again next round", "err", err)
			continue
		}
		snap := watcher.Observe(scan)
		if snap.Map == nil {
			f.log.Warn("the job has no ranges in the lease table: run adclick setup with --ranges")
			continue
		}
		if slot == nil {
			it, ok := lease.ChooseSlot(snap, f.w.Job(), scan.At, f.o.Slots, bo)
			if !ok {
				f.log.Warn("every slot is held by a live worker; waiting", "slots", f.o.Slots)
				continue
			}
			c, err := f.w.Take(ctx, it)
			if err != nil {
				f.log.Info("taking a slot failed; trying again next round", "slot", it.Key, "err", err)
				continue
			}
			slot, slotDone = c, make(chan error, 1)
			go func(c *lease.Claim, done chan error) { done <- c.Run(context.WithoutCancel(ctx)) }(slot, slotDone)
			f.log.Info("slot taken", "slot", it.Key)
			// Count this worker before taking ranges: the next round sees
			// the slot.
			continue
		}
		f.round(ctx, lease.Balance(snap, f.w.ID(), scan.At, bo))
	}
}

// round carries out one plan.
func (f *Fleet) round(ctx context.Context, p lease.Plan) {
	f.m.target.Set(float64(p.Target))
	f.m.workers.Set(float64(p.Workers))
	for _, it := range p.Cancel {
		if err := f.w.CancelHandoff(ctx, it); err != nil && !errors.Is(err, lease.ErrChanged) {
			f.log.Warn("removing a handoff request failed", "lease", it.Key, "err", err)
		}
	}
	for _, it := range p.HandOff {
		f.mu.Lock()
		pl := f.ranges[it.Key]
		f.mu.Unlock()
		if pl != nil && !pl.handoff {
			f.m.handoffs.Inc()
			f.log.Info("handing a range over", "range", pl.r.String(), "to", it.HandoffTo)
			pl.jobMu.Lock()
			pl.handoff = true
			if pl.job != nil {
				// The range goes on at the asker: its open windows must not
				// fire now (Config.Drain is for a stop of the whole job).
				// A pipeline still opening sees handoff once it has its job.
				pl.job.SetDrain(false)
			}
			pl.jobMu.Unlock()
			pl.stopped = true
			pl.stop()
		}
	}
	for _, it := range p.Take {
		if ctx.Err() != nil {
			return // stopping: take nothing more
		}
		f.mu.Lock()
		_, running := f.ranges[it.Key]
		f.mu.Unlock()
		if running {
			continue // a tenure of ours still stopping
		}
		if f.isResting(it.Key) {
			continue
		}
		// The take and its confirmation are not cut short by a stop: a take
		// applied but unconfirmed would leave the range to a dead tenure for
		// a lease duration. A range taken as the worker stops is released.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.w.Options().Duration/3)
		c, err := f.w.Take(tctx, it)
		if err != nil {
			cancel()
			if !errors.Is(err, lease.ErrChanged) {
				f.log.Warn("taking a range failed", "lease", it.Key, "err", err)
			}
			continue
		}
		if ctx.Err() != nil {
			if err := c.Release(tctx); err != nil {
				f.log.Warn("releasing a range taken while stopping failed; it is free once its lease lapses", "lease", it.Key, "err", err)
			}
			cancel()
			return
		}
		cancel()
		f.start(ctx, c)
	}
	if p.Ask != nil && f.isResting(p.Ask.Key) {
		p.Ask = nil // it just failed here: leave it where it runs
	}
	if p.Ask != nil {
		if err := f.w.AskHandoff(ctx, *p.Ask); err != nil && !errors.Is(err, lease.ErrChanged) {
			f.log.Warn("asking for a range failed", "lease", p.Ask.Key, "err", err)
		} else if err == nil {
			f.log.Info("asked for a range", "lease", p.Ask.Key, "holder", p.Ask.Worker)
		}
	}
}

// isResting reports whether the range of key failed here lately (and
// forgets it once its rest is over).
func (f *Fleet) isResting(key string) bool {
	until, ok := f.resting[key]
	if ok && !time.Now().Before(until) {
		delete(f.resting, key)
		return false
	}
	return ok
}

// start runs the pipeline of the range claim holds.
func (f *Fleet) start(ctx context.Context, c *lease.Claim) {
	r := c.Range()
	rctx, stop := context.WithCancel(ctx)
	p := &pipeline{key: c.Key(), r: r, claim: c, stop: stop, reg: prometheus.NewRegistry()}
	f.mu.Lock()
	f.ranges[p.key] = p
	f.mu.Unlock()
	f.m.held.Inc()
	f.m.starts.Inc()
	f.log.Info("range taken", "range", r.String(), "fence", c.Fence(), "previous_owner", c.Item().LastOwner)
	go func() {
		p.err = f.runPipeline(rctx, p)
		f.done <- p
	}()
}

func (f *Fleet) runPipeline(ctx context.Context, p *pipeline) error {
	log := f.o.Logger.With("range", p.r.String())
	// Whatever happens, the claim ends with the pipeline: a range nobody
	// runs must be free for the next round.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.claim.Release(rctx); err != nil {
			log.Warn("releasing the range failed; it is free once its lease lapses", "err", err)
		}
	}()
	cfg, err := f.o.Config(p.r)
	if err != nil {
		return fmt.Errorf("fleet: configure range %s: %w", p.r, err)
	}
	cfg.KeyGroups = p.r
	cfg.Logger = log
	cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"range": p.r.String()}, p.reg)
	claim := claimLease{p.claim}
	cfg.Lease = &runtime.LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (runtime.Lease, error) {
		return claim, nil
	}}
	if err := f.raiseFenceMark(ctx, p, cfg); err != nil {
		return err
	}
	if err := f.oweSweep(ctx, p.r, p.claim); err != nil {
		return err
	}
	job, err := runtime.Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("fleet: open range %s: %w", p.r, err)
	}
	p.jobMu.Lock()
	p.job = job
	if p.handoff {
		job.SetDrain(false) // asked for while the range was opening
	}
	p.jobMu.Unlock()
	if f.o.OnRange != nil {
		f.o.OnRange(p.r, job, nil)
	}
	err = job.Run(ctx)
	if cerr := job.Close(); cerr != nil && err == nil && !errors.Is(cerr, lease.ErrLost) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fleet: range %s: %w", p.r, err)
	}
	return nil
}

// claimLease is a range's claim as its pipeline holds it: a
// runtime.CommitLease, so the range's epochs are opened and its
// checkpoints committed in its lease item, and a new holder restores the
// checkpoint committed there.
type claimLease struct{ *lease.Claim }

var _ runtime.CommitLease = claimLease{}

// Committed returns the range's progress as the take read it (the item
// changes later only by this holder's own writes).
func (c claimLease) Committed() (int64, string, int64) {
	it := c.Item()
	return it.Checkpoint.ID, it.Checkpoint.Key, it.EpochHigh
}

func (c claimLease) Commit(ctx context.Context, id int64, key string, wm int64) error {
	return c.Claim.Commit(ctx, lease.Checkpoint{ID: id, Key: key, Watermark: wm})
}

// Release of a range that was lost already is no error.
func (c claimLease) Release(ctx context.Context) error {
	if err := c.Claim.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
		return err
	}
	return nil
}

// ended books a pipeline that stopped.
func (f *Fleet) ended(p *pipeline) {
	f.mu.Lock()
	delete(f.ranges, p.key)
	f.mu.Unlock()
	f.m.held.Dec()
	switch {
	case p.err == nil:
		f.log.Info("range stopped", "range", p.r.String(), "handoff", p.handoff)
	case p.handoff:
		f.log.Warn("range stopped during its handoff with an error; the asker restores its last checkpoint", "range", p.r.String(), "err", p.err)
	case errors.Is(p.err, lease.ErrLost):
		// Also while the worker stops: the range then ends without its
		// final checkpoint (and undrained), and its next holder restores
		// the last one.
		f.m.lost.Inc()
		f.log.Warn("range lost: its lease lapsed or was taken over, and its pipeline stopped without writing more", "range", p.r.String(), "stopping", p.stopped, "err", p.err)
	case p.stopped && !p.cleanStopFailed():
		f.log.Info("range stopped with the worker before it was running", "range", p.r.String(), "err", p.err)
	case p.stopped:
		f.m.failures.Inc()
		f.log.Error("range did not stop cleanly: it ended without its final checkpoint, and its next holder restores the last committed one",
			"range", p.r.String(), "err", p.err)
	default:
		f.m.failures.Inc()
		// Longer than the handoff timeout, after which the others take a
		// free range whatever their target (lease.Balance).
		wo := f.w.Options()
		rest := wo.HandoffTimeout + wo.Duration
		f.resting[p.key] = time.Now().Add(rest)
		f.log.Error("range pipeline failed; its lease is released, and this worker leaves the range to the others for a while",
			"range", p.r.String(), "rest", rest, "err", p.err)
	}
	if f.o.OnRange != nil {
		f.o.OnRange(p.r, nil, p.err)
	}
}

// stopAll stops every pipeline (each with a final checkpoint) and waits.
// It returns an error naming the ranges that had opened and then did not
// end cleanly (their lease lapsed, their final checkpoint failed): they
// stopped without their final checkpoint, undrained, and their next
// holder restores the last committed one.
func (f *Fleet) stopAll() error {
	f.mu.Lock()
	ps := slices.Collect(maps.Values(f.ranges))
	f.mu.Unlock()
	for _, p := range ps {
		p.stopped, p.atStop = true, !p.handoff
		p.stop()
	}
	for range ps {
		f.finish(<-f.done)
	}
	if len(f.unclean) > 0 {
		return fmt.Errorf("fleet: %d ranges did not stop cleanly (their next holder restores their last committed checkpoint): %w",
			len(f.unclean), errors.Join(f.unclean...))
	}
	return nil
}

// Held returns the ranges this worker runs now, in key-group order.
func (f *Fleet) Held() []windowing.KeyGroups {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []windowing.KeyGroups
	for _, p := range f.ranges {
		out = append(out, p.r)
	}
	slices.SortFunc(out, func(a, b windowing.KeyGroups) int { return a.From - b.From })
	return out
}

// Status returns the status of every running range pipeline that has
// opened, by range name.
func (f *Fleet) Status() map[string]runtime.Status {
	f.mu.Lock()
	ps := slices.Collect(maps.Values(f.ranges))
	f.mu.Unlock()
	out := map[string]runtime.Status{}
	for _, p := range ps {
		p.jobMu.Lock()
		j := p.job
		p.jobMu.Unlock()
		if j != nil {
			out[p.r.String()] = j.Status()
		}
	}
	return out
}

// Gatherer returns the metrics of the running range pipelines (each
// labelled with its range), for the metrics endpoint beside the process's
// own registry.
func (f *Fleet) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		f.mu.Lock()
		gs := make(prometheus.Gatherers, 0, len(f.ranges))
		for _, p := range f.ranges {
			gs = append(gs, p.reg)
		}
		f.mu.Unlock()
		return gs.Gather()
	})
}
