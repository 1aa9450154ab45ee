//go:build integration

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
)

// TestPutWarningMatchesTheStream pins put's warning to the verdict the job
// gives: clicks of impressions at ages around the horizon (2 h) and the
// allowance (5 s) past it are put into a stream (kinesalite), the job reads
// them, and the clicks put warned about are exactly those the job judged
// beyond the horizon (no row), the others each counted once. A click whose
// impression is between 2 h and 2 h + the allowance before it was put is
// counted by the stream, so put must not warn about it.
func TestPutWarningMatchesTheStream(t *testing.T) {
	t.Parallel() // its own temp dir and stream
	awsSlot(t)
	testenv.Kinesis(t)
	dir := t.TempDir()
	stream := "h" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run(t, 0, "setup", "--stream", stream, "--shards", "1")
	const hour = 3_600_000
	now := time.Now().UnixMilli()
	ages := []struct {
		ad     string
		ageMs  int64
		beyond bool // the stream's verdict
	}{
		{"a_fresh", 60_000, false},
		{"a_inside", 2*hour - 60_000, false},
		{"a_within_allowance", 2*hour + 1_500, false},
		{"a_past", 2*hour + 60_000, true},
		{"a_days", 50 * hour, true},
	}
	var lines []string
	want := 0
	for i, a := range ages {
		lines = append(lines, testenv.ClickLine("c"+strconv.Itoa(i), a.ad, "s0", now-a.ageMs, 0))
		if a.beyond {
			want++
		}
	}
	trace := filepath.Join(dir, "clicks.jsonl")
	if err := os.WriteFile(trace, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr := runBoth(t, 0, "put", "--from", trace, "--to", "kinesis:"+stream)
	m := regexp.MustCompile(`warning: (\d+) of (\d+) valid clicks`).FindSubmatch(stderr)
	warned := 0
	if m != nil {
		warned, _ = strconv.Atoi(string(m[1]))
	}
	data := filepath.Join(dir, "data")
	run(t, 0, "run", "--source", "kinesis:"+stream, "--data", data, "--listen", "", "--progress", "0",
		"--log-level", "warn", "--exit-when-idle", "2s", "--drain", "--checkpoint-interval-ms", "500")
	counted := map[string]int64{}
	for _, r := range parseRows(t, run(t, 0, "rows", "--data", data)) {
		if strings.HasPrefix(r.Bucket, "H") { // the hour rows hold fast + late
			if r.FastValid != nil {
				counted[r.Entity] += *r.FastValid
			}
			if r.LateValid != nil {
				counted[r.Entity] += *r.LateValid
			}
		}
	}
	gotBeyond := 0
	for _, a := range ages {
		c := counted[a.ad]
		switch {
		case a.beyond && c != 0:
			t.Errorf("ad %s (impression %v before the put): counted %d, want the stream to reject it as beyond the horizon", a.ad, time.Duration(a.ageMs)*time.Millisecond, c)
		case !a.beyond && c != 1:
			t.Errorf("ad %s (impression %v before the put): counted %d, want 1", a.ad, time.Duration(a.ageMs)*time.Millisecond, c)
		}
		if c == 0 {
			gotBeyond++
		}
	}
	if warned != gotBeyond || warned != want {
		t.Errorf("put warned of %d clicks, the stream rejected %d (want %d)\nput's stderr: %s", warned, gotBeyond, want, stderr)
	}
}
