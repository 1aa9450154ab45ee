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
