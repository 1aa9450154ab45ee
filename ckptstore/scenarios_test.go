package ckptstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// The scenarios below run against the in-memory fake (remote_test.go) and
// against a local S3-compatible server (integration_test.go).

func mustUpload(t testing.TB, s ckpt.Store, dir string, id int64, kind ckpt.Kind) ckpt.UploadStats {
	t.Helper()
	st, err := s.Upload(context.Background(), dir, id, kind)
	if err != nil {
		t.Fatalf("upload %s %d: %v", kind, id, err)
	}
	return st
}

func mustDownload(t testing.TB, s ckpt.Store, id int64, kind ckpt.Kind) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "restored", "here")
	if err := s.Download(context.Background(), id, kind, dst); err != nil {
		t.Fatalf("download %s %d: %v", kind, id, err)
	}
	return dst
}

func wantIDs(t testing.TB, s ckpt.Store, kind ckpt.Kind, want ...int64) {
	t.Helper()
	got, err := s.List(context.Background(), kind)
	if err != nil {
		t.Fatalf("list %s: %v", kind, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%ss: got %v, want %v", kind, got, want)
	}
	id, ok, err := s.Latest(context.Background(), kind)
	if err != nil {
		t.Fatalf("latest %s: %v", kind, err)
	}
	if len(want) == 0 {
		if ok {
			t.Fatalf("latest %s: got %d, want none", kind, id)
		}
	} else if !ok || id != want[len(want)-1] {
		t.Fatalf("latest %s: got %d (ok %v), want %d", kind, id, ok, want[len(want)-1])
	}
}

// scenarioIncremental: a second checkpoint that shares most tables with the
// first uploads only its new tables and the small files.
func scenarioIncremental(t *testing.T, e *remoteEnv) (first, second ckpt.UploadStats) {
	src := newPebbleSrc(t)
	for range 8 {
		src.batch(100)
	}
	c1 := src.checkpoint(1)
	first = mustUpload(t, e.r, c1, 1, ckpt.Checkpoint)
	wantBytes, tables, _ := newBytes(t, c1, "")
	if first.BytesUploaded != wantBytes || first.BytesReused != 0 || first.FilesReused != 0 {
		t.Errorf("first upload: got %d bytes uploaded, %d reused (%d files), want %d and 0", first.BytesUploaded,
			first.BytesReused, first.FilesReused, wantBytes)
	}
	if tables != 8 {
		t.Fatalf("first checkpoint has %d tables, want 8 (one per flushed batch)", tables)
	}

	src.batch(100)
	c2 := src.checkpoint(2)
	var sharedPuts atomic.Int64
	e.api.setOnPut(func(key string) error {
		if strings.Contains(key, "/shared/") || strings.HasPrefix(key, "shared/") {
			sharedPuts.Add(1)
		}
		return nil
	})
	second = mustUpload(t, e.r, c2, 2, ckpt.Checkpoint)
	e.api.setOnPut(nil)
	wantBytes, tables, reused := newBytes(t, c2, c1)
	if second.BytesUploaded != wantBytes {
		t.Errorf("second upload: got %d bytes uploaded, want %d (non-table files and new tables only)", second.BytesUploaded, wantBytes)
	}
	if second.FilesReused != reused || reused != 8 {
		t.Errorf("second upload: got %d files reused, want %d (all 8 tables of the first)", second.FilesReused, reused)
	}
	if got, want := sharedPuts.Load(), int64(tables-reused); got != want {
		t.Errorf("second upload: got %d table puts, want %d", got, want)
	}
	if second.BytesUploaded*2 > first.BytesUploaded {
		t.Errorf("second upload: %d bytes, want well under half the first's %d", second.BytesUploaded, first.BytesUploaded)
	}
	wantIDs(t, e.r, ckpt.Checkpoint, 1, 2)
	got := mustDownload(t, e.r, 2, ckpt.Checkpoint)
	sameTree(t, got, c2)
	checkPebble(t, got, src.want)
	t.Logf("first checkpoint: %d bytes uploaded; second: %d uploaded, %d reused (%d of %d tables reused)",
		first.BytesUploaded, second.BytesUploaded, second.BytesReused, reused, tables)
	return first, second
}

// scenarioManifestLast: an upload interrupted halfway, or at its very last
// step, is never listed nor restored; the next id uploads and restores.
func scenarioManifestLast(t *testing.T, e *remoteEnv) {
	ctx := context.Background()
	src := newPebbleSrc(t)
	src.batch(100)
	c1 := src.checkpoint(1)
	mustUpload(t, e.r, c1, 1, ckpt.Checkpoint)
	want1 := maps(src.want)

	src.batch(100)
	src.batch(100)
	c2 := src.checkpoint(2)
	var puts atomic.Int64
	boom := errors.New("injected failure")
	e.api.setOnPut(func(key string) error {
		if puts.Add(1) > 2 {
			return boom
		}
		return nil
	})
	if _, err := e.r.Upload(ctx, c2, 2, ckpt.Checkpoint); !errors.Is(err, boom) {
		t.Fatalf("interrupted upload: got %v, want the injected failure", err)
	}
	if len(e.keys(t, "checkpoints/ckpt-000000000002/")) == 0 {
		t.Fatalf("interrupted upload left nothing behind; the test meant to interrupt it halfway")
	}
	// The last step fails: every file is stored, the manifest is not.
	src.batch(100)
	c3 := src.checkpoint(3)
	e.api.setOnPut(func(key string) error {
		if strings.Contains(key, "manifests/") {
			return boom
		}
		return nil
	})
	if _, err := e.r.Upload(ctx, c3, 3, ckpt.Checkpoint); !errors.Is(err, boom) {
		t.Fatalf("upload without manifest: got %v, want the injected failure", err)
	}
	e.api.setOnPut(nil)
	wantIDs(t, e.r, ckpt.Checkpoint, 1)
	for _, id := range []int64{2, 3} {
		err := e.r.Download(ctx, id, ckpt.Checkpoint, filepath.Join(t.TempDir(), "x"))
		if !errors.Is(err, ckpt.ErrNotFound) {
			t.Fatalf("download of partial checkpoint %d: got %v, want ErrNotFound", id, err)
		}
	}
	checkPebble(t, mustDownload(t, e.r, 1, ckpt.Checkpoint), want1)

	src.batch(100)
	c4 := src.checkpoint(4)
	mustUpload(t, e.r, c4, 4, ckpt.Checkpoint)
	wantIDs(t, e.r, ckpt.Checkpoint, 1, 4)
	got := mustDownload(t, e.r, 4, ckpt.Checkpoint)
	sameTree(t, got, c4)
	checkPebble(t, got, src.want)

	// Partial uploads younger than the grace period may still be running
	// elsewhere: kept. Once old, they are removed.
	if st, err := e.r.Prune(ctx, 5); err != nil || st.Partial != 0 {
		t.Fatalf("prune of young partial uploads: got %+v, %v; want nothing removed", st, err)
	}
	if len(e.keys(t, "checkpoints/ckpt-000000000002/")) == 0 {
		t.Fatalf("prune removed a young partial upload")
	}
	e.clock.advance(2 * time.Hour)
	st, err := e.r.Prune(ctx, 5)
	if err != nil || st.Partial != 2 {
		t.Fatalf("prune of old partial uploads: got %+v, %v; want 2 removed", st, err)
	}
	for _, id := range []string{"2", "3"} {
		if ks := e.keys(t, "checkpoints/ckpt-00000000000"+id+"/"); len(ks) != 0 {
			t.Errorf("partial checkpoint %s after prune: got keys %v, want none", id, ks)
		}
	}
	checkPebble(t, mustDownload(t, e.r, 4, ckpt.Checkpoint), src.want)
	checkPebble(t, mustDownload(t, e.r, 1, ckpt.Checkpoint), want1)
}

func maps(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// scenarioPrune: retention keeps the newest checkpoints and every
// savepoint, and exactly the shared tables they reference.
func scenarioPrune(t *testing.T, e *remoteEnv) {
	ctx := context.Background()
	src := newPebbleSrc(t)
	for range 3 {
		src.batch(100)
	}
	mustUpload(t, e.r, src.checkpoint(1), 1, ckpt.Checkpoint)
	src.batch(100)
	c2 := src.checkpoint(2)
	want2 := maps(src.want)
	mustUpload(t, e.r, c2, 2, ckpt.Checkpoint)
	sp := mustUpload(t, e.r, c2, 2, ckpt.Savepoint)
	_, tables, _ := newBytes(t, c2, "")
	if sp.FilesReused != tables {
		t.Errorf("savepoint of a stored checkpoint: got %d tables reused, want all %d", sp.FilesReused, tables)
	}
	src.compact()
	mustUpload(t, e.r, src.checkpoint(3), 3, ckpt.Checkpoint)
	src.batch(100)
	src.compact()
	c4 := src.checkpoint(4)
	mustUpload(t, e.r, c4, 4, ckpt.Checkpoint)
	src.batch(100)
	c5 := src.checkpoint(5)
	mustUpload(t, e.r, c5, 5, ckpt.Checkpoint)

	before := e.keys(t, "shared/")
	keep := map[string]bool{}
	for _, ref := range []struct {
		kind ckpt.Kind
		id   int64
	}{{ckpt.Checkpoint, 4}, {ckpt.Checkpoint, 5}, {ckpt.Savepoint, 2}} {
		for _, k := range e.sharedOf(t, ref.kind, ref.id) {
			keep[k] = true
		}
	}
	var wantGone int
	for _, k := range before {
		if !keep[k] {
			wantGone++
		}
	}
	if wantGone == 0 {
		t.Fatalf("test setup: checkpoint 3's compacted tables should be referenced by no kept checkpoint")
	}
	st, err := e.r.Prune(ctx, 2)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if st.Checkpoints != 3 || st.Shared != wantGone {
		t.Errorf("prune: got %d checkpoints and %d shared files removed, want 3 and %d", st.Checkpoints, st.Shared, wantGone)
	}
	wantIDs(t, e.r, ckpt.Checkpoint, 4, 5)
	wantIDs(t, e.r, ckpt.Savepoint, 2)
	after := e.keys(t, "shared/")
	var wantAfter []string
	for k := range keep {
		wantAfter = append(wantAfter, k)
	}
	slices.Sort(wantAfter)
	if !slices.Equal(after, wantAfter) {
		t.Errorf("shared files after prune: got %d %v, want the %d referenced by checkpoints 4, 5 and savepoint 2", len(after), after, len(wantAfter))
	}
	for _, id := range []int64{1, 2, 3} {
		if ks := e.keys(t, "checkpoints/"+ckpt.Checkpoint.Name(id)+"/"); len(ks) != 0 {
			t.Errorf("pruned checkpoint %d: keys %v remain", id, ks)
		}
	}
	got := mustDownload(t, e.r, 2, ckpt.Savepoint)
	sameTree(t, got, c2)
	checkPebble(t, got, want2)
	sameTree(t, mustDownload(t, e.r, 4, ckpt.Checkpoint), c4)
	checkPebble(t, mustDownload(t, e.r, 5, ckpt.Checkpoint), src.want)

	// Uploads go on after the prune.
	src.batch(100)
	c6 := src.checkpoint(6)
	mustUpload(t, e.r, c6, 6, ckpt.Checkpoint)
	checkPebble(t, mustDownload(t, e.r, 6, ckpt.Checkpoint), src.want)
}

// writeTree writes files (slash path → contents) under a new directory.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// scenarioPruneDuringUpload: a prune while an upload runs keeps the tables
// that upload references, even those no complete checkpoint references
// any more; a prune before an upload makes it send such tables again.
func scenarioPruneDuringUpload(t *testing.T, e *remoteEnv) {
	ctx := context.Background()
	a, b, c := strings.Repeat("a", 3000), strings.Repeat("b", 2000), strings.Repeat("c", 1000)
	mustUpload(t, e.r, writeTree(t, map[string]string{"state/1.sst": a, "state/2.sst": b, "meta.json": "1"}), 1, ckpt.Checkpoint)
	mustUpload(t, e.r, writeTree(t, map[string]string{"state/2.sst": b, "meta.json": "2"}), 2, ckpt.Checkpoint)
	t3 := writeTree(t, map[string]string{"state/1.sst": a, "state/3.sst": c, "meta.json": "3"})
	var once atomic.Bool
	var pst ckpt.PruneStats
	var perr error
	e.api.setOnPut(func(key string) error {
		if strings.Contains(key, "shared/") && once.CompareAndSwap(false, true) {
			// Checkpoint 1, the only complete one holding table a, goes.
			pst, perr = e.r.Prune(ctx, 1)
		}
		return nil
	})
	st := mustUpload(t, e.r, t3, 3, ckpt.Checkpoint)
	e.api.setOnPut(nil)
	if !once.Load() || perr != nil || pst.Checkpoints != 1 {
		t.Fatalf("prune during upload: ran %v, got %+v, %v; want checkpoint 1 removed", once.Load(), pst, perr)
	}
	if st.FilesReused != 1 || st.BytesReused != 3000 {
		t.Errorf("upload 3: got %d files, %d bytes reused; want table a (1 file, 3000 bytes)", st.FilesReused, st.BytesReused)
	}
	sameTree(t, mustDownload(t, e.r, 3, ckpt.Checkpoint), t3)

	// Now checkpoint 2 goes too; table b is referenced by nothing.
	if st, err := e.r.Prune(ctx, 1); err != nil || st.Checkpoints != 1 || st.Shared != 1 || st.SharedBytes != 2000 {
		t.Fatalf("prune: got %+v, %v; want checkpoint 2 and table b (2000 bytes) removed", st, err)
	}
	// A checkpoint holding b again must send it again.
	t4 := writeTree(t, map[string]string{"state/1.sst": a, "state/2.sst": b, "meta.json": "4"})
	st = mustUpload(t, e.r, t4, 4, ckpt.Checkpoint)
	if st.FilesUploaded != 2 || st.BytesUploaded != 2001 {
		t.Errorf("upload 4: got %d files, %d bytes uploaded; want table b and meta.json (2 files, 2001 bytes)", st.FilesUploaded, st.BytesUploaded)
	}
	sameTree(t, mustDownload(t, e.r, 4, ckpt.Checkpoint), t4)
}

// scenarioRestoreEmpty: a new process (a new Remote) with an empty disk
// finds the newest checkpoint, restores it, and its next upload is
// incremental against what it restored.
func scenarioRestoreEmpty(t *testing.T, e, fresh *remoteEnv) {
	ctx := context.Background()
	src := newPebbleSrc(t)
	for range 3 {
		src.batch(150)
	}
	mustUpload(t, e.r, src.checkpoint(1), 1, ckpt.Checkpoint)
	src.batch(150)
	c2 := src.checkpoint(2)
	mustUpload(t, e.r, c2, 2, ckpt.Checkpoint)
	if err := e.r.SetHigh(ctx, 3); err != nil {
		t.Fatal(err)
	}

	id, ok, err := fresh.r.Latest(ctx, ckpt.Checkpoint)
	if err != nil || !ok || id != 2 {
		t.Fatalf("latest after restart: got %d, %v, %v; want 2", id, ok, err)
	}
	if h, ok, err := fresh.r.High(ctx); err != nil || !ok || h != 3 {
		t.Fatalf("high after restart: got %d, %v, %v; want 3", h, ok, err)
	}
	data := filepath.Join(t.TempDir(), "data")
	dst := filepath.Join(data, "restore", "ckpt")
	if err := fresh.r.Download(ctx, id, ckpt.Checkpoint, dst); err != nil {
		t.Fatalf("download onto an empty folder: %v", err)
	}
	sameTree(t, dst, c2)
	checkPebble(t, dst, src.want)
	ents, err := os.ReadDir(filepath.Dir(dst))
	if err != nil || len(ents) != 1 {
		t.Errorf("restore folder: got %d entries (%v), want only the checkpoint (no staging leftovers)", len(ents), err)
	}
	if err := fresh.r.Download(ctx, id, ckpt.Checkpoint, dst); err == nil {
		t.Errorf("download onto a non-empty folder: got nil error, want a refusal")
	}

	src.batch(150)
	c3 := src.checkpoint(3)
	st := mustUpload(t, fresh.r, c3, 3, ckpt.Checkpoint)
	wantBytes, _, reused := newBytes(t, c3, c2)
	if st.BytesUploaded != wantBytes || st.FilesReused != reused {
		t.Errorf("first upload after restore: got %d bytes uploaded, %d files reused; want %d and %d",
			st.BytesUploaded, st.FilesReused, wantBytes, reused)
	}
	checkPebble(t, mustDownload(t, e.r, 3, ckpt.Checkpoint), src.want)
}

// scenarioBasics: the high-water mark, ErrExists, ErrNotFound, Delete,
// DropAfter and a corrupted object.
func scenarioBasics(t *testing.T, e *remoteEnv) {
	ctx := context.Background()
	if _, ok, err := e.r.High(ctx); err != nil || ok {
		t.Fatalf("high before any SetHigh: got ok %v, %v; want none", ok, err)
	}
	for _, v := range []int64{5, 12, 7} {
		if err := e.r.SetHigh(ctx, v); err != nil {
			t.Fatal(err)
		}
		if h, ok, err := e.r.High(ctx); err != nil || !ok || h != v {
			t.Fatalf("high after SetHigh(%d): got %d, %v, %v", v, h, ok, err)
		}
	}
	tree := writeTree(t, map[string]string{"state/9.sst": "nine", "state/MANIFEST-000001": "m", "meta.json": "{}"})
	if err := os.Mkdir(filepath.Join(tree, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		mustUpload(t, e.r, tree, id, ckpt.Checkpoint)
	}
	if _, err := e.r.Upload(ctx, tree, 2, ckpt.Checkpoint); !errors.Is(err, ckpt.ErrExists) {
		t.Errorf("second upload of id 2: got %v, want ErrExists", err)
	}
	if err := e.r.Delete(ctx, 9, ckpt.Checkpoint); !errors.Is(err, ckpt.ErrNotFound) {
		t.Errorf("delete of a missing id: got %v, want ErrNotFound", err)
	}
	if err := ckpt.DropAfter(ctx, e.r, 1); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e.r, ckpt.Checkpoint, 1)
	mustUpload(t, e.r, tree, 2, ckpt.Checkpoint) // ids after a savepoint start are reused
	sameTree(t, mustDownload(t, e.r, 2, ckpt.Checkpoint), tree)
	for path, want := range map[string]string{"meta.json": "{}", "state/9.sst": "nine"} {
		if b, err := e.r.ReadFile(ctx, 2, ckpt.Checkpoint, path); err != nil || string(b) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := e.r.ReadFile(ctx, 2, ckpt.Checkpoint, "absent.json"); !errors.Is(err, ckpt.ErrNotFound) {
		t.Errorf("ReadFile of a file the checkpoint lacks: got %v, want ErrNotFound", err)
	}
	if _, err := e.r.ReadFile(ctx, 9, ckpt.Checkpoint, "meta.json"); !errors.Is(err, ckpt.ErrNotFound) {
		t.Errorf("ReadFile of a missing id: got %v, want ErrNotFound", err)
	}

	// Corrupt the shared table: a download fails and leaves nothing.
	if err := e.r.putBytes(ctx, e.sharedOf(t, ckpt.Checkpoint, 2)[0], []byte("nina")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	if err := e.r.Download(ctx, 2, ckpt.Checkpoint, dst); !errors.Is(err, ckpt.ErrCorrupt) {
		t.Errorf("download of a corrupted checkpoint: got %v, want ErrCorrupt", err)
	}
	if _, err := e.r.ReadFile(ctx, 2, ckpt.Checkpoint, "state/9.sst"); !errors.Is(err, ckpt.ErrCorrupt) {
		t.Errorf("ReadFile of a corrupted file: got %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed download left %s behind (%v)", dst, err)
	}
}
