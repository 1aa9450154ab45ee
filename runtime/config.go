package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/adclick/adclick/preagg"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// Config configures a Job. Zero fields take the defaults noted.
type Config struct {
	// DataDir holds state, checkpoints, the embedded store and the
	// exceptions log. Default "./adclick-data".
	DataDir string
	// OpenSource opens what the job reads, at the restored checkpoint's
	// positions (source.File, source.Gen, kinesis.Opener, ...). Required.
	OpenSource source.Open
	// Source names the source in the status and the logs, such as "gen",
	// "file:PATH" or "kinesis:STREAM".
	Source string
	// ExitWhenIdle > 0 stops a real-time job once the source is caught up
	// and no record came for that long (with a final checkpoint).
	ExitWhenIdle time.Duration
	// Drain makes such a stop (and a stop by signal) advance the watermark
	// to the end of time first, so every open window fires and is written
	// (Flink's stop-with-drain).
	Drain bool
	// KeyGroups is the range of the ads' key groups this job counts (the
	// zero value: all of them, the single process). A job owning part of
	// them is one range pipeline of a fleet sharing the stream
	// (docs/scale-out.md): it reads every record, lets every click move the
	// watermarks, and counts, logs and writes only its own ads'. Its lake
	// objects and manifests carry the range's name, and its sinks and
	// checkpoint store must be the range's own (scoped views, a prefix of
	// its own), since its epochs are numbered independently of the other
	// ranges'. A checkpoint restores only into a job of the same range.
	KeyGroups windowing.KeyGroups
	// Parallelism is the number of pre-aggregator and of window subtasks.
	// Default: the number of CPUs, at most windowing.MaxParallelism.
	Parallelism int
	// JobGen is this job version's generation (job_gen). Default 1.
	JobGen int64
	// FromSavepoint, when set, restores that savepoint (a path, or an id
	// under DataDir/savepoints) instead of the latest checkpoint; checkpoint
	// ids continue at its id + 1.
	FromSavepoint string
	// SavepointStore, when set, is where FromSavepoint (an id) is looked up:
	// another job's checkpoint store, for a blue/green start whose new
	// version keeps its checkpoints elsewhere. nil: Checkpoints (or
	// DataDir).
	SavepointStore ckpt.Store

	// AllowanceMs is the out-of-orderness allowance, for the watermarks
	// and the pre-aggregators' horizon check alike; nil means the default,
	// 5,000. Zero is a real allowance (the watermark trails the newest
	// event by 1 ms), so it is a pointer: unset and zero differ.
	AllowanceMs *int64
	// Watermarks configures the per-shard watermarks (IntervalMs, default
	// 200; IdleMs, default 30,000): their defaults and validation are
	// ingest's. Its AllowanceMs is set from AllowanceMs.
	Watermarks ingest.WatermarkOptions
	// PreAgg configures the pre-aggregators (WindowMs, default 60,000;
	// HorizonMs, 7,200,000; GuardMs, 93,600,000; FlushIntervalMs, 500):
	// their defaults and validation are preagg's. Its AllowanceMs and
	// NoDedup are set from the fields here.
	PreAgg preagg.Options
	// EarlyFiringMs is the interval of running totals; default 1,000.
	EarlyFiringMs        int64
	CheckpointIntervalMs int64 // default 30,000
	// CheckpointTimeoutMs bounds how long checkpoints may keep failing (a
	// failed one is retried with backoff meanwhile) before the job exits
	// with the root cause, and how long a stop waits for its final
	// checkpoint. Default 60,000.
	CheckpointTimeoutMs int64
	// CheckpointPauseMs is the least processing time from a completed
	// checkpoint to the next one's start, so that checkpoints slower than
	// their interval leave the graph time to process. Default 5,000, at
	// most half the interval.
	CheckpointPauseMs int64
	CheckpointsKept   int // default 3
	// SinkOutageMs is how long the window subtasks wait out a row store
	// that answers with transient errors (throttling, 5xx, timeouts) before
	// the job ends with the error. Default 300,000 (5 minutes).
	SinkOutageMs int64
	// FlushWritesPerSec limits the full flush's own writes; default 500 for
	// a row store given as Rows (DynamoDB, shared with live output),
	// unlimited for sinks from OpenSinks (the embedded store, which shares
	// no capacity).
	FlushWritesPerSec float64
	// DedupMemoryBytes bounds the memory of the dedup filters, shared
	// evenly by the pre-aggregator subtasks (state.Dedup.SetFilterBudget).
	// Past it the filters fold: memory stays flat however many click ids
	// are live, and each new id then costs more lookups in the state store
	// (adclick_dedup_vain_lookups_total). Default 1 GiB: 24 bits per id for
	// about 350 million live ids, two hours at 48,000 clicks/s.
	DedupMemoryBytes int64
	// NoDedup and NoCheckpoint are for benchmarks only.
	NoDedup, NoCheckpoint bool
	// VerifyFlush makes Open check, after the full flush, that the
	// running-total store holds exactly the totals restored state implies
	// (tests; it reads every total state holds).
	VerifyFlush bool
	// FlushProgress, if not nil, receives the progress of the full flush
	// Open runs after a restore (flush.Options.Progress: called on Open's
	// goroutine, last with flush.PhaseDone), for a progress display.
	// Whether it is set or not, a long flush logs a progress line at most
	// every 10 s on Logger.
	FlushProgress func(flush.Progress)
	// FailAfterRecords > 0 calls Crash after that many records (tests).
	FailAfterRecords int64
	// Crash is called by FailAfterRecords; default: panic. The CLI exits
	// the process abruptly.
	Crash func()
	// ChannelCapacity bounds every channel between subtasks, in messages.
	// Default 64.
	ChannelCapacity int
	// BatchSize is the number of clicks per message to a pre-aggregator.
	// Default 256.
	BatchSize int

	// Checkpoints stores checkpoints, savepoints and the epoch high-water
	// mark: an S3 store in AWS mode. When it is nil, OpenCheckpoints opens
	// one once the job holds its data dir (embedded mode: the folder store
	// under DataDir, ckptstore.LocalOpener).
	Checkpoints     ckpt.Store
	OpenCheckpoints func() (ckpt.Store, error)

	// Lake stores every click with its verdict (Parquet, by event hour and
	// epoch) for the recount: S3 in AWS mode. When it is nil, OpenLake
	// opens one once the job holds its data dir (embedded mode:
	// DataDir/lake, recount.FolderOpener).
	Lake     recount.Store
	OpenLake func() (recount.Store, error)
	// Recount finalises hours in the background as they become ready.
	Recount bool

	// Lease, when set, makes the job hold a lease for as long as it runs
	// (AWS mode: a second process on the same job is refused, a crashed
	// one is taken over once its lease lapses) and fences every write with
	// it. nil: the data dir's lock alone (one machine).
	Lease *LeaseConfig

	// Rows and Totals are the sinks. When Rows is nil, OpenSinks opens
	// them once the job holds its data dir (the embedded store under
	// DataDir/store: embedded.Opener), and Close closes them; a Totals set
	// here is used instead of the one OpenSinks returns.
	Rows      sink.Rows
	Totals    sink.Totals
	OpenSinks func() (sink.Rows, sink.Totals, io.Closer, error)

	Clock      clock.Clock // processing time of a real-time source; default the wall clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// DefaultDedupMemoryBytes is Config.DedupMemoryBytes's default.
const DefaultDedupMemoryBytes = 1 << 30

// EnsureDefaults fills zero fields.
func (c *Config) EnsureDefaults() {
	def := func(p *int64, v int64) {
		if *p == 0 {
			*p = v
		}
	}
	if c.DataDir == "" {
		c.DataDir = "./adclick-data"
	}
	if c.Parallelism == 0 {
		c.Parallelism = min(runtime.NumCPU(), windowing.MaxParallelism)
	}
	def(&c.JobGen, 1)
	if c.AllowanceMs == nil {
		c.AllowanceMs = new(ingest.DefaultAllowanceMs)
	}
	c.Watermarks.AllowanceMs = *c.AllowanceMs
	c.Watermarks.EnsureDefaults()
	c.PreAgg.AllowanceMs, c.PreAgg.NoDedup = *c.AllowanceMs, c.NoDedup
	c.PreAgg.EnsureDefaults()
	def(&c.EarlyFiringMs, 1_000)
	def(&c.CheckpointIntervalMs, 30_000)
	def(&c.CheckpointPauseMs, min(5_000, c.CheckpointIntervalMs/2))
	def(&c.CheckpointTimeoutMs, 60_000)
	def(&c.SinkOutageMs, 300_000)
	def(&c.DedupMemoryBytes, DefaultDedupMemoryBytes)
	if c.CheckpointsKept == 0 {
		c.CheckpointsKept = 3
	}
	if c.FlushWritesPerSec == 0 {
		// The limit keeps the flush from taking live output's write
		// capacity in a shared store; the embedded store has none to share.
		c.FlushWritesPerSec = 500
		if c.Rows == nil && c.OpenSinks != nil {
			c.FlushWritesPerSec = math.Inf(1)
		}
	}
	if c.ChannelCapacity == 0 {
		c.ChannelCapacity = 64
	}
	if c.BatchSize == 0 {
		c.BatchSize = 256
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Crash == nil {
		c.Crash = func() { panic("runtime: crash injected by FailAfterRecords") }
	}
}

// Validate reports every problem with the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.Parallelism < 1 || c.Parallelism > windowing.MaxParallelism {
		errs = append(errs, fmt.Errorf("parallelism %d must be in 1..%d (the key-group ceiling)", c.Parallelism, windowing.MaxParallelism))
	}
	if c.OpenSource == nil {
		errs = append(errs, errors.New("no source: OpenSource is required"))
	}
	if !c.KeyGroups.Valid() {
		errs = append(errs, fmt.Errorf("key-group range %v must lie within 0..%d and not be empty", c.KeyGroups, windowing.MaxParallelism))
	}
	if c.Recount && !c.KeyGroups.All() {
		// The finalizer takes an hour as ready by this job's watermark,
		// which says nothing of the other ranges' part of the lake.
		errs = append(errs, fmt.Errorf("recount: a job of key groups %v cannot finalise hours: the other ranges' clicks are in the lake too", c.KeyGroups))
	}
	if c.Rows == nil && c.OpenSinks == nil {
		errs = append(errs, errors.New("no row store: set Rows or OpenSinks"))
	}
	if c.Checkpoints == nil && c.OpenCheckpoints == nil {
		errs = append(errs, errors.New("no checkpoint store: set Checkpoints or OpenCheckpoints"))
	}
	if c.Lake == nil && c.OpenLake == nil {
		errs = append(errs, errors.New("no lake: set Lake or OpenLake"))
	}
	if c.Lease != nil && c.Lease.Acquire == nil {
		errs = append(errs, errors.New("job lease without Acquire"))
	}
	for _, v := range []struct {
		name string
		v    int64
	}{
		{"early firing", c.EarlyFiringMs}, {"checkpoint interval", c.CheckpointIntervalMs},
		{"checkpoint timeout", c.CheckpointTimeoutMs}, {"sink outage", c.SinkOutageMs},
	} {
		if v.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %d ms must be positive", v.name, v.v))
		}
	}
	// The components' own rules, every problem reported.
	wo := c.Watermarks
	wo.AllowanceMs = c.allowance()
	if err := wo.Validate(); err != nil {
		errs = append(errs, err)
	}
	po := c.PreAgg
	po.AllowanceMs = c.allowance()
	if err := po.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.CheckpointPauseMs < 0 {
		errs = append(errs, fmt.Errorf("checkpoint pause %d ms must not be negative", c.CheckpointPauseMs))
	}
	if c.DedupMemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("dedup memory %d bytes must be positive", c.DedupMemoryBytes))
	}
	if c.JobGen < 0 {
		errs = append(errs, fmt.Errorf("job generation %d must not be negative", c.JobGen))
	}
	if c.CheckpointsKept < 1 {
		errs = append(errs, fmt.Errorf("checkpoints kept %d must be at least 1", c.CheckpointsKept))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("runtime: config: %w", errors.Join(errs...))
}

// allowance returns the allowance in force (the default when unset).
func (c *Config) allowance() int64 {
	if c.AllowanceMs == nil {
		return ingest.DefaultAllowanceMs
	}
	return *c.AllowanceMs
}

// stateFormat is the version of the checkpoint layout.
const stateFormat = 1

// fingerprint names the settings a checkpoint's state depends on: a restore
// with a different value would misread the state or change the meaning of
// what was counted. Parallelism is not part of it (state moves by key
// group), nor are timing settings such as the allowance.
func (c *Config) fingerprint() (sum string, desc string) {
	desc = "format=" + strconv.Itoa(stateFormat) +
		" window_ms=" + strconv.FormatInt(c.PreAgg.WindowMs, 10) +
		" horizon_ms=" + strconv.FormatInt(c.PreAgg.HorizonMs, 10) +
		" max_parallelism=" + strconv.Itoa(windowing.MaxParallelism) +
		" dedup=" + strconv.FormatBool(!c.NoDedup)
	if !c.KeyGroups.All() {
		// A range's state holds only its own key groups: restoring it into
		// another range would lose the rest. (The single process's
		// fingerprint is unchanged.)
		desc += " key_groups=" + c.KeyGroups.String()
	}
	h := sha256.Sum256([]byte(desc))
	return hex.EncodeToString(h[:8]), desc
}
