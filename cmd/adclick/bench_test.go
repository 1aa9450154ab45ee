package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchLimit runs adclick bench with the limit variant on a small
// trace: the trace is generated at --trace, the limit variant runs as
// adclick bench --run-limit in a process of its own, and the output is
// the table, or the results as JSON with --json.
func TestBenchLimit(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	args := []string{"bench", "--variants", "limit", "--clicks", "3000", "--invalid-fraction", "0", "--trace", trace}
	var out, errb bytes.Buffer
	cmd := exec.Command(binPath, append(args, "--json")...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, errb.String())
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("bench --json output %q: %v", out.String(), err)
	}
	if len(got.Results) != 1 || got.Results[0]["name"] != "limit" || got.Results[0]["clicks"] != 3000.0 ||
		got.Results[0]["ratio_to_limit"] != 1.0 || got.Results[0]["error"] != nil {
		t.Errorf("bench --json: got %v, want the limit variant's 3000 clicks, ratio 1", got.Results)
	}
	for _, w := range []string{"bench: generating 3000 clicks into " + trace, "bench: running limit"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}

	// The trace is reused; the table has a line per variant.
	out.Reset()
	errb.Reset()
	cmd = exec.Command(binPath, append(args, "--variants", "limit,nope")...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "variant ") || !strings.HasPrefix(lines[1], "limit ") ||
		lines[2] != `nope                   error: unknown variant "nope"` {
		t.Errorf("bench table:\n%s\nwant a header, limit and nope's error", out.String())
	}
	if strings.Contains(errb.String(), "generating") {
		t.Errorf("an existing --trace was generated again:\n%s", errb.String())
	}

	var o, e bytes.Buffer
	if code := realMain([]string{"bench", "--run-limit"}, &o, &e); code != 2 {
		t.Errorf("bench --run-limit without --trace: exit %d, want 2", code)
	}
}

// TestBenchWorkers runs the workers2 variant beside the pipeline on a small
// trace: two processes, each owning half the key groups, each read every
// record; the result counts the trace's records once (as the pipeline
// does) and the processes' CPU. Only workers2..workers128 are variants.
func TestBenchWorkers(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	var out, errb bytes.Buffer
	cmd := exec.Command(binPath, "bench", "--variants", "pipeline,workers2", "--clicks", "20000", "--ads", "500", "--trace", trace, "--json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	var got struct {
		Results []struct {
			Name       string  `json:"name"`
			Clicks     int64   `json:"clicks"`
			CPUSeconds float64 `json:"cpu_seconds"`
			Error      string  `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if len(got.Results) != 2 || got.Results[0].Error != "" || got.Results[1].Error != "" {
		t.Fatalf("results %+v, want pipeline and workers2 without errors", got.Results)
	}
	p, w := got.Results[0], got.Results[1]
	if w.Name != "workers2" || w.Clicks != p.Clicks || w.Clicks < 20000 || w.CPUSeconds <= 0 {
		t.Errorf("workers2 %+v, want the pipeline's %d records and some CPU time", w, p.Clicks)
	}
	for _, bad := range []string{"workers1", "workers200", "workersx"} {
		out.Reset()
		cmd := exec.Command(binPath, "bench", "--variants", bad, "--clicks", "100", "--trace", trace, "--json")
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `unknown variant \"`+bad+`\"`) {
			t.Errorf("variant %s: %s, want unknown", bad, out.String())
		}
	}
}
