//go:build integration

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
)

// TestRestoreFromS3AfterLosingData crashes the job, deletes its whole --data
// folder (a container's disk after a restart), and starts it again with the
// same --checkpoints s3://…: it restores from S3, and the rows (in DynamoDB)
// end exact.
func TestRestoreFromS3AfterLosingData(t *testing.T) {
	t.Parallel()
	awsSlot(t)
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
	// A 6 s lease: a crashed run's lease lapses soon enough for the next
	// start, and renewals (every 2 s, each allowed 4 s) survive a slow,
	// loaded stand-in (500 ms and 3 s leases were lost under load).
	args := append([]string{"run", "--source", "file:" + trace, "--data", data, "--sink", "dynamodb:" + table,
		"--checkpoints", url, "--lease-ms", "6000"}, runFlags...)
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

// TestBlueGreenFromS3Savepoint starts v2, which keeps its checkpoints under
// its own S3 prefix, from v1's savepoint named as `adclick savepoint`
// printed it (s3://…/manifests/sp-<id>.json): the savepoint is read from
// v1's store. (Before, the location was taken for a local folder, and an id
// was looked up in v2's own store: blue/green with S3 checkpoints could not
// start.)
func TestBlueGreenFromS3Savepoint(t *testing.T) {
	t.Parallel()
	awsSlot(t)
	testenv.S3(t)
	testenv.DynamoDB(t)
	dir := t.TempDir()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	table, bucket := "bgs3"+suffix, "s3://b"+suffix
	run(t, 0, "setup", "--sink", "dynamodb:"+table, "--checkpoints", bucket+"/job1")
	common := []string{"--source", "gen", "--gen-rate", "200", "--gen-ads", "20", "--sink", "dynamodb:" + table,
		"--parallelism", "2", "--checkpoint-interval-ms", "1000", "--flush-writes-per-sec", "1000000", "--lease-ms", "6000"}
	const token = "bg-s3-token"
	v1 := startJob(t, "v1", token, append(common, "--data", filepath.Join(dir, "v1"), "--checkpoints", bucket+"/job1")...)
	v1.waitRecords(200, time.Minute)
	sp := v1.savepoint()
	if !strings.HasPrefix(sp.Path, bucket+"/job1/manifests/sp-") {
		t.Fatalf("savepoint path %q, want it under %s/job1/manifests/", sp.Path, bucket)
	}
	v1.stop(false)
	v2 := append([]string{"run", "--listen", "", "--progress", "0", "--data", filepath.Join(dir, "v2"),
		"--checkpoints", bucket + "/job2", "--job-gen", "8"}, common...)
	out := run(t, 0, append(v2, "--from-savepoint", sp.Path, "--exit-after-restore")...)
	if !strings.Contains(string(out), "restored") {
		t.Logf("v2 printed: %s", out)
	}
	// An S3 URL that names no savepoint is a usage error, not a file lookup.
	if code := runCode(t, append(v2, "--from-savepoint", bucket+"/job1/savepoints/x", "--exit-after-restore")...); code != 2 {
		t.Fatalf("--from-savepoint with an S3 URL that names no savepoint exited %d, want 2 (usage)", code)
	}
}
