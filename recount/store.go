package recount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotFound is returned (wrapped) by Store.Get for a key with no object.
var ErrNotFound = errors.New("recount: object not found")

// ErrStopList may be returned by a List callback to end the listing early;
// List then returns nil.
var ErrStopList = errors.New("recount: stop listing")

// Store is the object store holding the lake. Keys are slash-separated
// relative paths of safe characters (letters, digits, '-', '_', '.', '=',
// '/'). Implementations: Folder (embedded mode) and s3lake.Store (AWS
// mode). All methods are safe for concurrent use.
type Store interface {
	// Put writes the object key, replacing any previous one. data is
	// valid only until Put returns (the lake's writer reuses it for the
	// next object): a store that writes later must copy it.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the object key; an error wrapping ErrNotFound if absent.
	Get(ctx context.Context, key string) ([]byte, error)
	// List calls fn for every key beginning with prefix that sorts after
	// startAfter ("" = from the start), in ascending byte order. If fn
	// returns ErrStopList, List stops and returns nil.
	List(ctx context.Context, prefix, startAfter string, fn func(key string) error) error
	// Delete removes the object key; deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error
}

// ValidKey reports whether key is a safe relative object key.
func ValidKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("recount: bad object key %q", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("recount: bad object key %q", key)
		}
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.=/", c) >= 0) {
			return fmt.Errorf("recount: bad object key %q", key)
		}
	}
	return nil
}

// Folder is a Store in a local directory: the key a/b.parquet is the file
// DIR/a/b.parquet. Put writes a temporary file, syncs it and renames it into
// place, so a reader never sees half an object. Safe for concurrent use
// (distinct keys; concurrent Puts of one key leave one of them).
type Folder struct {
	dir string
}

var _ Store = (*Folder)(nil)

// NewFolder returns the store rooted at dir, creating dir if needed.
func NewFolder(dir string) (*Folder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("recount: lake folder: %w", err)
	}
	return &Folder{dir: dir}, nil
}

// FolderOpener returns a function that opens the Folder at dir (NewFolder),
// for runtime.Config.OpenLake: the job calls it once it holds its data dir.
func FolderOpener(dir string) func() (Store, error) {
	return func() (Store, error) {
		f, err := NewFolder(dir)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
}

// Dir returns the root directory.
func (f *Folder) Dir() string { return f.dir }

// Put writes the object key durably (write, fsync, rename).
func (f *Folder) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recount: put %s: %w", key, err)
	}
	p := filepath.Join(f.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("recount: put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("recount: put %s: %w", key, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("recount: put %s: %w", key, err)
	}
	return nil
}

// Get reads the object key.
func (f *Folder) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recount: get %s: %w", key, err)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("recount: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("recount: get %s: %w", key, err)
	}
	return b, nil
}

// List walks the directory tree in key order. Temporary files of
// unfinished Puts (names starting with ".") are not listed.
func (f *Folder) List(ctx context.Context, prefix, startAfter string, fn func(string) error) error {
	// Start at the deepest directory the prefix names.
	base := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		base = prefix[:i]
	}
	err := f.walk(ctx, base, prefix, startAfter, fn)
	if errors.Is(err, ErrStopList) {
		return nil
	}
	return err
}

func (f *Folder) walk(ctx context.Context, dir, prefix, startAfter string, fn func(string) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recount: list: %w", err)
	}
	ents, err := os.ReadDir(filepath.Join(f.dir, filepath.FromSlash(dir)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recount: list: %w", err)
	}
	// Keys order as "name/..." for directories: sort by that form so the
	// walk yields keys in byte order ('/' sorts before most key bytes but
	// after '-' and '.').
	type ent struct {
		name string
		dir  bool
	}
	es := make([]ent, 0, len(ents))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		es = append(es, ent{e.Name(), e.IsDir()})
	}
	sortKey := func(e ent) string {
		if e.dir {
			return e.name + "/"
		}
		return e.name
	}
	slices.SortFunc(es, func(a, b ent) int { return strings.Compare(sortKey(a), sortKey(b)) })
	for _, e := range es {
		key := e.name
		if dir != "" {
			key = dir + "/" + e.name
		}
		if e.dir {
			d := key + "/"
			// Skip subtrees wholly outside the prefix or before startAfter.
			if !strings.HasPrefix(d, prefix) && !strings.HasPrefix(prefix, d) {
				continue
			}
			if startAfter != "" && d < startAfter && !strings.HasPrefix(startAfter, d) {
				continue
			}
			if err := f.walk(ctx, key, prefix, startAfter, fn); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(key, prefix) || key <= startAfter {
			continue
		}
		if err := fn(key); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes the object key and any directories it leaves empty.
func (f *Folder) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("recount: delete %s: %w", key, err)
	}
	p := filepath.Join(f.dir, filepath.FromSlash(key))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recount: delete %s: %w", key, err)
	}
	for d := filepath.Dir(p); d != f.dir && strings.HasPrefix(d, f.dir); d = filepath.Dir(d) {
		if os.Remove(d) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

// RemoveTemp deletes the temporary files a writer killed in the middle of a
// Put left behind (".tmp-*"), and the folders that leaves empty. Call it
// only while no writer uses the folder (the job does, on restore).
func (f *Folder) RemoveTemp() (int, error) {
	n := 0
	var dirs []string
	err := filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != f.dir {
				dirs = append(dirs, p)
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			if err := os.Remove(p); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("recount: remove temporary files: %w", err)
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first
		os.Remove(dirs[i]) // fails, as it should, unless empty
	}
	return n, nil
}
