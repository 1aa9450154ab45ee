package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/adclick/adclick/ingest"
	rt "github.com/adclick/adclick/runtime"
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

For each: clicks/s, clicks/s per core used, p50/p99 batch latency, peak RSS,
bytes of state, and the ratio to limit. The trace is generated once (or
reused with --trace).`

// BenchResult is one variant's measurement.
type BenchResult struct {
	Name              string  `json:"name"`
	Clicks            int64   `json:"clicks"`
	Seconds           float64 `json:"seconds"`
	ClicksPerSec      float64 `json:"clicks_per_sec"`
	CPUSeconds        float64 `json:"cpu_seconds"`
	CoresUsed         float64 `json:"cores_used"`
	ClicksPerSecCore  float64 `json:"clicks_per_sec_per_core"`
	BatchP50Ms        float64 `json:"batch_latency_p50_ms"`
	BatchP99Ms        float64 `json:"batch_latency_p99_ms"`
	PeakRSSBytes      int64   `json:"peak_rss_bytes"`
	StateBytes        int64   `json:"state_bytes"`
	Checkpoints       int64   `json:"checkpoints"`
	LastCheckpointMs  int64   `json:"last_checkpoint_ms"`
	LastCheckpointB   int64   `json:"last_checkpoint_bytes"`
	LastCheckpointNew int64   `json:"last_checkpoint_new_bytes"`
	RatioToLimit      float64 `json:"ratio_to_limit"`
	Error             string  `json:"error,omitempty"`
}

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
	runLimit := fs.Bool("run-limit", false, "internal: run the limit variant in this process")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *runLimit {
		return benchLimit(*trace, stdout)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "adclick-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if *trace == "" {
		*trace = filepath.Join(tmp, "trace.jsonl")
	}
	if _, err := os.Stat(*trace); err != nil {
		fmt.Fprintf(stderr, "bench: generating %d clicks into %s\n", o.Clicks, *trace)
		if err := writeTrace(*trace, o); err != nil {
			return err
		}
	}
	var results []BenchResult
	var limit float64
	for _, v := range strings.Split(*variants, ",") {
		v = strings.TrimSpace(v)
		fmt.Fprintf(stderr, "bench: running %s\n", v)
		r, err := runVariant(ctx, self, v, *trace, tmp, *cpuprofile, *parallelism)
		if err != nil {
			r = BenchResult{Name: v, Error: err.Error()}
		}
		if v == "limit" {
			limit = r.ClicksPerSec
		}
		results = append(results, r)
	}
	for i := range results {
		if limit > 0 {
			results[i].RatioToLimit = results[i].ClicksPerSec / limit
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"results": results})
	}
	fmt.Fprintf(stdout, "%-22s %12s %14s %7s %10s %10s %10s %11s %11s %11s %8s\n", "variant", "clicks/s", "clicks/s/core", "cores", "p50 ms", "p99 ms", "peak RSS", "state", "last ckpt", "ckpt new", "÷limit")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(stdout, "%-22s error: %s\n", r.Name, r.Error)
			continue
		}
		fmt.Fprintf(stdout, "%-22s %12.0f %14.0f %7.2f %10.2f %10.2f %9.0fM %10.0fM %8dms %10.0fM %8.2f\n", r.Name, r.ClicksPerSec, r.ClicksPerSecCore,
			r.CoresUsed, r.BatchP50Ms, r.BatchP99Ms, float64(r.PeakRSSBytes)/1e6, float64(r.StateBytes)/1e6, r.LastCheckpointMs,
			float64(r.LastCheckpointNew)/1e6, r.RatioToLimit)
	}
	return nil
}

func writeTrace(path string, o ingest.GenOptions) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufioWriter(f)
	g := ingest.NewGen(o)
	var buf []byte
	for {
		line, _, ok := g.Next(buf[:0])
		if !ok {
			break
		}
		buf = append(line, '\n')
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runVariant(ctx context.Context, self, v, trace, tmp, cpuprofile string, par int) (BenchResult, error) {
	stats := filepath.Join(tmp, v+".stats.json")
	var args []string
	switch v {
	case "limit":
		args = []string{"bench", "--run-limit", "--trace", trace}
	case "pipeline", "pipeline-nodedup", "pipeline-nocheckpoint":
		data := filepath.Join(tmp, v+".data")
		args = []string{"run", "--source", "file:" + trace, "--data", data, "--listen", "", "--progress", "0",
			"--log-level", "warn", "--stats-file", stats}
		if par > 0 {
			args = append(args, "--parallelism", strconv.Itoa(par))
		}
		if v == "pipeline-nodedup" {
			args = append(args, "--no-dedup")
		}
		if v == "pipeline-nocheckpoint" {
			args = append(args, "--no-checkpoint")
		}
		if v == "pipeline" && cpuprofile != "" {
			args = append(args, "--cpuprofile", cpuprofile)
		}
		defer os.RemoveAll(data)
	default:
		return BenchResult{}, usageError{fmt.Errorf("unknown variant %q", v)}
	}
	cmd := exec.CommandContext(ctx, self, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return BenchResult{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := BenchResult{Name: v, Seconds: wall.Seconds()}
	if ru != nil {
		r.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		r.PeakRSSBytes = ru.Maxrss * 1024
	}
	if v == "limit" {
		var lr limitResult
		if err := json.Unmarshal(out.Bytes(), &lr); err != nil {
			return BenchResult{}, fmt.Errorf("limit output: %w", err)
		}
		// The limit is timed inside the process, over the decode-and-count
		// loop only (the trace is loaded into memory first).
		r.Clicks, r.Seconds, r.CPUSeconds = lr.Clicks, lr.Seconds, lr.CPUSeconds
	} else {
		b, err := os.ReadFile(stats)
		if err != nil {
			return BenchResult{}, err
		}
		var s rt.Stats
		if err := json.Unmarshal(b, &s); err != nil {
			return BenchResult{}, err
		}
		r.Clicks = s.Records
		r.BatchP50Ms, r.BatchP99Ms = float64(s.BatchLatencyP50)/1e6, float64(s.BatchLatencyP99)/1e6
		r.StateBytes, r.Checkpoints = s.StateBytes, s.Checkpoints
		r.LastCheckpointMs, r.LastCheckpointB, r.LastCheckpointNew = s.LastCheckpointMs, s.LastCheckpointB, s.LastUploadedB
	}
	if r.Seconds > 0 {
		r.ClicksPerSec = float64(r.Clicks) / r.Seconds
		r.CoresUsed = r.CPUSeconds / r.Seconds
	}
	if r.CPUSeconds > 0 {
		r.ClicksPerSecCore = float64(r.Clicks) / r.CPUSeconds
	}
	return r, nil
}

type limitResult struct {
	Clicks     int64   `json:"clicks"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// benchLimit loads the trace, then decodes every line and counts it in a
// map by (ad, minute) on every core, timing only that loop.
func benchLimit(trace string, stdout io.Writer) error {
	if trace == "" {
		return usageError{errors.New("--run-limit needs --trace")}
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		return err
	}
	n := runtime.GOMAXPROCS(0)
	chunks := splitLines(b, n)
	type key struct {
		ad  string
		min int64
	}
	counts := make([]int64, n)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for i, ch := range chunks {
		wg.Go(func() {
			m := make(map[key]int64)
			var c ingest.Click
			var k int64
			for len(ch) > 0 {
				j := bytes.IndexByte(ch, '\n')
				line := ch
				if j >= 0 {
					line, ch = ch[:j], ch[j+1:]
				} else {
					ch = nil
				}
				if ingest.Decode(line, &c) != "" {
					continue
				}
				m[key{c.AdID, c.DeviceMs / 60_000}]++
				k++
			}
			counts[i] = k
		})
	}
	wg.Wait()
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	var total int64
	for _, c := range counts {
		total += c
	}
	return json.NewEncoder(stdout).Encode(limitResult{Clicks: total, Seconds: wall.Seconds(), CPUSeconds: cpu.Seconds()})
}

func splitLines(b []byte, n int) [][]byte {
	var out [][]byte
	for i := 0; i < n && len(b) > 0; i++ {
		size := len(b) / (n - i)
		j := size
		if j < len(b) {
			if k := bytes.IndexByte(b[j:], '\n'); k >= 0 {
				j += k + 1
			} else {
				j = len(b)
			}
		}
		out = append(out, b[:j])
		b = b[j:]
	}
	return out
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func writeStats(path string, s rt.Stats) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
