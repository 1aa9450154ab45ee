//go:build integration

package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
)

// TestSecondProcessRefusedAWS: in AWS mode (DynamoDB rows, S3 checkpoints)
// two processes with different --data folders run the same job. The second
// is refused by the job's lease once it has seen the first renew it, and
// writes nothing; after the first stops cleanly (releasing the lease) a new
// start takes the job at once. Before the lease, the second restored the
// first's checkpoint and its full flush deleted the first's writes.
func TestSecondProcessRefusedAWS(t *testing.T) {
	t.Parallel()
	awsSlot(t)
	testenv.S3(t)
	testenv.DynamoDB(t)
	dir := t.TempDir()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	table, url := "lease"+suffix, "s3://l"+suffix+"/job"
	run(t, 0, "setup", "--sink", "dynamodb:"+table, "--checkpoints", url)
	args := func(data string) []string {
		return append([]string{"run", "--source", "gen", "--gen-rate", "200", "--data", data, "--sink", "dynamodb:" + table,
			"--checkpoints", url, "--lease-ms", "6000"}, runFlags...)
	}
	first := exec.Command(binPath, args(filepath.Join(dir, "a"))...)
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	time.Sleep(3 * time.Second) // restored, flushed, reading, renewing (every 2 s)

	start := time.Now()
	out := runStderr(t, 1, args(filepath.Join(dir, "b"))...)
	if !strings.Contains(out, "job lease") || !strings.Contains(out, "held") {
		t.Fatalf("second process: stderr %q, want a refusal by the job lease", out)
	}
	if d := time.Since(start); d < 6*time.Second {
		t.Fatalf("refused after %s, before watching the lease for its duration", d)
	}
	if first.ProcessState != nil {
		t.Fatalf("the first process ended: %s", firstErr.String())
	}
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first process after SIGTERM: %v\n%s", err, firstErr.String())
	}
	// Released on a clean stop: the next start does not wait.
	start = time.Now()
	runStderr(t, 0, append(args(filepath.Join(dir, "c")), "--exit-after-restore")...)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a start after a clean stop took %s", d)
	}
}
