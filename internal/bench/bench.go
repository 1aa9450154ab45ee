package bench

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

// Result is one variant's measurement. A variant that failed has only
// Name and Error.
type Result struct {
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

// Options configure Run.
type Options struct {
	// Self is the adclick executable each variant runs (required).
	Self string
	// Trace is the trace file. It is generated there from Gen if it does
	// not exist; empty means a temporary file, removed when Run returns.
	Trace string
	// Gen configures the generated trace.
	Gen ingest.GenOptions
	// Variants are run in order: limit, pipeline, pipeline-nodedup,
	// pipeline-nocheckpoint and workersN (N from 2 to 128; surrounding
	// spaces are ignored). An unknown name gives a Result with an Error.
	Variants []string
	// CPUProfile, if set, is where the pipeline variant writes a CPU
	// profile.
	CPUProfile string
	// Parallelism is the pipeline variants' subtasks; 0 is the job's
	// default (the number of CPUs).
	Parallelism int
	// Log receives a line as each step begins ("bench: running limit");
	// nil discards them.
	Log io.Writer
}

// Run generates the trace if needed, runs each variant and returns their
// results, each with its ratio to limit's clicks per second (0 without a
// successful limit variant). A variant that fails is reported in its
// Result's Error and the others still run; the error is for the harness
// itself (no temporary folder, no trace).
func Run(ctx context.Context, o Options) ([]Result, error) {
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	tmp, err := os.MkdirTemp("", "adclick-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(tmp)
	trace := o.Trace
	if trace == "" {
		trace = filepath.Join(tmp, "trace.jsonl")
	}
	if _, err := os.Stat(trace); err != nil {
		fmt.Fprintf(logw, "bench: generating %d clicks into %s\n", o.Gen.Clicks, trace)
		if err := writeTrace(trace, o.Gen); err != nil {
			return nil, err
		}
	}
	var results []Result
	var limit float64
	for _, v := range o.Variants {
		v = strings.TrimSpace(v)
		fmt.Fprintf(logw, "bench: running %s\n", v)
		r, err := runVariant(ctx, o, v, trace, tmp)
		if err != nil {
			r = Result{Name: v, Error: err.Error()}
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
	return results, nil
}

// WriteJSON writes {"results": [...]}, indented.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"results": results})
}

// WriteTable writes the results as a table for people, one variant a line.
func WriteTable(w io.Writer, results []Result) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-22s %12s %14s %7s %10s %10s %10s %11s %11s %11s %8s\n", "variant", "clicks/s", "clicks/s/core", "cores", "p50 ms", "p99 ms", "peak RSS", "state", "last ckpt", "ckpt new", "÷limit")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(&b, "%-22s error: %s\n", r.Name, r.Error)
			continue
		}
		fmt.Fprintf(&b, "%-22s %12.0f %14.0f %7.2f %10.2f %10.2f %9.0fM %10.0fM %8dms %10.0fM %8.2f\n", r.Name, r.ClicksPerSec, r.ClicksPerSecCore,
			r.CoresUsed, r.BatchP50Ms, r.BatchP99Ms, float64(r.PeakRSSBytes)/1e6, float64(r.StateBytes)/1e6, r.LastCheckpointMs,
			float64(r.LastCheckpointNew)/1e6, r.RatioToLimit)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeTrace generates the trace file at path.
func writeTrace(path string, o ingest.GenOptions) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: trace: %w", err)
	}
	if _, err := ingest.WriteTrace(f, o, nil); err != nil {
		f.Close()
		return fmt.Errorf("bench: trace %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: trace: %w", err)
	}
	return nil
}

// runVariant runs variant v as a child process (workersN: N of them) and
// measures it. Its errors become the Result's Error, as they are.
func runVariant(ctx context.Context, o Options, v, trace, tmp string) (Result, error) {
	if n, ok := workersVariant(v); ok {
		return runWorkers(ctx, o, v, n, trace, tmp)
	}
	stats := filepath.Join(tmp, v+".stats.json")
	var args []string
	switch v {
	case "limit":
		args = []string{"bench", "--run-limit", "--trace", trace}
	case "pipeline", "pipeline-nodedup", "pipeline-nocheckpoint":
		data := filepath.Join(tmp, v+".data")
		args = pipelineArgs(trace, data, stats)
		if o.Parallelism > 0 {
			args = append(args, "--parallelism", strconv.Itoa(o.Parallelism))
		}
		if v == "pipeline-nodedup" {
			args = append(args, "--no-dedup")
		}
		if v == "pipeline-nocheckpoint" {
			args = append(args, "--no-checkpoint")
		}
		if v == "pipeline" && o.CPUProfile != "" {
			args = append(args, "--cpuprofile", o.CPUProfile)
		}
		defer os.RemoveAll(data)
	default:
		return Result{}, fmt.Errorf("unknown variant %q", v)
	}
	cmd := exec.CommandContext(ctx, o.Self, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	r := Result{Name: v, Seconds: wall.Seconds()}
	r.CPUSeconds, r.PeakRSSBytes = usage(cmd)
	if v == "limit" {
		var lr limitResult
		if err := json.Unmarshal(out.Bytes(), &lr); err != nil {
			return Result{}, fmt.Errorf("limit output: %w", err)
		}
		// The limit is timed inside the process, over the decode-and-count
		// loop only (the trace is loaded into memory first).
		r.Clicks, r.Seconds, r.CPUSeconds = lr.Clicks, lr.Seconds, lr.CPUSeconds
	} else {
		s, err := readStats(stats)
		if err != nil {
			return Result{}, err
		}
		r.Clicks = s.Records
		r.BatchP50Ms, r.BatchP99Ms = float64(s.BatchLatencyP50)/1e6, float64(s.BatchLatencyP99)/1e6
		r.StateBytes, r.Checkpoints = s.StateBytes, s.Checkpoints
		r.LastCheckpointMs, r.LastCheckpointB, r.LastCheckpointNew = s.LastCheckpointMs, s.LastCheckpointB, s.LastUploadedB
	}
	r.rates()
	return r, nil
}

// pipelineArgs are the arguments of one embedded-mode replay of trace.
func pipelineArgs(trace, data, stats string) []string {
	return []string{"run", "--source", "file:" + trace, "--data", data, "--listen", "", "--progress", "0",
		"--log-level", "warn", "--stats-file", stats}
}

// usage returns a finished child's CPU time and peak RSS.
func usage(cmd *exec.Cmd) (cpuSeconds float64, peakRSS int64) {
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if ru == nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), ru.Maxrss * 1024
}

func readStats(path string) (rt.Stats, error) {
	var s rt.Stats
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// rates fills the per-second figures from Clicks, Seconds and CPUSeconds.
func (r *Result) rates() {
	if r.Seconds > 0 {
		r.ClicksPerSec = float64(r.Clicks) / r.Seconds
		r.CoresUsed = r.CPUSeconds / r.Seconds
	}
	if r.CPUSeconds > 0 {
		r.ClicksPerSecCore = float64(r.Clicks) / r.CPUSeconds
	}
}

// workersVariant parses "workersN" (2 ≤ N ≤ 128).
func workersVariant(v string) (int, bool) {
	rest, ok := strings.CutPrefix(v, "workers")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 2 && n <= 128
}

// runWorkers is the variant workersN: N processes replay the trace at
// once, each owning an equal range of the ads' key groups (run
// --key-groups, its own data dir and embedded store), each on one core
// (GOMAXPROCS=1, one subtask, and pinned with taskset when the machine has
// it). Every process reads every record and counts only its own ads', as
// the workers of a fleet do. Clicks/s is the trace's clicks over the wall
// time of the slowest; CPU time, peak RSS and state are the processes'
// sums; latency is the largest any process had.
func runWorkers(ctx context.Context, o Options, v string, n int, trace, tmp string) (Result, error) {
	taskset, _ := exec.LookPath("taskset")
	cmds := make([]*exec.Cmd, n)
	errs := make([]bytes.Buffer, n)
	stats := make([]string, n)
	for i := range n {
		data := filepath.Join(tmp, fmt.Sprintf("%s-%d.data", v, i))
		defer os.RemoveAll(data)
		stats[i] = filepath.Join(tmp, fmt.Sprintf("%s-%d.stats.json", v, i))
		kg := fmt.Sprintf("kg%d-%d", i*128/n, (i+1)*128/n)
		args := append(pipelineArgs(trace, data, stats[i]), "--parallelism", "1", "--key-groups", kg)
		name := o.Self
		if taskset != "" {
			args = append([]string{"-c", strconv.Itoa(i % runtime.NumCPU()), o.Self}, args...)
			name = taskset
		}
		cmds[i] = exec.CommandContext(ctx, name, args...)
		cmds[i].Env = append(os.Environ(), "GOMAXPROCS=1")
		cmds[i].Stderr = &errs[i]
	}
	start := time.Now()
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			for _, c := range cmds[:i] {
				c.Process.Kill()
				c.Wait()
			}
			return Result{}, err
		}
	}
	var failed []error
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			failed = append(failed, fmt.Errorf("worker %d: %v: %s", i, err, strings.TrimSpace(errs[i].String())))
		}
	}
	wall := time.Since(start)
	if len(failed) > 0 {
		return Result{}, errors.Join(failed...)
	}
	r := Result{Name: v, Seconds: wall.Seconds()}
	for i, c := range cmds {
		cpu, rss := usage(c)
		r.CPUSeconds += cpu
		r.PeakRSSBytes += rss
		s, err := readStats(stats[i])
		if err != nil {
			return Result{}, err
		}
		if i == 0 {
			r.Clicks = s.Records // every worker reads every record
		} else if s.Records != r.Clicks {
			return Result{}, fmt.Errorf("worker %d read %d records, worker 0 %d", i, s.Records, r.Clicks)
		}
		r.BatchP50Ms = max(r.BatchP50Ms, float64(s.BatchLatencyP50)/1e6)
		r.BatchP99Ms = max(r.BatchP99Ms, float64(s.BatchLatencyP99)/1e6)
		r.StateBytes += s.StateBytes
		r.Checkpoints = max(r.Checkpoints, s.Checkpoints)
		r.LastCheckpointMs = max(r.LastCheckpointMs, s.LastCheckpointMs)
		r.LastCheckpointB += s.LastCheckpointB
		r.LastCheckpointNew += s.LastUploadedB
	}
	r.rates()
	return r, nil
}

// limitResult is what the limit variant's process prints on stdout.
type limitResult struct {
	Clicks     int64   `json:"clicks"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// Limit is the limit variant, run in the process of adclick bench
// --run-limit: it loads the trace, then decodes every line and counts the
// valid ones in a map by (ad, minute) on every core, timing only that
// loop, and prints the count, the wall time and the process's CPU time of
// the loop to w as JSON.
func Limit(trace string, w io.Writer) error {
	if trace == "" {
		return errors.New("bench: limit: no trace file")
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		return fmt.Errorf("bench: limit: %w", err)
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
	return json.NewEncoder(w).Encode(limitResult{Clicks: total, Seconds: wall.Seconds(), CPUSeconds: cpu.Seconds()})
}

// splitLines cuts b into at most n chunks of about equal size, each ending
// at a line end (the last at b's end).
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

// cpuTime returns the user plus system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// WriteStats writes a run's statistics to path as indented JSON, as
// adclick run --stats-file does for the pipeline variants.
func WriteStats(path string, s rt.Stats) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode stats: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("bench: write stats: %w", err)
	}
	return nil
}
