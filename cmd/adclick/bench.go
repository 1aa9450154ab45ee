package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/internal/bench"
)

const benchSummary = `Measures the pipeline against the physical limit of this machine, on one
trace, in one run. Variants (each a separate process, so CPU time, peak RSS
and state are measured cleanly):

  limit                  decode each click and count it in a map by
                         (ad, minute), on every core; nothing else
  pipeline               the full job in embedded mode (adclick run
                         --source file:): decode, validate, clamp, dedup in
                         Pebble, pre-aggregate, windows, hour roll-up, late
                         path, exceptions log, embedded sink, checkpoints
                         every 30 s of virtual time
  pipeline-nodedup       the same without duplicate detection
  pipeline-nocheckpoint  the same without checkpoints
  workersN (e.g. workers2)
                         N pipeline processes at once, each on one core
                         (GOMAXPROCS=1, pinned with taskset if present),
                         each owning 1/N of the ads' key groups (run
                         --key-groups): every process reads every record
                         and counts only its own ads', as the workers of a
                         fleet do; clicks/s is the trace's over the wall
                         time of the slowest, CPU and memory are summed

For each: clicks/s, clicks/s per core used, p50/p99 batch latency, peak RSS,
bytes of state, and the ratio to limit. The trace is generated once (or
reused with --trace).

With --peers DIR (the peer programs: Benthos, Apache Beam Go on Prism,
DuckDB, Apache Flink, each its own module, with their run.sh), the peers
then run on the same trace, one after the other, beside adclick's pipeline
measured the same way; their outputs are checked against DuckDB's, and one
table with the ratios is printed. --peers needs --trace (the trace outlives
the run). --peer-list picks them from: duckdb, duckdb-loose, benthos,
benthos-t1, benthos-sw, beam-prism-bucket, beam-prism, beam-direct, flink
(Flink 2.3 with exactly-once checkpoints every 10 s) and flink-nockpt (the
same without); the Flink ones need Java 17 and Maven.`

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", benchSummary, stderr)
	o := ingest.GenOptions{Clicks: 10_000_000, Ads: 100_000, Shards: 16, Rate: 100_000, HotFraction: 0.3,
		DupFraction: 0.01, TailFraction: 0.02, InvalidFraction: 0.005, TailMaxMs: 5_400_000}
	fs.Int64Var(&o.Clicks, "clicks", o.Clicks, "clicks in the trace")
	fs.IntVar(&o.Ads, "ads", o.Ads, "distinct ads")
	fs.IntVar(&o.Shards, "shards", o.Shards, "shards")
	fs.Float64Var(&o.Rate, "rate", o.Rate, "clicks per second of arrival (virtual) time")
	fs.Float64Var(&o.HotFraction, "hot-fraction", o.HotFraction, "fraction of clicks on the hottest ad")
	fs.Float64Var(&o.DupFraction, "dup-fraction", o.DupFraction, "fraction of duplicates")
	fs.Float64Var(&o.TailFraction, "tail-fraction", o.TailFraction, "fraction of late (heavy-tail) clicks")
	fs.Float64Var(&o.InvalidFraction, "invalid-fraction", o.InvalidFraction, "fraction of invalid lines")
	trace := fs.String("trace", "", "trace file to use; generated there if missing (default: a temporary file)")
	variants := fs.String("variants", "limit,pipeline,pipeline-nodedup,pipeline-nocheckpoint", "variants to run, comma-separated")
	asJSON := fs.Bool("json", false, "print {\"results\": [...]} as JSON")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the pipeline variant to this file")
	parallelism := fs.Int("parallelism", 0, "pipeline subtasks (default: number of CPUs)")
	peers := fs.String("peers", "", "also run the peer programs of this folder (its run.sh) on the same trace, and print their table")
	peerList := fs.String("peer-list", "", "with --peers: the peers to run, comma-separated, e.g. duckdb,flink,flink-nockpt (default: run.sh's)")
	peersOut := fs.String("peers-out", "", "with --peers: the folder for their outputs and table (default: a new temporary folder)")
	runLimit := fs.Bool("run-limit", false, "internal: run the limit variant in this process")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *runLimit {
		if *trace == "" {
			return usageError{errors.New("--run-limit needs --trace")}
		}
		return bench.Limit(*trace, stdout)
	}
	if *peers != "" && *trace == "" {
		return usageError{errors.New("--peers needs --trace: the peers read the same trace after the variants")}
	}
	if *peers != "" {
		if err := bench.CheckPeerList(*peers, *peerList); err != nil {
			return usageError{err}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	results, err := bench.Run(ctx, bench.Options{Self: self, Trace: *trace, Gen: o, Variants: strings.Split(*variants, ","),
		CPUProfile: *cpuprofile, Parallelism: *parallelism, Log: stderr})
	if err != nil {
		return err
	}
	if *asJSON {
		err = bench.WriteJSON(stdout, results)
	} else {
		err = bench.WriteTable(stdout, results)
	}
	if err != nil || *peers == "" {
		return err
	}
	table, err := bench.Peers(ctx, bench.PeerOptions{Dir: *peers, Trace: *trace, Clicks: o.Clicks, Out: *peersOut, List: *peerList, Log: stderr})
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, "\n"+table)
	return err
}
