//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
)

// TestRestoreFromS3AfterLosingData crashes the job, deletes its whole --data
// folder (a container's disk after a restart), and starts it again with the
// same --checkpoints s3://…: it restores from S3, and the rows (in DynamoDB)
// end exact.
func TestRestoreFromS3AfterLosingData(t *testing.T) {
	testenv.S3(t)
	testenv.DynamoDB(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	const clicks = 4000
	genTrace(t, trace, clicks, 21)
	ref := buildReference(t, trace)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	table, url := "s3t"+suffix, "s3://b"+suffix+"/job1"
	run(t, 0, "setup", "--sink", "dynamodb:"+table, "--checkpoints", url)
	data := filepath.Join(dir, "data")
	args := append([]string{"run", "--source", "file:" + trace, "--data", data, "--sink", "dynamodb:" + table,
		"--checkpoints", url, "--lease-ms", "500"}, runFlags...)
	for _, n := range []int{2500, 1200} {
		code := runCode(t, append(args, "--fail-after-records", strconv.Itoa(n))...)
		if code != 137 {
			t.Fatalf("crash run exited %d, want 137", code)
		}
		if _, err := os.Stat(filepath.Join(data, "checkpoints")); err == nil {
			t.Fatalf("checkpoints were written under --data although --checkpoints is S3")
		}
		if err := os.RemoveAll(data); err != nil {
			t.Fatal(err)
		}
	}
	run(t, 0, args...)
	rs := parseRows(t, run(t, 0, "rows", "--sink", "dynamodb:"+table))
	check(t, rs, ref, nil)
	var restored bool
	for _, r := range rs {
		if r.FastCkpt != nil && *r.FastCkpt > 0 {
			restored = true
		}
	}
	if !restored {
		t.Fatalf("no row was written after a checkpoint: the test did not exercise a restore from S3")
	}
}
