package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rescaleFlags are the run flags of the rescale test: frequent checkpoints
// (virtual time), so that savepoints fall between many earlier ones, and an
// unthrottled flush.
var rescaleFlags = []string{"--checkpoint-interval-ms", "5000", "--flush-writes-per-sec", "1000000"}

// TestRescaleThroughSavepoints replays one trace through three runs of the
// job on the same --data, rescaled through savepoints taken with the
// operator commands while the replay runs: 2 subtasks (a savepoint, then
// the run goes on writing past it and is stopped), 4 subtasks from that
// savepoint (its restore flushes what the first run wrote after the
// savepoint; stopped with a savepoint), and 1 subtask from the second
// savepoint to the end of the trace. The rows must then hold every valid
// click exactly once, as in the end-to-end replay test.
func TestRescaleThroughSavepoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	// A few seconds of replay per run; each stop below comes
	// after a fixed number of records, far from the end, so a slow machine
	// only makes the runs longer.
	const clicks = 60_000
	genTrace(t, trace, clicks, 21)
	ref := buildReference(t, trace)
	total := countLines(t, trace)
	data := filepath.Join(dir, "data")
	began := time.Now()

	// 2 subtasks: a savepoint at 8,000 records; the run goes on past it and
	// is stopped (no savepoint) at 16,000 records.
	j1 := startJob(t, "run p=2", "", append([]string{"--source", "file:" + trace, "--data", data, "--parallelism", "2"}, rescaleFlags...)...)
	j1.waitReady()
	j1.waitRecords(8_000, time.Minute)
	sp1 := j1.savepoint()
	if m := readMeta(t, sp1.Path); sp1.Parallelism != 2 || sp1.Final || m.Parallelism != 2 || m.ID != sp1.ID {
		t.Fatalf("savepoint %d: parallelism %d final %v, meta.json %+v; want parallelism 2, not final", sp1.ID, sp1.Parallelism, sp1.Final, m)
	}
	after1 := j1.mustStatus().Records
	j1.waitRecords(after1+8_000, time.Minute)
	last1 := j1.stop(false)
	if last1.ID <= sp1.ID {
		t.Fatalf("run p=2 stopped at checkpoint %d, want one after savepoint %d", last1.ID, sp1.ID)
	}
	t.Logf("p=2: savepoint %d after %d records, stopped at checkpoint %d (%v)", sp1.ID, after1, last1.ID, time.Since(began).Round(time.Millisecond))

	// 4 subtasks from the first savepoint: the restore drops the
	// checkpoints after it, flushes the rows the first run wrote after it,
	// and continues the ids at its id + 1.
	j2 := startJob(t, "run p=4", "", append([]string{"--source", "file:" + trace, "--data", data, "--parallelism", "4",
		"--from-savepoint", strconv.FormatInt(sp1.ID, 10)}, rescaleFlags...)...)
	j2.waitReady()
	st2 := j2.mustStatus()
	if st2.Parallelism != 4 || st2.RestoredCheckpoint != sp1.ID {
		t.Fatalf("run p=4: parallelism %d restored %d, want 4 and savepoint %d", st2.Parallelism, st2.RestoredCheckpoint, sp1.ID)
	}
	if st2.Flush == nil || st2.Flush.ItemsScanned == 0 || st2.Flush.ItemsDeleted+st2.Flush.AttrsRemoved == 0 {
		t.Errorf("run p=4: restore flush %+v; want one that found and undid what the first run wrote after savepoint %d", st2.Flush, sp1.ID)
	}
	j2.waitRecords(16_000, time.Minute)
	sp2 := j2.stop(true)
	if m := readMeta(t, sp2.Path); m.Parallelism != 4 || !m.Final || m.ID != sp2.ID || sp2.ID <= sp1.ID {
		t.Fatalf("stop --savepoint of run p=4: savepoint %d has %+v, want parallelism 4, final, and an id after %d", sp2.ID, m, sp1.ID)
	}
	t.Logf("p=4: restored %d (flush %+v), stopped with savepoint %d (%v)", sp1.ID, *st2.Flush, sp2.ID, time.Since(began).Round(time.Millisecond))

	// 1 subtask from the second savepoint, to the end of the trace.
	j3 := startJob(t, "run p=1", "", append([]string{"--source", "file:" + trace, "--data", data, "--parallelism", "1",
		"--from-savepoint", strconv.FormatInt(sp2.ID, 10)}, rescaleFlags...)...)
	// It may finish quickly; its status is checked if it is seen running.
	if st3, ok := j3.status(); ok && (st3.Parallelism != 1 || st3.RestoredCheckpoint != sp2.ID) {
		t.Fatalf("run p=1: parallelism %d restored %d, want 1 and savepoint %d", st3.Parallelism, st3.RestoredCheckpoint, sp2.ID)
	}
	if code := j3.wait(2 * time.Minute); code != 0 {
		t.Fatalf("run p=1 exited with code %d", code)
	}
	if c, ok := j3.restored(); !ok || c != sp2.ID {
		t.Fatalf("run p=1 logged a restore of checkpoint %d (found %v), want savepoint %d", c, ok, sp2.ID)
	}
	t.Logf("p=1: restored %d, ran to the end of %d lines (%v)", sp2.ID, total, time.Since(began).Round(time.Millisecond))

	rs, _ := rows(t, data)
	if len(rs) == 0 {
		t.Fatal("no rows written")
	}
	check(t, rs, ref, nil)
}

// spMeta is the part of a savepoint's meta.json the test checks.
type spMeta struct {
	ID          int64 `json:"id"`
	JobGen      int64 `json:"job_gen"`
	Parallelism int   `json:"parallelism"`
	Final       bool  `json:"final"`
}

func readMeta(t *testing.T, dir string) spMeta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatalf("savepoint %s: %v", dir, err)
	}
	var m spMeta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("savepoint %s: meta.json: %v", dir, err)
	}
	return m
}

// TestSavepointStartOnNewDataRunsFlush starts a job from a savepoint
// folder on an empty --data, as a blue/green or a move to another machine
// does. DESIGN.md §6: every start from a checkpoint or savepoint runs the
// full flush before reading, because the savepoint's own job may have
// written epochs at or after it into a shared sink. The new --data has no
// epoch high-water mark, and the flush must run all the same (at least for
// the savepoint's epoch).
func TestSavepointStartOnNewDataRunsFlush(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTrace(t, trace, 20_000, 23)
	j1 := startJob(t, "v1", "", append([]string{"--source", "file:" + trace, "--data", filepath.Join(dir, "v1"), "--parallelism", "2"}, rescaleFlags...)...)
	j1.waitReady()
	j1.waitRecords(5_000, time.Minute)
	sp := j1.savepoint()
	j1.stop(false)
	j2 := startJob(t, "v2", "", append([]string{"--source", "file:" + trace, "--data", filepath.Join(dir, "v2"), "--parallelism", "2",
		"--from-savepoint", sp.Path, "--job-gen", "2"}, rescaleFlags...)...)
	j2.wait(2 * time.Minute)
	if c, ok := j2.restored(); !ok || c != sp.ID {
		t.Fatalf("v2 logged a restore of %d (found %v), want savepoint %d", c, ok, sp.ID)
	}
	if !strings.Contains(j2.log(), `"msg":"flush done"`) {
		t.Errorf("v2 started from savepoint %d on a new --data and ran no restore flush (DESIGN.md §6: every start from a savepoint flushes epochs >= its id); log:\n%s", sp.ID, j2.log())
	}
}
