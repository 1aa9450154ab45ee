package runtime

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/operator"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/state"
	"github.com/adclick/adclick/windowing"
)

// savepointFlushMargin is how many epochs after a savepoint the flush of a
// start from it covers when the savepoint's own job may have gone on.
const savepointFlushMargin = 100

// Status is a snapshot of the job for the status endpoint and the progress
// line.
type Status struct {
	JobGen         int64                   `json:"job_gen"`
	Parallelism    int                     `json:"parallelism"`
	Source         string                  `json:"source"`
	KeyGroups      string                  `json:"key_groups,omitempty"` // the range owned, "" for all
	Restored       int64                   `json:"restored_checkpoint"`
	Ready          bool                    `json:"ready"`
	Done           bool                    `json:"done"`
	ProcessingMs   int64                   `json:"processing_ms"`
	WatermarkMs    int64                   `json:"watermark_ms"`
	WatermarkLagMs int64                   `json:"watermark_lag_ms"`
	Records        int64                   `json:"records"`
	Invalid        int64                   `json:"invalid"`
	Shards         []ingest.ShardWatermark `json:"shards"`
	LastCheckpoint *Meta                   `json:"last_checkpoint,omitempty"`
	Flush          *flush.Report           `json:"flush,omitempty"`
}

// Job is a running adclick job on one machine.
type Job struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	st  *state.DB
	// closeSinks closes the sinks Config.OpenSinks opened (nil otherwise).
	closeSinks io.Closer
	rows       sink.Rows
	totals     sink.Totals
	ckpts      *checkpoints
	startMs    int64 // the lineage's pinned start (ckpt.Store.PinStart)
	restored   Meta
	c          int64
	nextID     int64
	// epoch0 is the tag of the writes before the first checkpoint: c, or
	// above every epoch a predecessor may have written (a range claim).
	epoch0 int64
	// sweeps are the fence sweeps still owed (a SweepLease's), oldest
	// first; only the driver touches them once the job runs.
	sweeps     []Sweep
	lake       recount.Store
	sourceLake *recount.Writer
	pres       []*preSub
	// freeBatches returns click batches from the pre-aggregators to the
	// driver for reuse (a batch is the largest allocation per click).
	freeBatches chan []ingest.Click
	wins        []*winSub
	acks        chan ack
	ctl         chan ctlReq
	done        chan struct{}

	lock  *dataLock
	lease *jobLease // nil without Config.Lease
	// plainTotals is the running-total store itself (j.totals may wrap it
	// in the lease's fence), for the capabilities a wrapper hides.
	plainTotals sink.Totals
	restoreMs   int64
	// lag is the running source's consumer lag, if it reports one.
	lag source.Lagger
	// virtualSrc: the running source replays with a virtual clock.
	virtualSrc bool
	ckptCount  int64

	mu      sync.Mutex
	status  Status
	failing bool // checkpoints are failing (being retried)
	// lastBeat is when the driver last made progress (Unix ns): a loop
	// iteration or a subtask's answer to a barrier.
	lastBeat atomic.Int64
	// drain is Config.Drain, as SetDrain last changed it: read when the
	// run stops.
	drain atomic.Bool
	// fence is the FenceLease's fence that every row write carries (0:
	// none).
	fence int64
}

// stallAfter is how long the driver may go without progress before the
// job reports not ready: a loop iteration comes at least every watermark
// interval, and a checkpoint's barrier answers well within this.
const stallAfter = 15 * time.Second

// SetDrain changes, for the next stop by context, whether the watermark
// first advances to the end of time (Config.Drain): a worker handing a
// range over to another stops it without draining, so that its open
// windows go on filling at the new owner, while a stop of the whole job
// drains as configured.
func (j *Job) SetDrain(v bool) { j.drain.Store(v) }

func (j *Job) beat() { j.lastBeat.Store(time.Now().UnixNano()) }

func (j *Job) setFailing(v bool) {
	j.mu.Lock()
	j.failing = v
	j.mu.Unlock()
}

// Open prepares a job: it restores the latest checkpoint under DataDir (or
// starts from the empty state, checkpoint 0), and runs the full flush of
// every epoch ≥ c that an earlier run may have written, before anything is
// read. The returned job has not started reading.
func Open(ctx context.Context, cfg Config) (*Job, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: data dir: %w", err)
	}
	// Nothing under DataDir is touched before this job holds it alone.
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := checkFreeSpace(cfg.DataDir); err != nil {
		lock.release()
		return nil, err
	}
	j := &Job{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), ctl: make(chan ctlReq), done: make(chan struct{}), lock: lock}
	j.drain.Store(cfg.Drain)
	if cfg.Lease != nil {
		if err := j.acquireLease(ctx); err != nil {
			j.Close()
			return nil, err
		}
	}
	// Scratch folders of checkpoints a killed run was building: they hold
	// old state files alive through hard links.
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "scratch")); err != nil {
		j.Close()
		return nil, fmt.Errorf("runtime: remove checkpoint scratch: %w", err)
	}
	if j.ckpts, err = newCheckpoints(cfg.DataDir, cfg.Checkpoints, cfg.OpenCheckpoints, cfg.CheckpointsKept, cfg.Logger); err != nil {
		j.Close()
		return nil, err
	}
	if j.lease != nil {
		j.ckpts.commits, _ = j.lease.l.(CommitLease)
	}
	var meta Meta
	var found bool
	ckptDir := ""
	if cfg.FromSavepoint != "" {
		if ckptDir, meta, err = j.ckpts.savepoint(ctx, cfg.FromSavepoint, cfg.SavepointStore); err != nil {
			j.Close() // a refused start holds nothing: the data dir's lock, the lease
			return nil, fmt.Errorf("runtime: savepoint %s: %w", cfg.FromSavepoint, err)
		}
		found = true
	} else if ckptDir, meta, found, err = j.ckpts.latest(ctx); err != nil {
		j.Close()
		return nil, err
	}
	defer j.ckpts.cleanRestore()
	fp, desc := cfg.fingerprint()
	if found && meta.Fingerprint != fp {
		j.Close()
		return nil, fmt.Errorf("runtime: checkpoint %d in %s was taken with settings {%s}, but this job has {%s}; restoring it would misread its state: start with the same settings, or with a new --data directory",
			meta.ID, cfg.DataDir, meta.Settings, desc)
	}
	stateDir := filepath.Join(cfg.DataDir, "state")
	if found {
		j.st, err = state.OpenFromCheckpoint(filepath.Join(ckptDir, "state"), stateDir, state.Options{})
	} else {
		if err = os.RemoveAll(stateDir); err == nil {
			j.st, err = state.Open(stateDir, state.Options{})
		}
	}
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("runtime: open state: %w", err)
	}
	j.rows, j.totals = cfg.Rows, cfg.Totals
	if j.rows == nil {
		// Local sinks (the embedded store under DataDir) open once the
		// data dir is this job's.
		var rows sink.Rows
		var totals sink.Totals
		rows, totals, j.closeSinks, err = cfg.OpenSinks()
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("runtime: open sinks: %w", err)
		}
		j.rows = rows
		if j.totals == nil {
			j.totals = totals
		}
	}
	if found {
		j.restored = meta
		j.c = meta.ID
	}
	high, wrote, err := j.ckpts.high(ctx)
	if err != nil {
		j.Close()
		return nil, err
	}
	// The tag of the first writes. A range claim may have a predecessor
	// that was taken over while writing epochs up to the high the take
	// read: this holder writes above them, so that a fence sweep can tell
	// every write tagged there for a predecessor's (SweepLease).
	j.epoch0 = j.c
	if j.ckpts.commits != nil && cfg.FromSavepoint == "" && (found || wrote) {
		j.epoch0 = max(high, j.c) + 1
	}
	if j.lease != nil {
		if sl, ok := j.lease.l.(SweepLease); ok {
			j.sweeps = sl.SweepsDue()
		}
	}
	j.lake = cfg.Lake
	if j.lake == nil {
		if j.lake, err = cfg.OpenLake(); err != nil {
			j.Close()
			return nil, fmt.Errorf("runtime: lake: %w", err)
		}
	}
	localLake, _ := j.lake.(tempRemover)
	// From here on every write goes through the lease, if the job has one:
	// the flush, the lake's cleaning, checkpoints and the graph's output.
	if err := j.fenceWrites(); err != nil {
		j.Close()
		return nil, err
	}
	if err := j.build(); err != nil {
		j.Close()
		return nil, err
	}
	if err := j.restoreState(found); err != nil {
		j.Close()
		return nil, err
	}
	if cfg.FromSavepoint != "" || j.ckpts.commits != nil {
		// Checkpoints after the savepoint belong to a lineage this start
		// abandons (ids after the savepoint are reused by the new one).
		// Only now, once the savepoint is known to restore: a refused start
		// leaves them in place. Likewise checkpoints after the one a
		// CommitLease names: uploads a holder never committed.
		if err := j.ckpts.dropAfter(ctx, meta.ID); err != nil {
			j.Close()
			return nil, err
		}
	}
	var rep *flush.Report
	// Every start from a checkpoint or savepoint flushes (DESIGN §6), and so
	// does a fresh start after a run that wrote without completing a
	// checkpoint. A savepoint may come from another job's data dir, whose
	// high-water mark is not known here: cover a margin of epochs after it.
	flushHigh := max(high, j.c)
	if cfg.FromSavepoint != "" {
		flushHigh = max(flushHigh, j.c+savepointFlushMargin)
	}
	if wrote || found {
		r, err := flush.Full(ctx, j.rows, j.totals, flushState{j}, flushTotals{j}, flush.Options{
			Restored: j.c, High: flushHigh, RewriteEpoch: j.epoch0, Gen: cfg.JobGen, Fence: j.fence, WritesPerSec: cfg.FlushWritesPerSec,
			Registerer: cfg.Registerer, Logger: j.log, Progress: cfg.FlushProgress,
		})
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("runtime: full flush after restoring checkpoint %d: %w", j.c, err)
		}
		rep = &r
		if cfg.VerifyFlush && j.totals != nil {
			if err := j.verifyTotals(ctx); err != nil {
				j.Close()
				return nil, err
			}
		}
	}
	// The lake is a writer like the others: objects of epochs ≥ c hold
	// verdicts the restored run has not made. A local lake may also hold
	// temporary files of a writer killed mid-write.
	// (Only a job owning every key group may: a range pipeline may share
	// the folder with live ones, and readers skip such files anyway.)
	if localLake != nil && cfg.KeyGroups.All() {
		if _, err := localLake.RemoveTemp(); err != nil {
			j.Close()
			return nil, err
		}
	}
	removed, err := recount.RemoveEpochsIn(ctx, j.lake, cfg.KeyGroups.Scope(), j.c)
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("runtime: clean the lake after restoring checkpoint %d: %w", j.c, err)
	}
	// A fenced tenure names its lake objects with its fence, and records
	// before its first object that it writes epochs ≥ c: the recount then
	// reads epochs ≥ c only from this tenure's objects, never from a
	// paused predecessor's late ones (docs/scale-out.md §6.5.6).
	if j.fence > 0 {
		if err := recount.OpenFence(ctx, j.lake, cfg.KeyGroups.Scope(), j.fence, j.c); err != nil {
			j.Close()
			return nil, fmt.Errorf("runtime: after restoring checkpoint %d: %w", j.c, err)
		}
	}
	// Checkpoint ids never go down: continue after anything an earlier run
	// may have used; a savepoint start continues at its id + 1.
	j.nextID = max(high, j.epoch0) + 1
	if cfg.FromSavepoint != "" {
		j.nextID = j.c + 1
	}
	if err := j.ckpts.setHigh(ctx, max(high, j.epoch0)); err != nil {
		j.Close()
		return nil, err
	}
	// Pin when this lineage first started reading, before the source
	// opens: a "latest" start of a shard without a saved position means
	// that time on every later start too (source.Start.StartMs).
	if j.startMs, err = j.ckpts.store.PinStart(ctx, cfg.Clock.NowMs()-startPinMarginMs); err != nil {
		j.Close()
		return nil, fmt.Errorf("runtime: %w", err)
	}
	d := time.Since(start)
	j.m.restoreSecs.Set(d.Seconds())
	j.restoreMs = d.Milliseconds()
	if found {
		j.m.restores.Inc()
	}
	if found || wrote {
		j.log.Info("restored", "checkpoint", j.c, "found", found, "epoch_high", high,
			"lake_objects_removed", removed, "duration", d.Round(time.Millisecond))
	}
	j.status = Status{JobGen: cfg.JobGen, Parallelism: cfg.Parallelism, Source: cfg.Source, KeyGroups: cfg.KeyGroups.Scope(), Restored: j.c,
		WatermarkMs: eventtime.NoWatermark, Flush: rep}
	if found {
		mc := meta
		j.status.LastCheckpoint = &mc
	}
	return j, nil
}

func (j *Job) build() error {
	p := j.cfg.Parallelism
	j.acks = make(chan ack, 2*p)
	wins := make([]chan toWin, p)
	for i := range wins {
		wins[i] = make(chan toWin, j.cfg.ChannelCapacity*p)
	}
	freeParts := make(chan []preagg.Partial, 2*p*(j.cfg.ChannelCapacity*p+2))
	j.freeBatches = make(chan []ingest.Click, p*(j.cfg.ChannelCapacity+2))
	for i := 0; i < p; i++ {
		mins, err := windowing.NewMinutes(j.cfg.PreAgg.WindowMs)
		if err != nil {
			return err
		}
		late := latepath.New(j.cfg.PreAgg.HorizonMs)
		op, err := operator.NewWin(operator.WinOptions{Index: i, Inputs: p, EarlyFiringMs: j.cfg.EarlyFiringMs,
			Epoch: j.epoch0, Restored: j.c, Gen: j.cfg.JobGen}, mins, late)
		if err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
		j.wins = append(j.wins, &winSub{idx: i, op: op, minutes: mins, late: late, in: wins[i], acks: j.acks,
			outage: time.Duration(j.cfg.SinkOutageMs) * time.Millisecond,
			rows:   j.rows, totals: j.totals, m: j.m, log: j.log, freeParts: freeParts})
	}
	var err error
	if j.sourceLake, err = recount.NewFencedWriter(j.lake, j.cfg.KeyGroups.Scope(), j.fence, "source"); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	for i := 0; i < p; i++ {
		from, to := windowing.Range(i, p)
		var d preagg.Dedup
		var dd *state.Dedup
		if !j.cfg.NoDedup {
			dd = j.st.NewDedup()
			dd.SetFilterBudget(int(j.cfg.DedupMemoryBytes / int64(p)))
			d = dd
		}
		pa, err := preagg.New(j.cfg.PreAgg, d, from, to)
		if err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
		op, err := operator.NewPre(operator.PreOptions{Index: i, Windows: p, HorizonMs: j.cfg.PreAgg.HorizonMs, Epoch: j.epoch0,
			NewPartials: newPartials(freeParts)}, pa, d)
		if err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
		lw, err := recount.NewFencedWriter(j.lake, j.cfg.KeyGroups.Scope(), j.fence, "preagg-"+strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
		j.pres = append(j.pres, &preSub{idx: i, op: op, pa: pa, dedup: dd, in: make(chan toPre, j.cfg.ChannelCapacity), outs: wins,
			acks: j.acks, lake: lw, m: j.m, free: j.freeBatches})
	}
	return nil
}

// restoreState gives every subtask its part of the restored state: the
// floors (all of them: each subtask takes the minimum) and the window and
// late state of the key groups it owns.
func (j *Job) restoreState(found bool) error {
	if !found {
		return nil
	}
	for _, p := range j.pres {
		p.pa.Restore(j.restored.Floors)
		p.pa.RestoreForgotten(j.restored.Forgotten)
	}
	for _, op := range []string{"win", "late"} {
		err := j.st.Blobs(op, func(kg int, val []byte) error {
			w := j.wins[windowing.Owner(kg, j.cfg.Parallelism)]
			if op == "win" {
				return w.minutes.Restore(val)
			}
			return w.late.Restore(val)
		})
		if err != nil {
			return fmt.Errorf("runtime: restore %s state: %w", op, err)
		}
	}
	return nil
}

// flushState answers the flush from restored state.
type flushState struct{ j *Job }

func (f flushState) LateTotal(ad string, hourStartMs int64) (int64, int64, bool) {
	return f.j.wins[windowing.Owner(windowing.KeyGroup(ad), f.j.cfg.Parallelism)].late.Get(ad, hourStartMs)
}

func (f flushState) HourFast(ad string, hourStartMs int64) (int64, int64, bool) {
	return f.j.wins[windowing.Owner(windowing.KeyGroup(ad), f.j.cfg.Parallelism)].minutes.HourClosed(ad, hourStartMs)
}

type flushTotals struct{ j *Job }

func (f flushTotals) Totals(fn func(sink.Total) error) error {
	var err error
	for _, w := range f.j.wins {
		w.minutes.Totals(func(r windowing.Running) {
			if err == nil {
				err = fn(sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: f.j.c})
			}
		})
	}
	return err
}

func (f flushTotals) HasTotal(k sink.TotalKey) bool {
	return f.j.wins[windowing.Owner(windowing.KeyGroup(k.Ad), f.j.cfg.Parallelism)].minutes.HasTotal(k.Ad, k.StartMs, k.Hour)
}

// Status returns a snapshot of the job's status. Ready is false while
// checkpoints are failing, once the driver has made no progress for
// stallAfter, and after Run has returned.
func (j *Job) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.status
	if s.Ready && (j.failing || time.Since(time.Unix(0, j.lastBeat.Load())) > stallAfter) {
		s.Ready = false
	}
	s.Shards = append([]ingest.ShardWatermark(nil), s.Shards...)
	return s
}

// verifyTotals checks that the running-total store holds exactly what
// restored state implies, for every total state holds (the flush's promise
// to dashboards).
func (j *Job) verifyTotals(ctx context.Context) error {
	var bad []string
	err := flushTotals{j}.Totals(func(t sink.Total) error {
		got, ok, err := j.totals.GetTotal(ctx, t.Key())
		if err != nil {
			return err
		}
		if !ok || got.Valid != t.Valid || got.SpendMicros != t.SpendMicros {
			if len(bad) < 10 {
				bad = append(bad, fmt.Sprintf("%s@%d hour=%v: store %d/%d (present %v), state %d/%d",
					t.Ad, t.StartMs, t.Hour, got.Valid, got.SpendMicros, ok, t.Valid, t.SpendMicros))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("runtime: verify flush: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("runtime: verify flush: running totals differ from restored state: %s", strings.Join(bad, "; "))
	}
	return nil
}

// ConsumerLagMs returns each shard's consumer lag (MillisBehindLatest) of a
// source that reports it (source.Lagger: Kinesis), or nil.
func (j *Job) ConsumerLagMs() map[string]int64 {
	j.mu.Lock()
	src := j.lag
	j.mu.Unlock()
	if src == nil {
		return nil
	}
	return src.Lag()
}

// Stats are a finished run's statistics, for benchmarks.
type Stats struct {
	Records          int64 `json:"records"`
	BatchLatencyP50  int64 `json:"batch_latency_p50_ns"`
	BatchLatencyP99  int64 `json:"batch_latency_p99_ns"`
	LatencySamples   int   `json:"latency_samples"`
	StateBytes       int64 `json:"state_bytes"`
	Checkpoints      int64 `json:"checkpoints"`
	LastCheckpointMs int64 `json:"last_checkpoint_duration_ms"`
	LastCheckpointB  int64 `json:"last_checkpoint_bytes"`
	LastUploadedB    int64 `json:"last_checkpoint_new_bytes"`
	RestoreMs        int64 `json:"restore_ms"`
}

// Stats returns statistics of the run so far. Call it after Run returns.
func (j *Job) Stats() Stats {
	st := j.Status()
	var ls []*latencies
	for _, p := range j.pres {
		ls = append(ls, &p.lat)
	}
	p50, p99, n := mergedQuantiles(ls)
	s := Stats{Records: st.Records, BatchLatencyP50: p50, BatchLatencyP99: p99, LatencySamples: n,
		RestoreMs: j.restoreMs, Checkpoints: j.ckptCount}
	if j.st != nil {
		s.StateBytes = j.st.SizeBytes()
	}
	if c := st.LastCheckpoint; c != nil {
		s.LastCheckpointMs, s.LastCheckpointB, s.LastUploadedB = c.DurationMs, c.SizeBytes, c.NewBytes
	}
	return s
}

// Rows returns the row store the job writes.
func (j *Job) Rows() sink.Rows { return j.rows }

// Totals returns the running-total store the job writes (may be nil).
func (j *Job) Totals() sink.Totals { return j.totals }

// Close releases the state and the embedded store.
func (j *Job) Close() error {
	var errs []error
	if j.st != nil {
		errs = append(errs, j.st.Close())
		j.st = nil
	}
	if j.closeSinks != nil {
		errs = append(errs, j.closeSinks.Close())
		j.closeSinks = nil
	}
	errs = append(errs, j.releaseLease(), j.lock.release())
	return errors.Join(errs...)
}

// Run reads the source and runs the graph until the input ends (a file
// replay: a final watermark fires every window, then a final checkpoint),
// or ctx is cancelled (a final checkpoint, windows stay open in state).
func (j *Job) Run(ctx context.Context) error {
	src, err := j.cfg.OpenSource(ctx, source.Start{Checkpoint: j.c, Positions: maps.Clone(j.restored.Positions), StartMs: j.startMs,
		Clock: j.cfg.Clock, Logger: j.log, Registerer: j.cfg.Registerer})
	if err != nil {
		return fmt.Errorf("runtime: open source %s: %w", j.cfg.Source, err)
	}
	defer func() {
		if err := src.Close(); err != nil {
			j.log.Warn("closing the source failed", "err", err)
		}
	}()
	lag, _ := src.(source.Lagger)
	j.mu.Lock()
	j.lag, j.virtualSrc = lag, src.Virtual()
	j.mu.Unlock()
	defer func() { j.mu.Lock(); j.lag = nil; j.mu.Unlock() }()
	// runCtx is the graph's: the first failure anywhere cancels it with
	// that failure as its cause, which is what Run returns (a cancellation
	// seen elsewhere afterwards never hides it).
	runCtx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, p := range j.pres {
		wg.Go(func() {
			if err := p.run(runCtx); err != nil {
				cancel(err)
			}
		})
	}
	for _, w := range j.wins {
		wg.Go(func() {
			if err := w.run(runCtx); err != nil {
				cancel(err)
			}
		})
	}
	// A stop (ctx cancelled) ends with a final checkpoint; if the graph
	// cannot take it within the stop timeout (a sink that does not answer,
	// a stuck subtask), the graph is cancelled: the process exits without
	// it, which a restart repairs like any crash.
	runDone := make(chan struct{})
	endWatch := sync.OnceFunc(func() { close(runDone) })
	defer endWatch()
	var watch sync.WaitGroup
	defer watch.Wait()
	if j.lease != nil {
		// A lost lease stops the graph at once, without a final checkpoint:
		// another process owns the job now.
		l := j.lease.l
		watch.Go(func() {
			select {
			case <-runDone:
			case <-l.Lost():
				cancel(fmt.Errorf("runtime: job lease lost, stopping without a final checkpoint: %w", l.Check()))
			}
		})
	}
	watch.Go(func() {
		select {
		case <-runDone:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(j.stopTimeout())
		defer t.Stop()
		select {
		case <-runDone:
		case <-t.C:
			cancel(fmt.Errorf("runtime: stop: no final checkpoint within %s; exiting without it (a restart restores the last completed checkpoint)", j.stopTimeout()))
		}
	})
	defer close(j.done)
	if j.cfg.Recount {
		f, err := recount.NewFinalizer(recount.FinalizerOptions{Recount: recount.Options{
			Store: j.lake, Rows: j.rows, Gen: j.cfg.JobGen, Logger: j.log, Registerer: j.cfg.Registerer,
			Judge: recount.Judge{HorizonMs: j.cfg.PreAgg.HorizonMs, AllowanceMs: new(j.cfg.allowance())},
			// Only what the last completed checkpoint covers is surely in
			// the lake.
			Watermark: func(context.Context) (int64, error) {
				j.mu.Lock()
				defer j.mu.Unlock()
				if c := j.status.LastCheckpoint; c != nil {
					return c.Watermark, nil
				}
				return eventtime.NoWatermark, nil
			},
		}})
		if err != nil {
			return fmt.Errorf("runtime: recount: %w", err)
		}
		// The finaliser runs until the graph has ended (its own context:
		// runCtx must stay live while the subtasks write their last output).
		finCtx, stopFin := context.WithCancel(runCtx)
		var fwg sync.WaitGroup
		fwg.Go(func() { f.Run(finCtx) })
		defer fwg.Wait()
		defer stopFin()
	}
	j.setReady(true)
	d, derr := newDriver(j, src)
	if derr == nil {
		derr = d.run(ctx, runCtx)
	}
	if derr != nil {
		cancel(derr)
	}
	// On success the subtasks are writing their last output (mEnd); on a
	// failure they end with the graph's context.
	wg.Wait()
	endWatch()
	if err := context.Cause(runCtx); err != nil {
		// The first failure, not a later cancellation (a subtask's error
		// ends the driver with a cancellation; the stop watcher's timeout
		// ends everything).
		derr = err
	}
	j.mu.Lock()
	j.status.Done = true
	j.status.Ready = false
	j.mu.Unlock()
	if derr != nil {
		j.log.Error("job failed", "err", derr)
	}
	return derr
}

// stopTimeout bounds a stop: the final checkpoint's timeout and a margin.
func (j *Job) stopTimeout() time.Duration {
	return time.Duration(j.cfg.CheckpointTimeoutMs)*time.Millisecond + 5*time.Second
}

func (j *Job) setReady(v bool) {
	j.beat()
	j.mu.Lock()
	j.status.Ready = v
	j.mu.Unlock()
}

// tempRemover is a lake that can hold temporary files of a writer killed
// mid-write (a local folder): they are removed before the job starts.
type tempRemover interface {
	RemoveTemp() (int, error)
}
