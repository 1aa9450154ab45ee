package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/api"
	"github.com/adclick/adclick/fleet"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/windowing"
)

// fleetArgs is what run --fleet needs beyond the job's configuration.
type fleetArgs struct {
	workerID    string
	slots       int
	sweepDelay  time.Duration // fleet.Options.SweepDelay
	leaseTable  string
	job         string
	leaseMs     int64
	checkpoints string // s3://BUCKET/PREFIX: each range under <prefix>/<range>
	lake        string // s3://BUCKET/PREFIX, shared by every range
	listen      string
	// allowedHosts are the Hosts the worker's HTTP server answers besides
	// loopback ones (api.HostPolicy).
	allowedHosts []string
	// openSource returns the source opener of range r of a job of ranges
	// ranges (an EFO consumer of its own per range; poll spacing scaled by
	// the number of ranges, rangeReadOptions).
	openSource func(r windowing.KeyGroups, ranges int) source.Open
	// consumerRoom, when the source reads with enhanced fan-out, refuses
	// ranges whose consumers do not fit the stream (fleetConsumerRoom).
	consumerRoom func(ctx context.Context, ranges []windowing.KeyGroups) error
}

// checkFleet refuses a --fleet run whose stores cannot be shared by
// workers on several machines, before anything is opened.
func checkFleet(a fleetArgs, sf *sinkFlags, cfg *runtime.Config, exitAfterRestore bool) error {
	var errs []error
	if !strings.HasPrefix(cfg.Source, "kinesis:") {
		errs = append(errs, fmt.Errorf("--fleet reads a Kinesis stream (--source kinesis:STREAM), not %s", cfg.Source))
	}
	if cfg.ExitWhenIdle > 0 {
		errs = append(errs, errors.New("--fleet does not take --exit-when-idle: a worker runs until it is stopped (SIGTERM), and its ranges move to the others"))
	}
	if !cfg.KeyGroups.All() {
		errs = append(errs, errors.New("--fleet takes its key-group ranges from the lease table, not --key-groups"))
	}
	if cfg.Recount {
		errs = append(errs, errors.New("--fleet does not take --recount: a range's watermark says nothing of the other ranges' lake; run adclick recount for the hours every range has passed"))
	}
	savepoint := cfg.FromSavepoint
	if _, isDynamo, _ := sf.table(); !isDynamo {
		errs = append(errs, errors.New("--fleet needs --sink dynamodb:TABLE (every worker writes the same rows table)"))
	}
	if !strings.HasPrefix(a.checkpoints, "s3://") {
		errs = append(errs, errors.New("--fleet needs --checkpoints s3://BUCKET/PREFIX (a range restores on whichever worker takes it)"))
	}
	if !strings.HasPrefix(a.lake, "s3://") {
		errs = append(errs, errors.New("--fleet needs --lake s3://BUCKET/PREFIX (the recount reads every range's lake)"))
	}
	if savepoint != "" {
		errs = append(errs, errors.New("--fleet does not take --from-savepoint yet: start a fleet from its ranges' checkpoints"))
	}
	if exitAfterRestore {
		errs = append(errs, errors.New("--fleet does not take --exit-after-restore"))
	}
	if a.slots < 1 {
		errs = append(errs, fmt.Errorf("--max-workers %d must be at least 1", a.slots))
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// runFleet runs this process as one worker of a job several processes
// share (package fleet): cfg is the configuration every range pipeline
// starts from.
func runFleet(ctx context.Context, cfg runtime.Config, a fleetArgs, sf *sinkFlags, reg *prometheus.Registry, log *slog.Logger) error {
	if a.job == "" {
		var err error
		if a.job, err = defaultJobName(a.checkpoints); err != nil {
			return err
		}
	}
	if a.leaseTable == "" {
		t, _, _ := sf.table()
		a.leaseTable = lease.DefaultTable(t)
	}
	if a.workerID == "" {
		host, _ := os.Hostname()
		a.workerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	awsCfg, err := loadAWS(ctx)
	if err != nil {
		return err
	}
	leaseD := time.Duration(a.leaseMs) * time.Millisecond
	w, err := lease.NewWorker(dynamodb.NewFromConfig(awsCfg, lease.ClientOptions(leaseD)), lease.WorkerOptions{Table: a.leaseTable, Job: a.job, ID: a.workerID,
		Duration: leaseD, Address: a.listen, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	// Every range polls every shard: the stream's 5 reads per second per
	// shard are shared by as many pollers as the map has ranges.
	m, err := w.ReadMap(ctx)
	if err != nil {
		return err
	}
	pollers := 1
	if m != nil {
		pollers = len(m.Ranges)
		if a.consumerRoom != nil {
			if err := a.consumerRoom(ctx, m.Ranges); err != nil {
				return err
			}
		}
	}
	rows, totals, closeSinks, err := sf.open(ctx, reg)
	if err != nil {
		return err
	}
	defer closeSinks()
	// The rows table's fence marks tie the lease table's fences to it.
	marks, _ := rows.(fleet.FenceMarks)
	lake, err := openLake(ctx, a.lake, cfg.DataDir)
	if err != nil {
		return err
	}
	base := cfg
	layout := fleet.Layout{DataDir: base.DataDir, Checkpoints: a.checkpoints}
	f, err := fleet.New(fleet.Options{Worker: w, Slots: a.slots, SweepDelay: a.sweepDelay, Logger: log, Registerer: reg, FenceMarks: marks, JobGen: cfg.JobGen,
		Config: func(r windowing.KeyGroups) (runtime.Config, error) {
			c := base
			c.DataDir = layout.DataDirOf(r)
			// The dedup memory budget is the worker's: a worker holding
			// every range (the others gone) stays within it.
			c.DedupMemoryBytes = fleet.ShareOf(base.DedupMemoryBytes, r, 1<<20)
			c.OpenSource = a.openSource(r, pollers)
			c.Lake = lake
			var err error
			if c.Rows, c.Totals, err = fleet.ScopedSinks(rows, totals, r); err != nil {
				return c, err
			}
			c.Checkpoints, err = openCheckpoints(ctx, layout.CheckpointsOf(r), nil)
			return c, err
		}})
	if err != nil {
		return err
	}
	if a.listen != "" {
		ln, err := net.Listen("tcp", a.listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a.listen, err)
		}
		h, err := api.FleetHandler(f, a.workerID, a.job, reg, ln.Addr().String(), a.allowedHosts)
		if err != nil {
			ln.Close()
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		log.Info("http api", "addr", ln.Addr().String())
	}
	log.Info("fleet worker starting", "worker", a.workerID, "job", a.job, "lease_table", a.leaseTable)
	err = f.Run(ctx)
	log.Info("fleet worker stopped", "worker", a.workerID)
	return err
}
