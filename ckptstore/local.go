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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// LocalManifest is the name of the manifest file a Local store writes into
// each checkpoint and savepoint directory. Download leaves it out, and an
// uploaded tree must not hold a top-level file of that name.
const LocalManifest = "ckptstore-manifest.json"

const localUploadPrefix = ".upload-"

// Local is a Store over a folder, laid out as the runtime has always laid
// out its data directory:
//
//	ROOT/checkpoints/ckpt-<12-digit id>/   a checkpoint's tree + LocalManifest
//	ROOT/savepoints/sp-<id>/               a savepoint's tree + LocalManifest
//	ROOT/epoch-high                        the epoch high-water mark, "N\n"
//
// An upload is built in a hidden staging directory next to its final place
// and renamed into place once complete and synced: a directory under its
// final name is complete. Files are hard-linked from the uploaded tree where
// possible (checkpoint files are never modified), copied otherwise.
//
// Local is safe for concurrent use.
type Local struct {
	root string
	o    Options
	m    *metrics
	sums hashCache

	mu       sync.Mutex
	inflight map[string]int // staging directories of running uploads
}

var _ ckpt.Store = (*Local)(nil)

// NewLocal returns a Local store rooted at root, creating it if needed.
func NewLocal(root string, o Options) (*Local, error) {
	return localAt(root, o, true)
}

// OpenLocal returns the Local store rooted at root, for a reader that must
// not create one: unlike NewLocal it creates no folder, and it returns an
// error wrapping fs.ErrNotExist if root holds no checkpoints folder.
func OpenLocal(root string, o Options) (*Local, error) {
	return localAt(root, o, false)
}

func localAt(root string, o Options, create bool) (*Local, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if create {
		for _, d := range []string{"checkpoints", "savepoints"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return nil, fmt.Errorf("ckptstore: %w", err)
			}
		}
	} else if _, err := os.Stat(filepath.Join(root, "checkpoints")); err != nil {
		return nil, fmt.Errorf("ckptstore: open: %w", err)
	}
	m, err := newMetrics(o.Registerer, "local")
	if err != nil {
		return nil, err
	}
	return &Local{root: root, o: o, m: m, inflight: map[string]int{}}, nil
}

func (l *Local) kindDir(kind ckpt.Kind) string {
	if kind == ckpt.Savepoint {
		return filepath.Join(l.root, "savepoints")
	}
	return filepath.Join(l.root, "checkpoints")
}

func localName(kind ckpt.Kind, id int64) string {
	if kind == ckpt.Savepoint {
		return "sp-" + strconv.FormatInt(id, 10)
	}
	return kind.Name(id)
}

// Dir returns the directory that holds (or would hold) id, for callers
// that read a complete checkpoint in place instead of downloading it.
func (l *Local) Dir(id int64, kind ckpt.Kind) string {
	return filepath.Join(l.kindDir(kind), localName(kind, id))
}

// Location implements Store: the same as Dir.
func (l *Local) Location(id int64, kind ckpt.Kind) string { return l.Dir(id, kind) }

// Upload implements Store.
func (l *Local) Upload(ctx context.Context, localDir string, id int64, kind ckpt.Kind) (ckpt.UploadStats, error) {
	st, err := l.upload(ctx, localDir, id, kind)
	if err != nil {
		return ckpt.UploadStats{}, l.m.fail("upload", err)
	}
	l.m.uploadDone(kind, st)
	return st, nil
}

func (l *Local) upload(ctx context.Context, localDir string, id int64, kind ckpt.Kind) (ckpt.UploadStats, error) {
	began := l.o.Now()
	if err := checkID(id, kind); err != nil {
		return ckpt.UploadStats{}, err
	}
	dirs, files, err := scanTree(localDir)
	if err != nil {
		return ckpt.UploadStats{}, err
	}
	for _, f := range files {
		if f.rel == LocalManifest {
			return ckpt.UploadStats{}, fmt.Errorf("ckptstore: %s holds a file named %s, which the store reserves", localDir, LocalManifest)
		}
	}
	final := l.Dir(id, kind)
	if _, err := os.Stat(final); err == nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, ckpt.ErrExists)
	}
	staging := filepath.Join(l.kindDir(kind), localUploadPrefix+localName(kind, id))
	l.mu.Lock()
	if l.inflight[staging] > 0 {
		l.mu.Unlock()
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: another upload of it is running", kind, id)
	}
	l.inflight[staging]++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.inflight, staging)
		l.mu.Unlock()
	}()
	if err := os.RemoveAll(staging); err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload staging: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(staging)
		}
	}()
	if err := makeDirs(staging, append([]string{"."}, dirs...)); err != nil {
		return ckpt.UploadStats{}, err
	}
	if err := l.sums.fill(ctx, files, l.o.Parallelism); err != nil {
		return ckpt.UploadStats{}, err
	}
	linked := make([]bool, len(files))
	err = parallel(ctx, len(files), l.o.Parallelism, func(ctx context.Context, i int) error {
		f := files[i]
		dst := filepath.Join(staging, filepath.FromSlash(f.rel))
		if os.Link(f.abs, dst) == nil {
			linked[i] = true
			return nil
		}
		return copyFile(f.abs, dst)
	})
	if err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: upload %s %d: %w", kind, id, err)
	}
	st := ckpt.UploadStats{Files: len(files)}
	m := manifest{Version: manifestVersion, Kind: kind.String(), ID: id, CreatedMs: began.UnixMilli(), Dirs: dirs}
	for i, f := range files {
		m.Files = append(m.Files, fileEntry{Path: f.rel, Size: f.size, SHA256: f.sum})
		if linked[i] {
			st.FilesReused++
			st.BytesReused += f.size
		} else {
			st.FilesUploaded++
			st.BytesUploaded += f.size
		}
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: encode manifest: %w", err)
	}
	if err := writeFileSync(filepath.Join(staging, LocalManifest), b); err != nil {
		return ckpt.UploadStats{}, err
	}
	for _, d := range append([]string{"."}, dirs...) {
		if err := syncDir(filepath.Join(staging, filepath.FromSlash(d))); err != nil {
			return ckpt.UploadStats{}, err
		}
	}
	if err := os.Rename(staging, final); err != nil {
		return ckpt.UploadStats{}, fmt.Errorf("ckptstore: commit %s %d: %w", kind, id, err)
	}
	ok = true
	if err := syncDir(l.kindDir(kind)); err != nil {
		return ckpt.UploadStats{}, err
	}
	st.Duration = l.o.Now().Sub(began)
	return st, nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, kind ckpt.Kind) ([]int64, error) {
	ids, err := l.list(kind)
	return ids, l.m.fail("list", err)
}

func (l *Local) list(kind ckpt.Kind) ([]int64, error) {
	if err := kind.Valid(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(l.kindDir(kind))
	if err != nil {
		return nil, fmt.Errorf("ckptstore: list %ss: %w", kind, err)
	}
	prefix := kind.Prefix()
	var ids []int64
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id < 0 {
			continue
		}
		if _, err := os.Stat(filepath.Join(l.kindDir(kind), e.Name(), LocalManifest)); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Latest implements Store.
func (l *Local) Latest(ctx context.Context, kind ckpt.Kind) (int64, bool, error) {
	return latest(l.List(ctx, kind))
}

// Download implements Store. Files are hard-linked where possible.
func (l *Local) Download(ctx context.Context, id int64, kind ckpt.Kind, localDir string) error {
	return l.m.fail("download", l.download(ctx, id, kind, localDir))
}

// ReadFile implements Store.
func (l *Local) ReadFile(ctx context.Context, id int64, kind ckpt.Kind, path string) ([]byte, error) {
	b, err := l.readFile(id, kind, path)
	return b, l.m.fail("read", err)
}

func (l *Local) readFile(id int64, kind ckpt.Kind, path string) ([]byte, error) {
	if err := kind.Valid(); err != nil {
		return nil, err
	}
	if !fs.ValidPath(path) {
		return nil, fmt.Errorf("ckptstore: read %s %d: invalid path %q", kind, id, path)
	}
	dir := l.Dir(id, kind)
	b, err := os.ReadFile(filepath.Join(dir, LocalManifest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("ckptstore: read %s %d: %w", kind, id, ckpt.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ckptstore: read %s %d: %w", kind, id, err)
	}
	m, err := decodeManifest(b, id, kind)
	if err != nil {
		return nil, err
	}
	return readEntry(m, kind, id, path, func(fileEntry) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(path)))
	})
}

func (l *Local) download(ctx context.Context, id int64, kind ckpt.Kind, localDir string) error {
	if err := kind.Valid(); err != nil {
		return err
	}
	src := l.Dir(id, kind)
	b, err := os.ReadFile(filepath.Join(src, LocalManifest))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ckptstore: download %s %d: %w", kind, id, ckpt.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("ckptstore: download %s %d: %w", kind, id, err)
	}
	m, err := decodeManifest(b, id, kind)
	if err != nil {
		return err
	}
	tmp, err := prepareTarget(localDir)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := makeDirs(tmp, m.Dirs); err != nil {
		return err
	}
	err = parallel(ctx, len(m.Files), l.o.Parallelism, func(ctx context.Context, i int) error {
		f := m.Files[i]
		from, to := filepath.Join(src, filepath.FromSlash(f.Path)), filepath.Join(tmp, filepath.FromSlash(f.Path))
		if err := verifyFile(from, f); err != nil {
			return fmt.Errorf("%s %d: %w", kind, id, err)
		}
		if os.Link(from, to) == nil {
			return nil
		}
		return copyFile(from, to)
	})
	if err != nil {
		return fmt.Errorf("ckptstore: download: %w", err)
	}
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	if err := finishTarget(tmp, localDir); err != nil {
		return err
	}
	ok = true
	l.m.downloaded.Add(float64(n))
	return nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, id int64, kind ckpt.Kind) error {
	if err := kind.Valid(); err != nil {
		return err
	}
	p := l.Dir(id, kind)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ckptstore: delete %s %d: %w", kind, id, ckpt.ErrNotFound)
	}
	return l.m.fail("delete", l.remove(p))
}

// remove deletes a checkpoint directory, its manifest first, so that a crash
// halfway never leaves a directory that looks complete.
func (l *Local) remove(p string) error {
	if err := os.Remove(filepath.Join(p, LocalManifest)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ckptstore: remove %s: %w", filepath.Base(p), err)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("ckptstore: remove %s: %w", filepath.Base(p), err)
	}
	return nil
}

// Prune implements Store. Hard links share the files of consecutive
// checkpoints, so removing a directory frees exactly what nothing else
// holds; PruneStats.Shared stays 0.
func (l *Local) Prune(ctx context.Context, keep int) (ckpt.PruneStats, error) {
	st, err := l.prune(keep)
	return st, l.m.fail("prune", err)
}

func (l *Local) prune(keep int) (ckpt.PruneStats, error) {
	var st ckpt.PruneStats
	if keep < 1 {
		return st, fmt.Errorf("ckptstore: prune: keep %d: want at least 1", keep)
	}
	ids, err := l.list(ckpt.Checkpoint)
	if err != nil {
		return st, err
	}
	for len(ids) > keep {
		if err := l.remove(l.Dir(ids[0], ckpt.Checkpoint)); err != nil {
			return st, err
		}
		st.Checkpoints++
		ids = ids[1:]
	}
	// Leftovers of interrupted uploads (not running now), and directories
	// under a final name that never got a manifest.
	for _, kind := range []ckpt.Kind{ckpt.Checkpoint, ckpt.Savepoint} {
		ents, err := os.ReadDir(l.kindDir(kind))
		if err != nil {
			return st, fmt.Errorf("ckptstore: prune: %w", err)
		}
		for _, e := range ents {
			p := filepath.Join(l.kindDir(kind), e.Name())
			if !strings.HasPrefix(e.Name(), localUploadPrefix) {
				continue
			}
			l.mu.Lock()
			running := l.inflight[p] > 0
			l.mu.Unlock()
			if running {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return st, fmt.Errorf("ckptstore: prune: %w", err)
			}
			st.Partial++
		}
	}
	return st, nil
}

// PinStart implements Store: the first call creates the file (exclusive
// create, sync, directory sync); later calls read it.
func (l *Local) PinStart(ctx context.Context, startMs int64) (int64, error) {
	p := filepath.Join(l.root, startPinFile)
	if b, err := os.ReadFile(p); err == nil {
		v, err := parseHigh(b)
		return v, l.m.fail("pin_start", err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, l.m.fail("pin_start", fmt.Errorf("ckptstore: read the pinned start: %w", err))
	}
	err := writeFileSync(p+".tmp", formatHigh(startMs))
	if err == nil {
		err = os.Link(p+".tmp", p) // fails if another start pinned first
		os.Remove(p + ".tmp")
		if errors.Is(err, fs.ErrExist) {
			return l.PinStart(ctx, startMs)
		}
	}
	if err == nil {
		err = syncDir(l.root)
	}
	if err != nil {
		return 0, l.m.fail("pin_start", fmt.Errorf("ckptstore: pin the start: %w", err))
	}
	return startMs, nil
}

// High implements Store.
func (l *Local) High(ctx context.Context) (int64, bool, error) {
	b, err := os.ReadFile(filepath.Join(l.root, "epoch-high"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, l.m.fail("high", fmt.Errorf("ckptstore: read epoch high-water mark: %w", err))
	}
	v, err := parseHigh(b)
	if err != nil {
		return 0, false, l.m.fail("high", err)
	}
	return v, true, nil
}

// SetHigh implements Store: write a temporary file, sync, rename, sync the
// directory.
func (l *Local) SetHigh(ctx context.Context, e int64) error {
	p := filepath.Join(l.root, "epoch-high")
	err := writeFileSync(p+".tmp", formatHigh(e))
	if err == nil {
		if err = os.Rename(p+".tmp", p); err != nil {
			err = fmt.Errorf("ckptstore: record epoch high-water mark: %w", err)
		}
	}
	if err == nil {
		err = syncDir(l.root)
	}
	return l.m.fail("set_high", err)
}

func checkID(id int64, kind ckpt.Kind) error {
	if err := kind.Valid(); err != nil {
		return err
	}
	if id < 0 {
		return fmt.Errorf("ckptstore: %s id %d: want at least 0", kind, id)
	}
	return nil
}

// verifyFile checks a stored file against its manifest entry.
func verifyFile(p string, f fileEntry) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if fi.Size() != f.Size {
		return fmt.Errorf("%s: size %d, manifest says %d: %w", f.Path, fi.Size(), f.Size, ckpt.ErrCorrupt)
	}
	sum, err := hashFile(p)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if sum != f.SHA256 {
		return fmt.Errorf("%s: checksum %s, manifest says %s: %w", f.Path, sum, f.SHA256, ckpt.ErrCorrupt)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// hashCache remembers the SHA-256 of table files between uploads. Table
// files are immutable and hard-linked from one checkpoint to the next, so
// the same name, size and modification time mean the same contents; other
// files are always hashed. It keeps only the entries of the last upload.
type hashCache struct {
	mu   sync.Mutex
	sums map[hashKey]string
}

type hashKey struct {
	rel     string
	size    int64
	modNano int64
}

// fill sets the sum of every file, hashing those not cached.
func (c *hashCache) fill(ctx context.Context, files []localFile, par int) error {
	c.mu.Lock()
	old := c.sums
	c.mu.Unlock()
	err := parallel(ctx, len(files), par, func(ctx context.Context, i int) error {
		f := &files[i]
		if isTable(f.rel) {
			if s, ok := old[hashKey{f.rel, f.size, f.modNano}]; ok {
				f.sum = s
				return nil
			}
		}
		s, err := hashFile(f.abs)
		if err != nil {
			return fmt.Errorf("ckptstore: hash %s: %w", f.rel, err)
		}
		f.sum = s
		return nil
	})
	if err != nil {
		return err
	}
	next := make(map[hashKey]string, len(files))
	for _, f := range files {
		if isTable(f.rel) {
			next[hashKey{f.rel, f.size, f.modNano}] = f.sum
		}
	}
	c.mu.Lock()
	c.sums = next
	c.mu.Unlock()
	return nil
}

// hashingWriter hashes and counts what passes through it.
type hashingWriter struct {
	w io.Writer
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashingWriter(w io.Writer) *hashingWriter { return &hashingWriter{w: w, h: sha256.New()} }

func (hw *hashingWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

func (hw *hashingWriter) sum() string { return hex.EncodeToString(hw.h.Sum(nil)) }

// LocalOpener returns a function that opens the Local store rooted at root
// (NewLocal), for runtime.Config.OpenCheckpoints: the job calls it once it
// holds its data dir.
func LocalOpener(root string, o Options) func() (ckpt.Store, error) {
	return func() (ckpt.Store, error) {
		l, err := NewLocal(root, o)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}
