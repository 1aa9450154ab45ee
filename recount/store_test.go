package recount

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestFolderRemoveTemp(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.Put(ctx, "hour=2026-11-29T10/a.parquet", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// What a writer killed mid-Put leaves: a temp file, alone in its folder.
	if err := os.MkdirAll(filepath.Join(dir, "_epochs", "e000000000002"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "_epochs", "e000000000002", ".tmp-123"), filepath.Join(dir, "hour=2026-11-29T10", ".tmp-9")} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.RemoveTemp()
	if err != nil || n != 2 {
		t.Fatalf("RemoveTemp = %d, %v; want 2, nil", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "_epochs")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the folder left empty is still there: %v", err)
	}
	if b, err := f.Get(ctx, "hour=2026-11-29T10/a.parquet"); err != nil || string(b) != "x" {
		t.Errorf("a real object was touched: %q, %v", b, err)
	}
}
