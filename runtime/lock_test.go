package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSecondJobRefused: a second job on the same data directory is refused
// before it touches anything, naming the holder; the first job's state is
// intact and it runs on exactly. Before the fix the second Open removed the
// first job's state folder (a fresh start) before the state store's own
// lock refused it.
func TestSecondJobRefused(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir(), traceOptions(3000, 9))
	first, err := Open(context.Background(), replayConfig(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	before, err := os.ReadDir(filepath.Join(dir, "state"))
	if err != nil || len(before) == 0 {
		t.Fatalf("the first job's state folder: %v entries, %v", len(before), err)
	}
	second, err := Open(context.Background(), replayConfig(dir, path))
	if err == nil {
		second.Close()
		t.Fatal("a second job on the same data dir was not refused")
	}
	if want := "in use by another job (pid " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not contain %q", err, want)
	}
	after, err := os.ReadDir(filepath.Join(dir, "state"))
	if err != nil || len(after) != len(before) {
		t.Fatalf("the refused job changed the first job's state folder: %d entries before, %d after (%v)", len(before), len(after), err)
	}
	if err := first.Run(context.Background()); err != nil {
		t.Fatalf("the first job after the refusal: %v", err)
	}
	checkRows(t, scanRows(t, first.Rows()), fileReference(t, path))
	// Once the first job is closed, the directory can be opened again.
	first.Close()
	again, err := Open(context.Background(), replayConfig(dir, path))
	if err != nil {
		t.Fatalf("open after the first job closed: %v", err)
	}
	again.Close()
}

// TestFullDiskRefusedAtStart: a start on a full file system says so, with
// ENOSPC, instead of failing or hanging on its first state write.
func TestFullDiskRefusedAtStart(t *testing.T) {
	old := statfs
	defer func() { statfs = old }()
	statfs = func(path string, st *syscall.Statfs_t) error {
		*st = syscall.Statfs_t{Bsize: 4096, Bavail: 10} // 40 KiB free
		return nil
	}
	_, err := Open(context.Background(), replayConfig(t.TempDir(), "unused"))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free space there") {
		t.Fatalf("Open on a full disk = %v; want an ENOSPC error saying what to do", err)
	}
}

// TestFallbackToVerifyingCheckpoint: when the newest checkpoint does not
// verify, the job restores the newest one that does (and says so), and the
// result is still exact: the flush from the older id covers more epochs
// and the replay starts from the older positions. Before the fix the start
// was refused. Leftover checkpoint scratch folders are removed at start.
func TestFallbackToVerifyingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir(), traceOptions(4000, 21))
	runToEnd(t, replayConfig(dir, path)).Close()
	ids := checkpointIDs(t, dir)
	if len(ids) < 2 {
		t.Fatalf("the run left checkpoints %v, want at least 2", ids)
	}
	newest := ids[len(ids)-1]
	meta := filepath.Join(dir, "checkpoints", "ckpt-"+pad12(newest), "meta.json")
	f, err := os.OpenFile(meta, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(" ")
	f.Close()
	scratch := filepath.Join(dir, "scratch", "ckpt-999")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		t.Fatal(err)
	}

	j, err := Open(context.Background(), replayConfig(dir, path))
	if err != nil {
		t.Fatalf("open with a corrupt newest checkpoint: %v", err)
	}
	defer j.Close()
	if got, want := j.Status().Restored, ids[len(ids)-2]; got != want {
		t.Fatalf("restored checkpoint %d, want %d (the newest that verifies)", got, want)
	}
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Fatalf("a leftover scratch folder survived the start: %v", err)
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkRows(t, scanRows(t, j.Rows()), fileReference(t, path))
}

func checkpointIDs(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range ents {
		if s, ok := strings.CutPrefix(e.Name(), "ckpt-"); ok {
			if v, err := strconv.ParseInt(s, 10, 64); err == nil {
				ids = append(ids, v)
			}
		}
	}
	return ids
}

func pad12(id int64) string {
	s := strconv.FormatInt(id, 10)
	return strings.Repeat("0", max(0, 12-len(s))) + s
}
