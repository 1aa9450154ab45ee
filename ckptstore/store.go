package ckptstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// manifest lists every file of a complete checkpoint or savepoint.
type manifest struct {
	Version   int         `json:"version"`
	Kind      string      `json:"kind"`
	ID        int64       `json:"id"`
	CreatedMs int64       `json:"created_ms"` // Unix ms
	Dirs      []string    `json:"dirs,omitempty"`
	Files     []fileEntry `json:"files"`
}

// file returns the entry of path, if the manifest lists it.
func (m *manifest) file(path string) (fileEntry, bool) {
	for _, f := range m.Files {
		if f.Path == path {
			return f, true
		}
	}
	return fileEntry{}, false
}

// readEntry returns the file at path of manifest m (of kind and id),
// fetched by fetch and checked against the entry.
func readEntry(m *manifest, kind ckpt.Kind, id int64, path string, fetch func(fileEntry) ([]byte, error)) ([]byte, error) {
	f, ok := m.file(path)
	if !ok {
		return nil, fmt.Errorf("ckptstore: read %s %d: %s: %w", kind, id, path, ckpt.ErrNotFound)
	}
	data, err := fetch(f)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: read %s %d: %w", kind, id, err)
	}
	return data, f.check(data)
}

// latest returns the last of ids (ascending), as Store.Latest does.
func latest(ids []int64, err error) (int64, bool, error) {
	if err != nil || len(ids) == 0 {
		return 0, false, err
	}
	return ids[len(ids)-1], true, nil
}

// check reports whether data has the size and SHA-256 the entry records.
func (f fileEntry) check(data []byte) error {
	if int64(len(data)) != f.Size {
		return fmt.Errorf("ckptstore: %s: got %d bytes, manifest says %d: %w", f.Path, len(data), f.Size, ckpt.ErrCorrupt)
	}
	sum := sha256.Sum256(data)
	if s := hex.EncodeToString(sum[:]); s != f.SHA256 {
		return fmt.Errorf("ckptstore: %s: checksum %s, manifest says %s: %w", f.Path, s, f.SHA256, ckpt.ErrCorrupt)
	}
	return nil
}

// fileEntry is one file of a manifest.
type fileEntry struct {
	Path   string `json:"path"` // slash-separated, relative to the tree's root
	Size   int64  `json:"size"` // bytes
	SHA256 string `json:"sha256"`
	Key    string `json:"key,omitempty"` // Remote: object key relative to the prefix
}

const manifestVersion = 1

func decodeManifest(b []byte, id int64, kind ckpt.Kind) (*manifest, error) {
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("ckptstore: %s %d: manifest: %w: %w", kind, id, ckpt.ErrCorrupt, err)
	}
	if m.Version != manifestVersion || m.ID != id || m.Kind != kind.String() {
		return nil, fmt.Errorf("ckptstore: %s %d: manifest is version %d of %s %d: %w", kind, id, m.Version, m.Kind, m.ID, ckpt.ErrCorrupt)
	}
	for _, f := range append([]string(nil), m.Dirs...) {
		if !safeRel(f) {
			return nil, fmt.Errorf("ckptstore: %s %d: manifest holds unsafe path %q: %w", kind, id, f, ckpt.ErrCorrupt)
		}
	}
	for _, f := range m.Files {
		if !safeRel(f.Path) || f.Size < 0 {
			return nil, fmt.Errorf("ckptstore: %s %d: manifest holds bad entry %q: %w", kind, id, f.Path, ckpt.ErrCorrupt)
		}
	}
	return &m, nil
}

// safeRel reports whether p is a clean relative slash path inside its root.
func safeRel(p string) bool {
	return p != "" && p != "." && !path.IsAbs(p) && path.Clean(p) == p && p != ".." && !strings.HasPrefix(p, "../") &&
		!strings.Contains(p, "\\")
}

// localFile is a regular file of a tree being uploaded.
type localFile struct {
	rel     string // slash path
	abs     string
	size    int64
	modNano int64
	sum     string // hex SHA-256, filled by hashing
}

// scanTree lists the directories and regular files under root.
func scanTree(root string) (dirs []string, files []localFile, err error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, nil, fmt.Errorf("ckptstore: %w", err)
	}
	if !fi.IsDir() {
		return nil, nil, fmt.Errorf("ckptstore: %s is not a directory", root)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, localFile{rel: rel, abs: p, size: info.Size(), modNano: info.ModTime().UnixNano()})
		default:
			return fmt.Errorf("%s is not a regular file or directory", rel)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("ckptstore: scan %s: %w", root, err)
	}
	slices.Sort(dirs)
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	return dirs, files, nil
}

// isTable reports whether a file is a Pebble table file: immutable, and
// shared between checkpoints.
func isTable(rel string) bool { return strings.HasSuffix(rel, ".sst") }

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// prepareTarget makes sure localDir does not exist (removing it if it is an
// empty directory) and returns a fresh staging directory next to it.
func prepareTarget(localDir string) (string, error) {
	ents, err := os.ReadDir(localDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("ckptstore: download target: %w", err)
	case len(ents) > 0:
		return "", fmt.Errorf("ckptstore: download target %s is not empty", localDir)
	default:
		if err := os.Remove(localDir); err != nil {
			return "", fmt.Errorf("ckptstore: download target: %w", err)
		}
	}
	parent := filepath.Dir(localDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("ckptstore: download target: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(localDir)+".download-")
	if err != nil {
		return "", fmt.Errorf("ckptstore: download target: %w", err)
	}
	return tmp, nil
}

// finishTarget syncs and renames a completed staging directory into place.
func finishTarget(tmp, localDir string) error {
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, localDir); err != nil {
		return fmt.Errorf("ckptstore: download: %w", err)
	}
	return syncDir(filepath.Dir(localDir))
}

// makeDirs creates the manifest's directories under root.
func makeDirs(root string, dirs []string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(d)), 0o755); err != nil {
			return fmt.Errorf("ckptstore: %w", err)
		}
	}
	return nil
}

func writeFileSync(p string, b []byte) error {
	f, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("ckptstore: write %s: %w", filepath.Base(p), err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("ckptstore: write %s: %w", filepath.Base(p), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("ckptstore: sync %s: %w", filepath.Base(p), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ckptstore: write %s: %w", filepath.Base(p), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ckptstore: sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ckptstore: sync dir: %w", err)
	}
	return nil
}

// parseHigh decodes the high-water mark's contents.
func parseHigh(b []byte) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ckptstore: corrupt epoch high-water mark %q: %w", b, err)
	}
	return v, nil
}

func formatHigh(e int64) []byte { return []byte(strconv.FormatInt(e, 10) + "\n") }

// parallel runs fn for each index in [0, n) on at most limit goroutines and
// returns the errors joined. After the first error no new index starts.
func parallel(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	limit = max(1, min(limit, n))
	next := make(chan int)
	errs := make([]error, limit)
	done := make(chan struct{})
	for w := 0; w < limit; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				if err := fn(ctx, i); err != nil && errs[w] == nil {
					errs[w] = err
					cancel()
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	for w := 0; w < limit; w++ {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}
