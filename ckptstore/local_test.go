package ckptstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

func newLocal(t *testing.T) *Local {
	t.Helper()
	l, err := NewLocal(filepath.Join(t.TempDir(), "data"), Options{Parallelism: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLocalUploadDownload(t *testing.T) {
	l := newLocal(t)
	src := newPebbleSrc(t)
	for range 3 {
		src.batch(100)
	}
	c1 := src.checkpoint(1)
	want1 := maps(src.want)
	st := mustUpload(t, l, c1, 1, ckpt.Checkpoint)
	total, _, _ := newBytes(t, c1, "")
	if st.BytesUploaded+st.BytesReused != total || st.Files != st.FilesReused+st.FilesUploaded {
		t.Errorf("stats: got %+v, want %d bytes in all", st, total)
	}
	src.batch(100)
	c2 := src.checkpoint(2)
	mustUpload(t, l, c2, 2, ckpt.Checkpoint)
	wantIDs(t, l, ckpt.Checkpoint, 1, 2)
	if _, err := os.Stat(filepath.Join(l.root, "checkpoints", "ckpt-000000000002", "state")); err != nil {
		t.Errorf("layout: %v", err)
	}
	if got, want := l.Dir(2, ckpt.Checkpoint), filepath.Join(l.root, "checkpoints", "ckpt-000000000002"); got != want {
		t.Errorf("Dir: got %s, want %s", got, want)
	}
	got := mustDownload(t, l, 2, ckpt.Checkpoint)
	sameTree(t, got, c2)
	checkPebble(t, got, src.want)
	// A restore onto an empty folder, from a new Local over the same root.
	l2, err := NewLocal(l.root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l2.Download(context.Background(), 1, ckpt.Checkpoint, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, dst, c1)
	checkPebble(t, dst, want1)
	if _, err := l.Upload(context.Background(), c2, 2, ckpt.Checkpoint); !errors.Is(err, ckpt.ErrExists) {
		t.Errorf("second upload of id 2: got %v, want ErrExists", err)
	}
}

// TestLocalPartial: an upload that never got renamed into place (a crash)
// is not listed, not restored, and removed by Prune.
func TestLocalPartial(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	tree := writeTree(t, map[string]string{"state/1.sst": "one", "meta.json": "{}"})
	mustUpload(t, l, tree, 1, ckpt.Checkpoint)
	leftover := filepath.Join(l.root, "checkpoints", localUploadPrefix+"ckpt-000000000002")
	if err := os.CopyFS(leftover, os.DirFS(tree)); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, l, ckpt.Checkpoint, 1)
	if err := l.Download(ctx, 2, ckpt.Checkpoint, filepath.Join(t.TempDir(), "x")); !errors.Is(err, ckpt.ErrNotFound) {
		t.Errorf("download of a partial upload: got %v, want ErrNotFound", err)
	}
	st, err := l.Prune(ctx, 3)
	if err != nil || st.Partial != 1 {
		t.Fatalf("prune: got %+v, %v; want 1 partial removed", st, err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover after prune: %v", err)
	}
	mustUpload(t, l, tree, 2, ckpt.Checkpoint)
	wantIDs(t, l, ckpt.Checkpoint, 1, 2)

	bad := writeTree(t, map[string]string{LocalManifest: "x"})
	if _, err := l.Upload(ctx, bad, 3, ckpt.Checkpoint); err == nil {
		t.Errorf("upload of a tree holding %s: got nil error", LocalManifest)
	}
	wantIDs(t, l, ckpt.Checkpoint, 1, 2)
}

func TestLocalPruneKeepsSavepoints(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	tree := writeTree(t, map[string]string{"state/1.sst": "one", "meta.json": "{}"})
	for id := int64(1); id <= 5; id++ {
		mustUpload(t, l, tree, id, ckpt.Checkpoint)
	}
	mustUpload(t, l, tree, 2, ckpt.Savepoint)
	if _, err := l.Prune(ctx, 0); err == nil {
		t.Errorf("prune keeping 0: got nil error")
	}
	st, err := l.Prune(ctx, 2)
	if err != nil || st.Checkpoints != 3 {
		t.Fatalf("prune: got %+v, %v; want 3 checkpoints removed", st, err)
	}
	wantIDs(t, l, ckpt.Checkpoint, 4, 5)
	wantIDs(t, l, ckpt.Savepoint, 2)
	if _, err := os.Stat(filepath.Join(l.root, "savepoints", "sp-2", LocalManifest)); err != nil {
		t.Errorf("savepoint layout: %v", err)
	}
	sameTree(t, mustDownload(t, l, 2, ckpt.Savepoint), tree)
	if err := ckpt.DropAfter(ctx, l, 4); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, l, ckpt.Checkpoint, 4)
	if err := l.Delete(ctx, 9, ckpt.Checkpoint); !errors.Is(err, ckpt.ErrNotFound) {
		t.Errorf("delete of a missing id: got %v, want ErrNotFound", err)
	}
}

func TestLocalCorrupt(t *testing.T) {
	l := newLocal(t)
	tree := writeTree(t, map[string]string{"state/1.sst": "one", "meta.json": "{}"})
	mustUpload(t, l, tree, 1, ckpt.Checkpoint)
	p := filepath.Join(l.Dir(1, ckpt.Checkpoint), "state", "1.sst")
	// A new file (the stored one is a hard link to the source).
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("uno"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	if err := l.Download(context.Background(), 1, ckpt.Checkpoint, dst); !errors.Is(err, ckpt.ErrCorrupt) {
		t.Errorf("download of a corrupted checkpoint: got %v, want ErrCorrupt", err)
	}
	if _, err := l.ReadFile(context.Background(), 1, ckpt.Checkpoint, "state/1.sst"); !errors.Is(err, ckpt.ErrCorrupt) {
		t.Errorf("ReadFile of a corrupted file: got %v, want ErrCorrupt", err)
	}
	if b, err := l.ReadFile(context.Background(), 1, ckpt.Checkpoint, "meta.json"); err != nil || string(b) != "{}" {
		t.Errorf("ReadFile of an intact file: got %q, %v; want {}", b, err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed download left %s behind (%v)", dst, err)
	}
}

func TestHigh(t *testing.T) {
	c := &clock{}
	stores := map[string]ckpt.Store{"local": newLocal(t)}
	if r, err := NewRemote(newFakeS3("b", c.Now), "b", "p", Options{}); err == nil {
		stores["remote"] = r
	} else {
		t.Fatal(err)
	}
	for name, s := range stores {
		ctx := context.Background()
		if _, ok, err := s.High(ctx); ok || err != nil {
			t.Errorf("%s: high before SetHigh: got ok %v, %v", name, ok, err)
		}
		for _, v := range []int64{0, 41, 7, 1 << 40} {
			if err := s.SetHigh(ctx, v); err != nil {
				t.Fatalf("%s: SetHigh(%d): %v", name, v, err)
			}
			if h, ok, err := s.High(ctx); h != v || !ok || err != nil {
				t.Errorf("%s: High after SetHigh(%d): got %d, %v, %v", name, v, h, ok, err)
			}
		}
	}
	l := stores["local"].(*Local)
	if err := os.WriteFile(filepath.Join(l.root, "epoch-high"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.High(context.Background()); err == nil {
		t.Errorf("corrupt high-water mark: got nil error")
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{Parallelism: -1, PendingGrace: -1}
	err := o.Validate()
	if err == nil {
		t.Fatal("got nil error")
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 2 {
		t.Errorf("got %d problems reported, want 2: %v", n, err)
	}
}

func TestLocalReadFile(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	tree := writeTree(t, map[string]string{"state/1.sst": "one", "meta.json": `{"watermark": 7}`})
	mustUpload(t, l, tree, 4, ckpt.Checkpoint)
	for path, want := range map[string]string{"meta.json": `{"watermark": 7}`, "state/1.sst": "one"} {
		if b, err := l.ReadFile(ctx, 4, ckpt.Checkpoint, path); err != nil || string(b) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", path, b, err, want)
		}
	}
	for _, c := range []struct {
		id   int64
		kind ckpt.Kind
		path string
	}{{4, ckpt.Checkpoint, "absent.json"}, {5, ckpt.Checkpoint, "meta.json"}, {4, ckpt.Savepoint, "meta.json"}} {
		if _, err := l.ReadFile(ctx, c.id, c.kind, c.path); !errors.Is(err, ckpt.ErrNotFound) {
			t.Errorf("ReadFile(%d, %v, %s): got %v, want ErrNotFound", c.id, c.kind, c.path, err)
		}
	}
	for _, bad := range []string{"../meta.json", "/meta.json", "state/../meta.json", ""} {
		if _, err := l.ReadFile(ctx, 4, ckpt.Checkpoint, bad); err == nil {
			t.Errorf("ReadFile(%q) succeeded, want an invalid-path error", bad)
		}
	}
}

// TestPinStart: the first PinStart records its time, every later one
// returns that time, in both stores, and the pin does not touch the
// epoch high-water mark.
func TestPinStart(t *testing.T) {
	c := &clock{}
	stores := map[string]ckpt.Store{"local": newLocal(t)}
	if r, err := NewRemote(newFakeS3("b", c.Now), "b", "p", Options{}); err == nil {
		stores["remote"] = r
	} else {
		t.Fatal(err)
	}
	for name, s := range stores {
		ctx := context.Background()
		for i, v := range []int64{1_795_946_400_000, 1_795_946_500_000, 7} {
			got, err := s.PinStart(ctx, v)
			if err != nil || got != 1_795_946_400_000 {
				t.Errorf("%s: PinStart #%d (%d): got %d, %v, want the first pin", name, i+1, v, got, err)
			}
		}
		if _, ok, err := s.High(ctx); ok || err != nil {
			t.Errorf("%s: high after PinStart: got ok %v, %v", name, ok, err)
		}
	}
}
