package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondProcessRefused: two processes on one --data. The second is
// refused at once, naming the first (pid and host), and touches nothing:
// the first stops cleanly on SIGTERM afterwards and the directory restores.
// Before the fix the second run removed the first one's state folder before
// the state store's lock refused it.
func TestSecondProcessRefused(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	first := exec.Command(binPath, append([]string{"run", "--source", "gen", "--data", data, "--gen-rate", "200"}, runFlags...)...)
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	// The first job holds the lock once LOCK names it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(data, "LOCK"))
		if bytes.Contains(b, []byte("pid ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first job never took the lock\n%s", firstErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // let it read and checkpoint a little
	entries := func() int {
		es, _ := os.ReadDir(filepath.Join(data, "state"))
		return len(es)
	}
	before := entries()
	out := runStderr(t, 1, append([]string{"run", "--source", "gen", "--data", data}, runFlags...)...)
	if want := "in use by another job (pid "; !strings.Contains(out, want) {
		t.Fatalf("second run: stderr %q, want it to contain %q", out, want)
	}
	if before == 0 || entries() == 0 {
		t.Fatalf("the first job's state folder: %d entries before the second run, %d after", before, entries())
	}
	// SIGTERM stops the first job with a final checkpoint, in bounded time.
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("first job after SIGTERM: %v\n%s", err, firstErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the first job did not stop within 30 s of SIGTERM\n%s", firstErr.String())
	}
	// The lock went with the process: the directory restores.
	runStderr(t, 0, append([]string{"run", "--source", "gen", "--data", data, "--exit-after-restore"}, runFlags...)...)
}

// TestGenStopsOnSignal: `gen` honours SIGTERM (it used to ignore it): a
// generation of many clicks stops promptly, non-zero, after flushing what
// it wrote.
func TestGenStopsOnSignal(t *testing.T) {
	out := filepath.Join(t.TempDir(), "big.jsonl")
	cmd := exec.Command(binPath, "gen", "--out", out, "--clicks", "500000000")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if fi, err := os.Stat(out); err == nil && fi.Size() > 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gen wrote nothing\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(errb.String(), "interrupted after") {
			t.Fatalf("gen after SIGTERM: %v, stderr %q; want a non-zero exit saying it was interrupted", err, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gen did not stop within 10 s of SIGTERM")
	}
}
