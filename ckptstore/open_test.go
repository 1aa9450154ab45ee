package ckptstore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// TestOpenLocal: OpenLocal creates nothing and reports a missing store as
// fs.ErrNotExist; over an existing store it sees what NewLocal's sees,
// a checkpoint directory without its manifest included (not complete).
func TestOpenLocal(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "data")
	if _, err := OpenLocal(root, Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenLocal of a missing root: got %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenLocal created %s: %v", root, err)
	}

	w, err := NewLocal(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "meta.json"), []byte(`{"id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustUpload(t, w, src, 1, ckpt.Checkpoint)
	// A newer checkpoint's directory whose manifest was never written.
	partial := w.Dir(2, ckpt.Checkpoint)
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "meta.json"), []byte(`{"id":2}`), 0o644); err != nil {
		t.Fatal(err)
	}

	r, err := OpenLocal(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]ckpt.Store{"NewLocal": w, "OpenLocal": r} {
		if id, ok, err := s.Latest(ctx, ckpt.Checkpoint); err != nil || !ok || id != 1 {
			t.Errorf("%s: Latest got %d, %v, %v; want 1, the newest complete checkpoint", name, id, ok, err)
		}
		if _, err := s.ReadFile(ctx, 2, ckpt.Checkpoint, "meta.json"); !errors.Is(err, ckpt.ErrNotFound) {
			t.Errorf("%s: ReadFile of the incomplete checkpoint: got %v, want ErrNotFound", name, err)
		}
	}
	if b, err := r.ReadFile(ctx, 1, ckpt.Checkpoint, "meta.json"); err != nil || string(b) != `{"id":1}` {
		t.Errorf("OpenLocal: ReadFile got %q, %v", b, err)
	}
	if _, err := OpenLocal(root, Options{Parallelism: -1}); err == nil {
		t.Error("OpenLocal with invalid options: got nil error")
	}
}
