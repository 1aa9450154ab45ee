//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/adclick/adclick/internal/testenv"
)

// TestBlueGreenSweep is seed 001's branch B end to end: v1 (job_gen 7)
// reads a Kinesis stream into DynamoDB and Valkey; a savepoint is taken
// through the API while it runs; v2 (job_gen 8, its own --data, the same
// stream, table and Valkey prefix) starts from a copy of that savepoint
// while v1 keeps writing, and both read more clicks; v1 is stopped, the
// second sweep runs on v2 (adclick sweep --gen 7 --since <savepoint>), and
// v2 is stopped with a drain. The rows must then hold every click exactly
// once, no value v1 wrote since the savepoint may survive, and v1's writes
// to items v2 had written must have been refused by the job_gen fence.
//
// In "same_settings" both versions run the same settings. In
// "new_allowance" v2 is an upgrade that raises the out-of-orderness
// allowance from v1's 0 ms to 5 s, so the versions judge some clicks
// differently (v1 late, v2 on time: the seed's "v2 excludes one click v1
// counts"); the invariants do not depend on the allowance. Whether v1 then
// leaves values that only the sweep removes depends on timing (v2 usually
// overwrites them), so the sweep's report is logged, not asserted.
func TestBlueGreenSweep(t *testing.T) {
	t.Parallel() // its own temp dir, stream, table and prefix
	awsSlot(t)
	for _, tc := range []struct {
		name   string
		v1, v2 []string
	}{
		{name: "same_settings"},
		{name: "new_allowance", v1: []string{"--allowance-ms", "0"}, v2: []string{"--allowance-ms", "5000"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testBlueGreen(t, tc.v1, tc.v2) })
	}
}

func testBlueGreen(t *testing.T, v1Args, v2Args []string) {
	testenv.Kinesis(t)
	testenv.DynamoDB(t)
	vaddr := testenv.Valkey(t)
	began := time.Now()
	dir := t.TempDir()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, table, prefix := "bg"+suffix, "bg"+suffix, "bg"+suffix
	run(t, 0, "setup", "--stream", stream, "--shards", "3", "--sink", "dynamodb:"+table)

	// Four minutes of clicks ending now, so that Kinesis' arrival times
	// come after every device time and the clamp changes nothing the
	// reference does not know (no skewed clocks). It is put in three parts:
	// A before the savepoint, B1 after it while only v1 runs, B2 once both
	// run.
	const clicks, rate = 4800, 20
	start := time.Now().Add(-clicks * time.Second / rate).Add(-time.Second).UnixMilli()
	trace := filepath.Join(dir, "trace.jsonl")
	run(t, 0, "gen", "--out", trace, "--clicks", strconv.Itoa(clicks), "--rate", strconv.Itoa(rate), "--ads", "30",
		"--shards", "3", "--tail-fraction", "0.05", "--tail-max-ms", "5400000", "--dup-fraction", "0.03",
		"--invalid-fraction", "0.01", "--skew-fraction", "0", "--seed", "17", "--start-ms", strconv.FormatInt(start, 10))
	ref := buildReference(t, trace)
	parts := splitTrace(t, trace, dir, 0.5, 0.7)
	nA, nB1, nB2 := countLines(t, parts[0]), countLines(t, parts[1]), countLines(t, parts[2])
	put := func(part string) { run(t, 0, "put", "--from", part, "--to", "kinesis:"+stream) }

	const token = "bluegreen-admin-token"
	common := []string{"--source", "kinesis:" + stream, "--sink", "dynamodb:" + table, "--valkey", vaddr,
		"--valkey-prefix", prefix, "--parallelism", "2", "--checkpoint-interval-ms", "1000", "--flush-writes-per-sec", "1000000",
		// Small reads, so that watermark ticks fall between them and the
		// allowance decides what is late, as with live traffic.
		"--kinesis-limit", "20"}

	// v1, generation 7.
	put(parts[0])
	v1 := startJob(t, "v1 (gen 7)", token, append(append([]string{"--data", filepath.Join(dir, "v1"), "--job-gen", "7"}, common...), v1Args...)...)
	v1.waitReady()
	v1.waitRecords(nA, time.Minute)
	sp := v1.savepoint()
	if sp.JobGen != 7 {
		t.Fatalf("savepoint %d has job_gen %d, want 7", sp.ID, sp.JobGen)
	}
	t.Logf("v1 read %d records; savepoint %d at %s (%v)", nA, sp.ID, sp.Path, time.Since(began).Round(time.Millisecond))

	// v1 goes on writing past the savepoint before v2 exists.
	put(parts[1])
	v1.waitRecords(nA+nB1, time.Minute)

	// v2, generation 8, from a copy of the savepoint (as if moved to
	// another machine), on its own --data.
	spCopy := filepath.Join(dir, "savepoint-copy")
	if err := os.CopyFS(spCopy, os.DirFS(sp.Path)); err != nil {
		t.Fatalf("copy savepoint %s: %v", sp.Path, err)
	}
	v2 := startJob(t, "v2 (gen 8)", token, append([]string{"--data", filepath.Join(dir, "v2"), "--job-gen", "8",
		"--from-savepoint", spCopy, "--drain"}, append(common, v2Args...)...)...)
	v2.waitReady()
	st2 := v2.mustStatus()
	if st2.JobGen != 8 || st2.RestoredCheckpoint != sp.ID {
		t.Fatalf("v2: job_gen %d restored %d, want 8 and savepoint %d", st2.JobGen, st2.RestoredCheckpoint, sp.ID)
	}
	t.Logf("v2 restored savepoint %d, restore flush %+v (%v)", sp.ID, st2.Flush, time.Since(began).Round(time.Millisecond))
	// v2 replays B1 from the savepoint's positions and writes what it
	// closes (row writes go out at the latest before a checkpoint
	// completes); then both read B2, and v1's writes to the items v2 has
	// written meet the job_gen fence.
	v2.waitRecords(nB1, time.Minute)
	v2.waitUntil("writing after its first checkpoint", time.Minute, func() (bool, string) {
		w, _ := v2.metric("adclick_sink_writes_total")
		s, ok := v2.status()
		return ok && w > 0 && s.LastCheckpoint != nil && s.LastCheckpoint.ID > sp.ID,
			fmt.Sprintf("row writes %v, status %+v", w, s.LastCheckpoint)
	})
	put(parts[2])
	v1.waitRecords(nA+nB1+nB2, time.Minute)
	v2.waitRecords(nB1+nB2, time.Minute)

	// v2 stamped items with job_gen 8 while v1 kept closing windows of the
	// same hours: v1's later writes to those items are refused, not
	// applied.
	var refused float64
	v1.waitUntil("refusing writes", 30*time.Second, func() (bool, string) {
		v, ok := v1.metric("adclick_sink_refused_writes_total")
		refused = v
		w1, _ := v1.metric("adclick_sink_writes_total")
		w2, _ := v2.metric("adclick_sink_writes_total")
		return ok && v > 0, fmt.Sprintf("refused %v of v1's %v row writes; v2 wrote %v", v, w1, w2)
	})
	dynRefused, _ := v1.metric("adclick_dynamo_refused_writes_total")
	t.Logf("v1 refused %v row writes (dynamo: %v)", refused, dynRefused)
	for _, v := range []*jobProc{v1, v2} {
		code, b, err := v.get("/metrics")
		if err != nil || code != 200 {
			t.Fatalf("%s: /metrics: %d %v", v.name, code, err)
		}
		late, _ := sumMetric(b, `adclick_clicks_total{verdict="late"}`)
		counted, _ := sumMetric(b, `adclick_clicks_total{verdict="counted"}`)
		t.Logf("%s: clicks counted %v, late %v", v.name, counted, late)
	}
	if v, _ := v2.metric("adclick_sink_refused_writes_total"); v != 0 {
		t.Errorf("v2 (the newer generation) had %v writes refused, want 0", v)
	}

	// v1 stops; then the second sweep removes what generation 7 wrote
	// since the savepoint; then v2 stops with a drain (every open window
	// fires and is written under generation 8).
	v1.stop(false)
	out := v2.cli("sweep", "--gen", "7", "--since", strconv.FormatInt(sp.ID, 10))
	var sw struct {
		Gen    int64 `json:"gen"`
		Since  int64 `json:"since"`
		Report struct {
			ItemsScanned int `json:"items_scanned"`
			ItemsDeleted int `json:"items_deleted"`
			AttrsRemoved int `json:"attrs_removed"`
			Refused      int `json:"refused"`
		} `json:"report"`
	}
	if err := json.Unmarshal(out, &sw); err != nil || sw.Gen != 7 || sw.Since != sp.ID {
		t.Fatalf("adclick sweep printed %s (%v)", out, err)
	}
	t.Logf("sweep: %+v (%v)", sw.Report, time.Since(began).Round(time.Millisecond))
	v2.terminate()
	t.Logf("v2 drained and stopped (%v)", time.Since(began).Round(time.Millisecond))

	out = run(t, 0, "rows", "--sink", "dynamodb:"+table)
	rs := parseRows(t, out)
	if len(rs) == 0 {
		t.Fatal("no rows written")
	}
	check(t, rs, ref, nil)
	var oldKept, newKept int
	for _, r := range parseGenRows(t, out) {
		for _, w := range []struct {
			name      string
			gen, ckpt *int64
		}{{"fast", r.FastGen, r.FastCkpt}, {"late", r.LateGen, r.LateCkpt}} {
			if w.gen == nil || w.ckpt == nil {
				continue
			}
			switch {
			case *w.gen == 7 && *w.ckpt >= sp.ID:
				t.Errorf("%s/%s: %s_* written by generation 7 at epoch %d survived the sweep of epochs >= %d", r.Entity, r.Bucket, w.name, *w.ckpt, sp.ID)
			case *w.gen == 7:
				oldKept++
			case *w.gen == 8:
				newKept++
			default:
				t.Errorf("%s/%s: %s_gen %d, want 7 or 8", r.Entity, r.Bucket, w.name, *w.gen)
			}
		}
	}
	t.Logf("rows: %d; writer attributes of generation 7 (before the savepoint) %d, of generation 8 %d", len(rs), oldKept, newKept)
	if oldKept == 0 || newKept == 0 {
		t.Errorf("generation 7 kept %d and generation 8 %d attribute groups; want both (v1's output before the savepoint stays, v2 writes after it)", oldKept, newKept)
	}

	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{vaddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	checkValkey(t, vc, prefix, rs)
}

// splitTrace splits a JSON Lines file at the given fractions of its lines
// into consecutive parts, written next to it in dir; each shard's lines stay
// in order across the parts.
func splitTrace(t *testing.T, path, dir string, cuts ...float64) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if i > 0 {
			lines = append(lines, b[:i])
		}
		if i < len(b) {
			i++
		}
		b = b[i:]
	}
	var parts []string
	from := 0
	for k := 0; k <= len(cuts); k++ {
		to := len(lines)
		if k < len(cuts) {
			to = int(float64(len(lines)) * cuts[k])
		}
		p := filepath.Join(dir, "part"+strconv.Itoa(k)+".jsonl")
		var out []byte
		for _, l := range lines[from:to] {
			out = append(append(out, l...), '\n')
		}
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
		from = to
	}
	return parts
}
