package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/adclick/adclick/api"
	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/fleet"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/internal/bench"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink/embedded"
	"github.com/adclick/adclick/windowing"
)

const runSummary = `Runs the job. With no flags it runs in embedded mode: the built-in generator
produces clicks in real time, state and checkpoints live under --data, rows
and running totals go to the embedded store there, and the HTTP API listens
on --listen. It prints a progress line every few seconds; Ctrl-C (SIGINT) or
SIGTERM stops it with a final checkpoint.

With --source file:PATH it replays a JSON Lines click file, using each line's
arrival_ms as processing time, fires every open window at the end of input,
takes a final checkpoint and exits 0. The same file and flags give the same
rows on every run.

On every start it restores the latest checkpoint under --data and runs the
full flush before reading.`

// genFlags registers the generator's flags on fs.
func genFlags(fs *flag.FlagSet, o *ingest.GenOptions, prefix string) {
	fs.Int64Var(&o.Clicks, prefix+"clicks", o.Clicks, "clicks to generate (0 = unbounded)")
	fs.IntVar(&o.Ads, prefix+"ads", 1000, "distinct ads")
	fs.IntVar(&o.Campaigns, prefix+"campaigns", 50, "distinct campaigns")
	fs.IntVar(&o.Shards, prefix+"shards", 4, "shards")
	fs.Float64Var(&o.Rate, prefix+"rate", 2000, "clicks per second of arrival time")
	fs.Float64Var(&o.Zipf, prefix+"zipf", 1.1, "skew of the ad distribution (Zipf s > 1; negative = uniform)")
	fs.Float64Var(&o.HotFraction, prefix+"hot-fraction", 0, "fraction of clicks on the hottest ad (ad_0); the rest follow --zipf")
	fs.Float64Var(&o.DelayMeanMs, prefix+"delay-mean-ms", 800, "mean arrival delay of ordinary clicks, ms (exponential)")
	fs.Float64Var(&o.TailFraction, prefix+"tail-fraction", 0.02, "fraction of clicks with a heavy-tail delay (late clicks)")
	fs.Int64Var(&o.TailMinMs, prefix+"tail-min-ms", 70_000, "shortest heavy-tail delay, ms")
	fs.Int64Var(&o.TailMaxMs, prefix+"tail-max-ms", 9_000_000, "longest heavy-tail delay, ms (beyond 2 h exceeds the horizon)")
	fs.Float64Var(&o.DupFraction, prefix+"dup-fraction", 0.01, "fraction of duplicate resends")
	fs.Float64Var(&o.InvalidFraction, prefix+"invalid-fraction", 0.005, "fraction of invalid lines")
	fs.Float64Var(&o.SkewFraction, prefix+"skew-fraction", 0.002, "fraction of device clocks years off")
	fs.Int64Var(&o.IdleEveryMs, prefix+"idle-every-ms", 0, "if > 0, the last shard is silent for the second half of every such period")
	fs.Uint64Var(&o.Seed, prefix+"seed", 1, "random seed")
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", runSummary, stderr)
	var cfg runtime.Config
	fs.StringVar(&cfg.DataDir, "data", "./adclick-data", "directory for state, checkpoints, the embedded store and the exceptions log")
	fs.StringVar(&cfg.Source, "source", "gen", "gen (built-in generator, real time), file:PATH (JSON Lines replay) or kinesis:STREAM")
	startAt := fs.String("start-at", "trim_horizon", "Kinesis: where shards without a checkpointed position start: trim_horizon, latest (as of the job's first start, pinned in its checkpoint store: a restart skips nothing) or an RFC 3339 time")
	kinesisLimit := fs.Int("kinesis-limit", 10000, "Kinesis: records per GetRecords call (at most 10,000)")
	kinesisCallMs := fs.Int64("kinesis-call-interval-ms", 200, "Kinesis polling: the least time between two GetRecords calls on a shard by one reader; the stream allows 5 calls/s per shard shared by every reader. A fleet polls every shard once per range, so with --fleet and this flag not given each range spaces its calls by N × this value for the N ranges of the lease table's map (16 ranges: 3.2 s); a value given is used as it is, per range")
	kinesisRead := fs.String("kinesis-read", kinesis.ReadPoll, "Kinesis: how shards are read: poll (GetRecords, 5 calls/s and 2 MiB/s per shard shared by every reader of the stream) or efo (enhanced fan-out: SubscribeToShard through --kinesis-consumer, 2 MiB/s per shard of its own)")
	kinesisConsumer := fs.String("kinesis-consumer", "", "with --kinesis-read efo: the stream consumer to read through, registered if missing; one job's own (two jobs on one consumer take each other's subscriptions over)")
	fs.DurationVar(&cfg.ExitWhenIdle, "exit-when-idle", 0, "stop (with a final checkpoint) once the source is caught up and no record came for this long (0 = never)")
	fs.BoolVar(&cfg.Drain, "drain", false, "on stop, advance the watermark to the end of time first so every open window fires and is written (decommissioning, tests)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the HTTP API (empty = no HTTP server)")
	adminToken := fs.String("admin-token", "", "bearer token of the operator endpoints (savepoints, sweeps, stop); default: the one in <--data>/admin-token, generated on the first start (mode 0600)")
	readToken := fs.String("read-token", "", "if set, the read endpoints need this bearer token (or the admin token)")
	allowedHosts := fs.String("allowed-hosts", "", "comma-separated Host names (or IP addresses; .DOMAIN for a domain and its subdomains) the HTTP API answers besides localhost, 127.0.0.0/8 and ::1, on every endpoint: on a loopback --listen any other Host gets 421 (a page whose name was pointed at this machine, DNS rebinding, cannot read the API); on another --listen, if set, only these and loopback Hosts are answered (default: any)")
	maxConns := fs.Int("max-connections", api.DefaultMaxConnections, "most HTTP API connections open at once: at the cap a new connection replaces the longest-idle keep-alive one, or is closed at once when none is idle (negative = no cap)")
	fs.IntVar(&cfg.Parallelism, "parallelism", 0, "pre-aggregator and window subtasks (default: number of CPUs, at most 128)")
	lakeURL := fs.String("lake", "", "keep the lake (every click with its verdict, Parquet) in s3://BUCKET/PREFIX instead of under --data/lake")
	fs.BoolVar(&cfg.Recount, "recount", false, "finalise hours in the background as they become ready (final_* rows from the lake)")
	leaseTable := fs.String("lease-table", "", "DynamoDB table of job leases (default with --sink dynamodb:TABLE: TABLE"+lease.TableSuffix+"); with --checkpoints s3:// the job holds a lease there, so a second process on the same job is refused and a crashed one is taken over once its lease lapses")
	leaseMs := fs.Int64("lease-ms", lease.DefaultDuration.Milliseconds(), "lease duration: renewed every third of it; a process that stopped renewing is taken over after it")
	jobName := fs.String("job-name", "", "the job's name in the lease table (default: the --checkpoints s3:// location)")
	fleetMode := fs.Bool("fleet", false, "run as one worker of a job several processes share: the job's key-group ranges, made by `adclick setup --ranges N --job-name NAME`, are leased in --lease-table; this worker takes its share, runs one pipeline per range it holds (each reading every shard, counting only its own ads), and takes over the ranges of a worker that stops renewing. Needs --source kinesis:STREAM, --sink dynamodb:TABLE, --checkpoints s3:// and --lake s3://; with --drain a SIGTERM drains every range the worker holds, though they go on elsewhere, so give it only to stop a whole fleet")
	keyGroups := fs.String("key-groups", "", "benchmarks and tests, embedded mode only: count only the ads of this key-group range, like kg0-64 (adclick bench's workersN variant); a fleet (--fleet) leases its ranges instead")
	workerID := fs.String("worker-id", "", "with --fleet: this worker's name in the lease table (default: host name and process id)")
	maxWorkers := fs.Int("max-workers", fleet.DefaultSlots, "with --fleet: the most workers of the job at once (its slot leases)")
	sweepDelay := fs.Duration("fence-sweep-delay", fleet.DefaultSweepDelay, "with --fleet: how long after taking a range over from a worker that stopped renewing (paused or dead) the fence sweep runs, removing what that worker still wrote: past AWS's signature window (5 min DynamoDB, 15 min S3), nothing it signed before the takeover can land. Lower only for tests")
	checkpointsURL := fs.String("checkpoints", "", "keep checkpoints and savepoints in s3://BUCKET/PREFIX (incremental, manifest last) instead of under --data; a restart with an empty --data restores from there")
	fs.StringVar(&cfg.FromSavepoint, "from-savepoint", "", "start from this savepoint instead of the latest checkpoint (blue/green, rescaling, upgrades): an id in this job's checkpoint store, a local folder, or another job's savepoint in S3 as `adclick savepoint` printed it (s3://BUCKET/PREFIX/manifests/sp-<id>.json)")
	fs.Int64Var(&cfg.JobGen, "job-gen", 1, "job generation (job_gen) of this version; raise it for each blue/green deployment")
	allowance := fs.Int64("allowance-ms", ingest.DefaultAllowanceMs, "out-of-orderness allowance: watermark = max event time - allowance - 1 ms (0 is allowed: the watermark trails the newest event by 1 ms)")
	fs.Int64Var(&cfg.Watermarks.IntervalMs, "watermark-interval-ms", 200, "watermark emission interval (processing time)")
	fs.Int64Var(&cfg.Watermarks.IdleMs, "idle-ms", 30000, "a shard with no records for this long leaves the watermark minimum")
	fs.Int64Var(&cfg.PreAgg.WindowMs, "window-ms", 60000, "window size (must divide an hour)")
	fs.Int64Var(&cfg.PreAgg.HorizonMs, "horizon-ms", preagg.DefaultHorizonMs, "acceptance horizon after the impression; dedup ids expire at impression + horizon")
	fs.Int64Var(&cfg.PreAgg.GuardMs, "guard-ms", preagg.DefaultGuardMs, "processing-time guard on dedup ids, in case the watermark is stuck")
	fs.Int64Var(&cfg.PreAgg.FlushIntervalMs, "preagg-flush-ms", 500, "pre-aggregation buffer interval")
	fs.Int64Var(&cfg.EarlyFiringMs, "early-firing-ms", 1000, "running totals for dashboards every this many ms")
	fs.Int64Var(&cfg.CheckpointIntervalMs, "checkpoint-interval-ms", 30000, "checkpoint interval (virtual time in a file replay)")
	fs.Int64Var(&cfg.CheckpointPauseMs, "checkpoint-pause-ms", 0, "least time from a completed checkpoint to the next one's start, so that slow checkpoints leave the graph time to process (0 = 5000, at most half the interval)")
	fs.Int64Var(&cfg.CheckpointTimeoutMs, "checkpoint-timeout-ms", 60000, "how long checkpoints may keep failing (each is retried with backoff) before the job exits with the cause, and how long a stop waits for its final checkpoint")
	fs.IntVar(&cfg.CheckpointsKept, "checkpoints-kept", 3, "completed checkpoints kept")
	fs.Int64Var(&cfg.SinkOutageMs, "sink-outage-ms", 300000, "how long an unavailable row store (throttling, 5xx, timeouts) is waited out, with backoff, before the job exits with the error")
	dedupMB := fs.Int64("dedup-memory-mb", runtime.DefaultDedupMemoryBytes>>20, "memory budget of the dedup filters, in MiB: past it they trade memory for lookups in the state store (adclick_dedup_vain_lookups_total), so memory stays flat however many click ids are live; with --fleet the worker's, each range getting its share of the key groups")
	retention := retentionFlags(fs)
	fs.Float64Var(&cfg.FlushWritesPerSec, "flush-writes-per-sec", 0, "rate limit of the full flush's own writes after a restore (0 = 500 for DynamoDB, unlimited for the embedded store)")
	fs.BoolVar(&cfg.VerifyFlush, "verify-flush", false, "testing: after the flush on start, check that the running totals equal restored state, and fail if not")
	fs.Int64Var(&cfg.FailAfterRecords, "fail-after-records", 0, "testing: exit abruptly (code 137, no cleanup, no checkpoint) after this many records")
	exitAfterRestore := fs.Bool("exit-after-restore", false, "testing: restore the latest checkpoint, run the full flush, and exit 0 without reading (to inspect the rows a restore leaves)")
	progress := fs.Duration("progress", 5*time.Second, "interval of the progress line (0 = none)")
	fs.BoolVar(&cfg.NoDedup, "no-dedup", false, "benchmarks only: turn duplicate detection off (never for billing)")
	fs.BoolVar(&cfg.NoCheckpoint, "no-checkpoint", false, "benchmarks only: take no checkpoints (a crash loses everything)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := fs.String("memprofile", "", "write a heap profile (allocations since start, and what is live) to this file at exit")
	statsFile := fs.String("stats-file", "", "write run statistics (batch latencies, state size) as JSON to this file at exit")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var genOpts ingest.GenOptions
	genFlags(fs, &genOpts, "gen-")
	var sf sinkFlags
	sf.register(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.AllowanceMs = allowance
	if *keyGroups != "" {
		r, err := windowing.ParseKeyGroups(*keyGroups)
		if err != nil {
			return usageError{fmt.Errorf("--key-groups: %w", err)}
		}
		if sf.sink != "embedded" && sf.sink != "" || *checkpointsURL != "" || *lakeURL != "" || *leaseTable != "" || *jobName != "" {
			// A static range has no range lease: beside a fleet's range of
			// the same name it would share its scope and checkpoints.
			return usageError{errors.New("--key-groups is for embedded mode (benchmarks, tests): not with --sink dynamodb, --checkpoints, --lake, --lease-table or --job-name; a fleet (--fleet) leases its ranges")}
		}
		cfg.KeyGroups = r
	}
	sf.retention = retention()
	cfg.DedupMemoryBytes = *dedupMB << 20
	if err := refuseZero(fs, "watermark-interval-ms", "idle-ms", "window-ms", "horizon-ms", "guard-ms",
		"preagg-flush-ms", "early-firing-ms", "checkpoint-interval-ms", "checkpoint-timeout-ms", "checkpoints-kept", "job-gen", "max-connections", "lease-ms", "sink-outage-ms", "dedup-memory-mb", "kinesis-call-interval-ms"); err != nil {
		return err
	}
	hosts := strings.Split(*allowedHosts, ",") // blanks are skipped
	if _, err := api.NewHostPolicy(*listen, hosts); err != nil {
		return usageError{fmt.Errorf("--allowed-hosts: %w", err)}
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	// The source: one line per kind. rangeSource opens it for one range of
	// a fleet.
	var rangeSource func(r windowing.KeyGroups, ranges int) source.Open
	var consumerRoom func(ctx context.Context, ranges []windowing.KeyGroups) error
	kind, name, _ := strings.Cut(cfg.Source, ":")
	switch {
	case cfg.Source == "gen":
		cfg.OpenSource = source.Gen(genOpts)
	case kind == "file" && name != "":
		cfg.OpenSource = source.File(name)
	case kind == "kinesis" && name != "":
		ko := kinesis.Options{Stream: name, Limit: int32(*kinesisLimit), Read: *kinesisRead, Consumer: *kinesisConsumer,
			MinCallInterval: time.Duration(*kinesisCallMs) * time.Millisecond}
		if err := parseStartAt(*startAt, &ko); err != nil {
			return err
		}
		if err := kinesisReadFlags(ko); err != nil {
			return err
		}
		api, err := newKinesisClient(ctx)
		if err != nil {
			return err
		}
		cfg.OpenSource = kinesis.Opener(api, ko)
		intervalGiven := explicit(fs, "kinesis-call-interval-ms")
		consumerRoom = func(ctx context.Context, ranges []windowing.KeyGroups) error {
			return fleetConsumerRoom(ctx, api, ko, ranges)
		}
		rangeSource = func(r windowing.KeyGroups, ranges int) source.Open {
			o := rangeReadOptions(ko, r, ranges, intervalGiven)
			log.Info("range reads kinesis", "range", r.String(), "read", o.Read, "consumer", o.Consumer,
				"call_interval_ms", o.MinCallInterval.Milliseconds(), "ranges", ranges)
			return kinesis.Opener(api, o)
		}
	default:
		return usageError{fmt.Errorf("--source %q: want gen, file:PATH or kinesis:STREAM", cfg.Source)}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	cfg.Registerer = reg
	cfg.Logger = log
	cfg.Crash = func() { os.Exit(137) }
	if *fleetMode {
		fa := fleetArgs{workerID: *workerID, slots: *maxWorkers, sweepDelay: *sweepDelay, leaseTable: *leaseTable, job: *jobName, leaseMs: *leaseMs,
			checkpoints: *checkpointsURL, lake: *lakeURL, listen: *listen, allowedHosts: hosts, openSource: rangeSource,
			consumerRoom: consumerRoom}
		if err := checkFleet(fa, &sf, &cfg, *exitAfterRestore); err != nil {
			return err
		}
		if fa.openSource == nil {
			open := cfg.OpenSource
			fa.openSource = func(windowing.KeyGroups, int) source.Open { return open }
		}
		return runFleet(ctx, cfg, fa, &sf, reg, log)
	}
	if *workerID != "" || fs.Lookup("max-workers").Value.String() != fs.Lookup("max-workers").DefValue ||
		fs.Lookup("fence-sweep-delay").Value.String() != fs.Lookup("fence-sweep-delay").DefValue {
		return usageError{errors.New("--worker-id, --max-workers and --fence-sweep-delay go with --fleet")}
	}
	if cfg.Lease, err = leaseConfig(ctx, *leaseTable, *jobName, *checkpointsURL, *leaseMs, &sf, log); err != nil {
		return err
	}
	if *checkpointsURL != "" {
		if cfg.Checkpoints, err = openCheckpoints(ctx, *checkpointsURL, reg); err != nil {
			return err
		}
	} else {
		cfg.OpenCheckpoints = ckptstore.LocalOpener(cfg.DataDir, ckptstore.Options{})
	}
	if url, id, ok := ckptstore.ParseSavepointLocation(cfg.FromSavepoint); ok {
		// Another job's savepoint in S3 (blue/green: v2 keeps its own
		// checkpoints): read it from that job's store.
		if cfg.SavepointStore, err = openCheckpoints(ctx, url, nil); err != nil {
			return fmt.Errorf("--from-savepoint: %w", err)
		}
		cfg.FromSavepoint = strconv.FormatInt(id, 10)
	} else if strings.HasPrefix(cfg.FromSavepoint, "s3://") {
		return usageError{fmt.Errorf("--from-savepoint %q: an S3 savepoint is named by the location `adclick savepoint` printed, s3://BUCKET/PREFIX/manifests/sp-<id>.json", cfg.FromSavepoint)}
	}
	if *lakeURL != "" {
		if !strings.HasPrefix(*lakeURL, "s3://") {
			return usageError{fmt.Errorf("--lake %q: want s3://BUCKET/PREFIX (the default keeps it under --data)", *lakeURL)}
		}
		if cfg.Lake, err = openLake(ctx, *lakeURL, cfg.DataDir); err != nil {
			return err
		}
	} else {
		cfg.OpenLake = recount.FolderOpener(filepath.Join(cfg.DataDir, "lake"))
	}
	rows, totals, closeSinks, err := sf.open(ctx, reg)
	if err != nil {
		return err
	}
	defer closeSinks()
	cfg.Rows, cfg.Totals = rows, totals
	if !cfg.KeyGroups.All() && totals != nil {
		// A static range's Valkey epoch sets stay apart from the others'.
		if _, cfg.Totals, err = fleet.ScopedSinks(nil, totals, cfg.KeyGroups); err != nil {
			return err
		}
	}
	if rows == nil {
		// Embedded mode: the store under --data, opened by the job once it
		// holds the data dir.
		cfg.OpenSinks = embedded.Opener(filepath.Join(cfg.DataDir, "store"), embedded.Options{Registerer: reg, Retention: sf.retention})
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *memprofile != "" {
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "adclick: memory profile:", err)
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintln(os.Stderr, "adclick: memory profile:", err)
			}
		}()
	}
	// On a terminal the restore flush draws a bar; elsewhere it logs a
	// progress line every 10 s.
	cfg.FlushProgress = flushProgress(stderr)
	job, err := runtime.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer job.Close()
	if *exitAfterRestore {
		log.Info("restored and flushed; exiting as --exit-after-restore asks", "checkpoint", job.Status().Restored)
		return nil
	}
	var srv *http.Server
	if *listen != "" {
		if *adminToken, err = ensureAdminToken(cfg.DataDir, *adminToken, log); err != nil {
			return err
		}
		if err := api.CheckOperatorAccess(*listen, *adminToken); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", *listen, err)
		}
		h, err := api.New(job, api.Options{Addr: ln.Addr().String(), AdminToken: *adminToken, ReadToken: *readToken, AllowedHosts: hosts,
			Registerer: reg, Gatherer: reg, Logger: log, MaxConnections: *maxConns})
		if err != nil {
			ln.Close()
			return err
		}
		defer h.Close()
		srv = h.HTTPServer()
		go srv.Serve(h.Listener(ln))
		log.Info("http api", "addr", ln.Addr().String())
		// Shut down gracefully: the answer to POST /v1/stop must reach the
		// caller before the process exits.
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
	}
	done := make(chan struct{})
	if *progress > 0 {
		go printProgress(job, *progress, stderr, done)
	}
	err = job.Run(ctx)
	close(done)
	st := job.Status()
	if err != nil {
		return err
	}
	if *statsFile != "" {
		if err := bench.WriteStats(*statsFile, job.Stats()); err != nil {
			return err
		}
	}
	ck := int64(0)
	if st.LastCheckpoint != nil {
		ck = st.LastCheckpoint.ID
	}
	log.Info("stopped", "records", st.Records, "invalid", st.Invalid, "last_checkpoint", ck)
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil
	}
	return nil
}

// leaseConfig decides whether the job holds a lease (runtime.LeaseConfig):
// when it has a name (--job-name, or its --checkpoints s3:// location) and a
// lease table (--lease-table, or the --sink dynamodb table's). A job with
// local checkpoints needs none (the data dir's lock covers one machine);
// S3 checkpoints without a lease table run without one, with a warning.
// defaultJobName is a job's name in the lease table when --job-name is not
// given: its --checkpoints s3:// location, BUCKET/PREFIX.
func defaultJobName(checkpoints string) (string, error) {
	bucket, prefix, err := ckptstore.ParseURL(checkpoints)
	if err != nil {
		return "", usageError{err}
	}
	return bucket + "/" + strings.Trim(prefix, "/"), nil
}

func leaseConfig(ctx context.Context, table, job, ckpts string, ms int64, sf *sinkFlags, log *slog.Logger) (*runtime.LeaseConfig, error) {
	if job == "" && strings.HasPrefix(ckpts, "s3://") {
		var err error
		if job, err = defaultJobName(ckpts); err != nil {
			return nil, err
		}
	}
	if table == "" {
		if t, ok, err := sf.table(); err != nil {
			return nil, err
		} else if ok {
			table = lease.DefaultTable(t)
		}
	}
	switch {
	case job == "":
		return nil, nil
	case table == "" && ckpts == "":
		return nil, usageError{fmt.Errorf("--job-name %q needs a lease table: --lease-table TABLE, or --sink dynamodb:TABLE", job)}
	case table == "":
		log.Warn("no lease table (--lease-table, or --sink dynamodb:TABLE): nothing keeps a second process from running this job", "job", job)
		return nil, nil
	}
	cfg, err := loadAWS(ctx)
	if err != nil {
		return nil, err
	}
	o := lease.Options{Table: table, Job: job, Duration: time.Duration(ms) * time.Millisecond}
	api := dynamodb.NewFromConfig(cfg, lease.ClientOptions(o.Duration))
	return &runtime.LeaseConfig{Acquire: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) (runtime.Lease, error) {
		o := o
		o.Logger, o.Registerer = log, reg
		l, err := lease.Acquire(ctx, api, o)
		if err != nil {
			return nil, err
		}
		log.Info("job lease held", "key", l.Key(), "owner", l.Owner(), "counter", l.Counter())
		return jobLease{l}, nil
	}}, nil
}

// jobLease is a DynamoDB lease as the job holds it (runtime.Lease): a
// lease taken over by the time it is released has nothing to release.
type jobLease struct{ *lease.Lease }

func (l jobLease) Release(ctx context.Context) error {
	if err := l.Lease.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
		return err
	}
	return nil
}

// refuseZero returns a usage error for each named flag that was set to 0 on
// the command line: for these settings zero is not a value (the library
// would read it as "use the default"), so an explicit 0 must not silently
// run with the default.
func refuseZero(fs *flag.FlagSet, names ...string) error {
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(names, f.Name) && f.Value.String() == "0" {
			errs = append(errs, fmt.Errorf("--%s 0: must be positive", f.Name))
		}
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

func printProgress(job *runtime.Job, every time.Duration, w io.Writer, done <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	lastT := time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			s := job.Status()
			rate := float64(s.Records-last) / now.Sub(lastT).Seconds()
			last, lastT = s.Records, now
			wm, lag := "none", "-"
			if s.WatermarkMs != eventtime.NoWatermark {
				wm = time.UnixMilli(s.WatermarkMs).UTC().Format("15:04:05.000")
				lag = (time.Duration(s.WatermarkLagMs) * time.Millisecond).Round(100 * time.Millisecond).String()
			}
			ck := "none"
			if c := s.LastCheckpoint; c != nil {
				ck = fmt.Sprintf("%d (%s ago, %d ms)", c.ID, time.Since(time.UnixMilli(c.TakenAtMs)).Round(time.Second), c.DurationMs)
			}
			fmt.Fprintf(w, "clicks/s=%.0f records=%d watermark=%s lag=%s last_checkpoint=%s\n", rate, s.Records, wm, lag, ck)
		}
	}
}
