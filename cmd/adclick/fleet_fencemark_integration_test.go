//go:build integration

package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink/dynamo"
)

// TestFleetRefusesFencesBehindTheRows: run --fleet on a lease table whose
// counters are below the fences the rows table has seen under the same
// job_gen (here a job set up anew beside rows another job wrote up to
// fence 5) exits at once, naming both tables, the numbers and the fix.
// Before the check it started, and every write to those rows was refused
// with only a metric to show.
func TestFleetRefusesFencesBehindTheRows(t *testing.T) {
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, table, bucket, job := "fm"+suffix, "fmt"+suffix, "s3://fmb"+suffix, "fmj"+suffix
	run(t, 0, "setup", "--stream", stream, "--shards", "1", "--sink", "dynamodb:"+table, "--checkpoints", bucket+"/ckpt",
		"--ranges", "2", "--job-name", job)
	rows, err := dynamo.New(testenv.DynamoDBClient(t), dynamo.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := rows.RaiseFenceMark(context.Background(), 1, 0, 128, 5); err != nil {
		t.Fatal(err)
	}
	// Without the check the worker would run until stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "run", "--fleet", "--source", "kinesis:"+stream, "--sink", "dynamodb:"+table,
		"--checkpoints", bucket+"/ckpt", "--lake", bucket+"/lake", "--job-name", job, "--data", t.TempDir(), "--progress", "0")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run --fleet: %v (context: %v), want exit code 1\nstderr:\n%s", err, ctx.Err(), errb.String())
	}
	stderr := errb.Bytes()
	for _, want := range []string{"refusing to start", "rows table " + table, "lease table " + table + "-leases",
		"fence mark 5 for key group 0 under job_gen 1", "above counter 0 of range kg0-64", "start with a higher --job-gen"} {
		if !bytes.Contains(stderr, []byte(want)) {
			t.Errorf("stderr %s\nwant %q", stderr, want)
		}
	}
}
