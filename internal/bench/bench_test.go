package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/ingest"
	rt "github.com/adclick/adclick/runtime"
)

// TestSplitLines: each chunk ends at the end of the line holding its
// share's last byte.
func TestSplitLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want []string
	}{
		{"empty", "", 4, nil},
		{"one_chunk", "a\nb\nc\n", 1, []string{"a\nb\nc\n"}},
		{"cut_after_the_middle_line", "aa\nbb\ncc\ndd\n", 2, []string{"aa\nbb\ncc\n", "dd\n"}},
		{"at_a_line_start", "aaaaa\nbbbbb\n", 2, []string{"aaaaa\nbbbbb\n"}},
		{"more_chunks_than_lines", "a\nb\n", 8, []string{"a\n", "b\n"}},
		{"no_final_newline", "aaaa\nbb", 2, []string{"aaaa\n", "bb"}},
		{"one_long_line", "abcdefgh", 3, []string{"abcdefgh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range splitLines([]byte(tc.in), tc.n) {
				got = append(got, string(c))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// writeTestTrace writes a generated trace and returns its path and the
// number of its lines that decode.
func writeTestTrace(t *testing.T, clicks int64) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	o := ingest.GenOptions{Clicks: clicks, Seed: 9, InvalidFraction: 0.05}
	if err := writeTrace(path, o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var valid int64
	var c ingest.Click
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if ingest.Decode([]byte(l), &c) == "" {
			valid++
		}
	}
	if valid == 0 || valid == clicks {
		t.Fatalf("%d of %d lines decode, want some invalid ones", valid, clicks)
	}
	return path, valid
}

// TestLimit: the limit variant counts the lines that decode.
func TestLimit(t *testing.T) {
	path, valid := writeTestTrace(t, 20_000)
	var out bytes.Buffer
	if err := Limit(path, &out); err != nil {
		t.Fatal(err)
	}
	var lr limitResult
	if err := json.Unmarshal(out.Bytes(), &lr); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if lr.Clicks != valid || lr.Seconds <= 0 {
		t.Errorf("got %+v, want %d clicks and a positive time", lr, valid)
	}
	if err := Limit("", &out); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
		t.Errorf("no trace: got %v, want a bench: error", err)
	}
}

// TestRun runs the limit variant in a child process (this test binary
// standing in for adclick), an unknown variant and a variant whose
// process fails: each failure is its result's error, the others run.
func TestRun(t *testing.T) {
	t.Setenv(childEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "gen.jsonl") // absent: generated
	var log bytes.Buffer
	rs, err := Run(context.Background(), Options{Self: self, Trace: trace, Gen: ingest.GenOptions{Clicks: 5000, InvalidFraction: -1},
		Variants: []string{"limit", " bogus", "pipeline"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("got %d results, want 3: %+v", len(rs), rs)
	}
	if l := rs[0]; l.Name != "limit" || l.Error != "" || l.Clicks != 5000 || l.ClicksPerSec <= 0 || l.RatioToLimit != 1 || l.PeakRSSBytes <= 0 {
		t.Errorf("limit: got %+v, want 5000 clicks, a rate, ratio 1 and the peak RSS", l)
	}
	if b := rs[1]; b.Name != "bogus" || b.Error != `unknown variant "bogus"` {
		t.Errorf("bogus: got %+v, want an unknown-variant error", b)
	}
	if p := rs[2]; p.Name != "pipeline" || !strings.Contains(p.Error, "exit status 1: no such command here") {
		t.Errorf("pipeline: got %+v, want the failed process's exit status and stderr", p)
	}
	if fi, err := os.Stat(trace); err != nil || fi.Size() == 0 {
		t.Errorf("the trace was not generated at --trace: %v", err)
	}
	for _, w := range []string{"bench: generating 5000 clicks into " + trace, "bench: running limit", "bench: running bogus", "bench: running pipeline"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, log.String())
		}
	}
	// An existing trace is used as it is.
	log.Reset()
	if _, err := Run(context.Background(), Options{Self: self, Trace: trace, Variants: []string{"limit"}, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "generating") {
		t.Errorf("an existing trace was generated again:\n%s", log.String())
	}
}

func TestWriteTableAndJSON(t *testing.T) {
	rs := []Result{
		{Name: "limit", Clicks: 1000, Seconds: 0.5, ClicksPerSec: 2000, CPUSeconds: 1, CoresUsed: 2, ClicksPerSecCore: 1000, PeakRSSBytes: 50e6, RatioToLimit: 1},
		{Name: "pipeline", ClicksPerSec: 500, ClicksPerSecCore: 250, CoresUsed: 2, BatchP50Ms: 1.25, BatchP99Ms: 9.5, PeakRSSBytes: 300e6,
			StateBytes: 120e6, LastCheckpointMs: 42, LastCheckpointNew: 3e6, RatioToLimit: 0.25},
		{Name: "pipeline-nodedup", Error: "exit status 1: boom"},
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"variant                    clicks/s  clicks/s/core   cores     p50 ms     p99 ms   peak RSS       state   last ckpt    ckpt new   ÷limit\n" +
		"limit                          2000           1000    2.00       0.00       0.00        50M          0M        0ms          0M     1.00\n" +
		"pipeline                        500            250    2.00       1.25       9.50       300M        120M       42ms          3M     0.25\n" +
		"pipeline-nodedup       error: exit status 1: boom\n"
	if b.String() != want {
		t.Errorf("table:\ngot\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteJSON(&b, rs[2:]); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || len(got.Results) != 1 || got.Results[0]["error"] != "exit status 1: boom" ||
		got.Results[0]["clicks_per_sec"] != 0.0 {
		t.Errorf("json %s: got %+v, %v", b.String(), got, err)
	}
}

func TestWriteStats(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stats.json")
	s := rt.Stats{Records: 7, BatchLatencyP50: 1500, Checkpoints: 2, LastUploadedB: math.MaxInt32}
	if err := WriteStats(path, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got rt.Stats
	if err := json.Unmarshal(b, &got); err != nil || got != s {
		t.Errorf("got %+v (%v), want %+v", got, err, s)
	}
	if err := WriteStats(filepath.Join(t.TempDir(), "no", "dir"), s); err == nil || !strings.HasPrefix(err.Error(), "bench: write stats: ") {
		t.Errorf("unwritable path: got %v, want a bench: write stats error", err)
	}
}
