package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clickLine returns one JSON Lines click of the file source.
func clickLine(id, ad, shard string, impressionMs, deviceMs, arrivalMs, spend int64) string {
	return fmt.Sprintf(`{"click_id":%q,"ad_id":%q,"campaign_id":"c1","device_id":"d-%s","impression_ms":%d,"device_ms":%d,"spend_micros":%d,"shard":%q,"arrival_ms":%d}`,
		id, ad, id, impressionMs, deviceMs, spend, shard, arrivalMs)
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestZeroAllowanceMeansZero is seed 002's drill: with --allowance-ms 0, a
// click that arrives 500 ms behind a newer one across a minute boundary
// goes to the side output. Before the fix, 0 silently ran as 5,000 ms and
// the click was counted on time.
func TestZeroAllowanceMeansZero(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()
	minute := base + 60_000
	writeLines(t, trace, []string{
		clickLine("a", "ad1", "s1", minute+100, minute+100, minute+100, 10),
		// 500 ms later, from the minute before: late with a zero bound.
		clickLine("b", "ad1", "s1", minute-200, minute-200, minute+600, 20),
		clickLine("c", "ad1", "s1", minute+900, minute+900, minute+900, 30),
	})
	for _, tc := range []struct {
		allowance string
		wantLate  int64
	}{{"0", 1}, {"5000", 0}} {
		t.Run("allowance_"+tc.allowance, func(t *testing.T) {
			data := filepath.Join(dir, "data-"+tc.allowance)
			replay(t, trace, data, "--allowance-ms", tc.allowance)
			rs, out := rows(t, data)
			var late, fast int64
			for _, r := range rs {
				late += val(r.LateValid)
				if r.Bucket[0] == 'H' {
					fast += val(r.FastValid)
				}
			}
			if late != tc.wantLate || fast+late != 3 {
				t.Fatalf("allowance %s: late %d, hour fast %d; want late %d and 3 in all\n%s", tc.allowance, late, fast, tc.wantLate, out)
			}
		})
	}
}

// TestZeroIsRefusedWhereItMeansNothing: an explicit 0 for a setting whose
// zero the library reads as "the default" is a usage error, not a silent
// default.
func TestZeroIsRefusedWhereItMeansNothing(t *testing.T) {
	for _, flag := range []string{"--idle-ms", "--watermark-interval-ms", "--job-gen", "--horizon-ms"} {
		out := runStderr(t, 2, "run", "--source", "file:/nonexistent", "--data", t.TempDir(), "--listen", "", flag, "0")
		if !strings.Contains(out, flag+" 0: must be positive") {
			t.Errorf("%s 0: stderr %q, want it refused", flag, out)
		}
	}
}

// runStderr runs the binary, checks its exit code and returns its stderr.
func runStderr(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	_, stderr := runBoth(t, wantCode, args...)
	return string(stderr)
}

// TestArrivalJumpIsBounded: in a file replay, one line whose arrival_ms is
// days ahead of the others (or near the year 9999) must neither move the
// virtual clock forward for good — which switched the dedup guard on and
// dropped every later line — nor make the tick loop run practically for
// ever. Before the fix the run with the far line did not finish in minutes,
// and the one with the two-day line lost every click after it.
func TestArrivalJumpIsBounded(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli()
	for _, tc := range []struct {
		name   string
		jumpMs int64 // the odd line's arrival
	}{
		{"two days ahead", base + 2*24*3_600_000},
		{"near the year 9999", time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trace := filepath.Join(dir, "trace.jsonl")
			var lines, normal []string
			for i := range 600 {
				at := base + int64(i)*500
				if i == 200 {
					// Its impression is normal, so by the horizon rule
					// (impression before arrival − allowance − 1 ms − 2 h)
					// it is beyond the horizon, as the recount judges it.
					lines = append(lines, clickLine("odd", "ad_odd", "s1", at, at, tc.jumpMs, 5))
					continue
				}
				l := clickLine(fmt.Sprint("c", i), fmt.Sprint("ad", i%7), fmt.Sprint("s", i%2), at, at, at, 10)
				lines, normal = append(lines, l), append(normal, l)
			}
			writeLines(t, trace, lines)
			// Every other line is counted exactly.
			refPath := filepath.Join(dir, "normal.jsonl")
			writeLines(t, refPath, normal)
			ref := buildReference(t, refPath)
			data := filepath.Join(dir, "data")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, append([]string{"run", "--source", "file:" + trace, "--data", data}, runFlags...)...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start := time.Now()
			if err := cmd.Run(); err != nil {
				t.Fatalf("run: %v after %s (a bounded replay ends in seconds)\n%s", err, time.Since(start).Round(time.Second), errb.String())
			}
			rs, _ := rows(t, data)
			check(t, rs, ref, nil)
		})
	}
}
