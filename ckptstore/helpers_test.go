package ckptstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cockroachdb/pebble/v2"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// clock is a test clock: real time shifted by an offset the test moves.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// pebbleSrc is a Pebble database that produces realistic checkpoint trees:
// meta.json plus a Pebble checkpoint under state/, as the runtime writes.
type pebbleSrc struct {
	t    testing.TB
	db   *pebble.DB
	base string
	want map[string]string // every key written, with its value
	n    int
}

func newPebbleSrc(t testing.TB) *pebbleSrc {
	t.Helper()
	base := t.TempDir()
	db, err := pebble.Open(filepath.Join(base, "db"), &pebble.Options{
		DisableAutomaticCompactions: true, L0CompactionThreshold: 1000, L0StopWritesThreshold: 2000,
		Logger: quietLogger{},
	})
	if err != nil {
		t.Fatalf("pebble open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return &pebbleSrc{t: t, db: db, base: base, want: map[string]string{}}
}

// batch writes n new keys (about 300 bytes each) and flushes them into a
// table file of their own.
func (p *pebbleSrc) batch(n int) {
	p.t.Helper()
	for i := 0; i < n; i++ {
		// Scattered keys: every table spans the key space, so compactions
		// rewrite tables rather than move them. Incompressible values.
		k := fmt.Sprintf("key-%08d", (uint64(p.n)*2654435761)%100000000)
		sum := sha256.Sum256([]byte(k))
		v := fmt.Sprintf("%d-%s", p.n, strings.Repeat(hex.EncodeToString(sum[:]), 5))
		if err := p.db.Set([]byte(k), []byte(v), pebble.NoSync); err != nil {
			p.t.Fatalf("pebble set: %v", err)
		}
		p.want[k] = v
		p.n++
	}
	if err := p.db.Flush(); err != nil {
		p.t.Fatalf("pebble flush: %v", err)
	}
}

// compact rewrites every table into new ones.
func (p *pebbleSrc) compact() {
	p.t.Helper()
	if err := p.db.Compact(context.Background(), []byte("a"), []byte("z"), false); err != nil {
		p.t.Fatalf("pebble compact: %v", err)
	}
}

// checkpoint writes a checkpoint tree and returns its directory.
func (p *pebbleSrc) checkpoint(id int64) string {
	p.t.Helper()
	dir := filepath.Join(p.base, fmt.Sprintf("ckpt-%d", id))
	if err := p.db.Checkpoint(filepath.Join(dir, "state")); err != nil {
		p.t.Fatalf("pebble checkpoint: %v", err)
	}
	meta := fmt.Sprintf("{\"id\": %d, \"keys\": %d}\n", id, p.n)
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o644); err != nil {
		p.t.Fatal(err)
	}
	return dir
}

// treeFiles returns every regular file under dir (slash paths) with its
// contents, and every directory.
func treeFiles(t testing.TB, dir string) (map[string][]byte, []string) {
	t.Helper()
	files := map[string][]byte{}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			dirs = append(dirs, rel)
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return files, dirs
}

// sameTree fails unless got holds exactly the files and directories of
// want, byte for byte.
func sameTree(t testing.TB, got, want string) {
	t.Helper()
	gf, gd := treeFiles(t, got)
	wf, wd := treeFiles(t, want)
	if !slices.Equal(gd, wd) {
		t.Errorf("directories: got %v, want %v", gd, wd)
	}
	for k, w := range wf {
		g, ok := gf[k]
		if !ok {
			t.Errorf("file %s: missing", k)
		} else if !bytes.Equal(g, w) {
			t.Errorf("file %s: got %d bytes, want %d bytes (contents differ)", k, len(g), len(w))
		}
	}
	for k := range gf {
		if _, ok := wf[k]; !ok {
			t.Errorf("file %s: unexpected", k)
		}
	}
}

// checkPebble opens the state of a restored tree (on a copy: opening may
// write) and checks it holds exactly want.
func checkPebble(t testing.TB, tree string, want map[string]string) {
	t.Helper()
	work := filepath.Join(t.TempDir(), "open")
	if err := os.CopyFS(work, os.DirFS(filepath.Join(tree, "state"))); err != nil {
		t.Fatalf("copy restored state: %v", err)
	}
	db, err := pebble.Open(work, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatalf("open restored state: %v", err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
		if w, ok := want[string(it.Key())]; !ok || w != string(it.Value()) {
			t.Errorf("restored key %s: got %.20q..., want %.20q... (present %v)", it.Key(), it.Value(), w, ok)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("restored keys: got %d, want %d", n, len(want))
	}
}

// newBytes returns what an incremental upload of tree must transfer after
// prev was uploaded, derived from file names alone: every file that is not
// a table, and every table whose name prev does not have (Pebble never
// reuses a file name within one database's life).
func newBytes(t testing.TB, tree, prev string) (bytes int64, tables, reusedTables int) {
	t.Helper()
	pf := map[string]bool{}
	if prev != "" {
		files, _ := treeFiles(t, prev)
		for k := range files {
			pf[k] = true
		}
	}
	files, _ := treeFiles(t, tree)
	for k, b := range files {
		if strings.HasSuffix(k, ".sst") {
			tables++
			if pf[k] {
				reusedTables++
				continue
			}
		}
		bytes += int64(len(b))
	}
	return bytes, tables, reusedTables
}

// remoteEnv is a Remote with its API wrapped for fault injection.
type remoteEnv struct {
	r      *Remote
	api    *faultAPI
	bucket string
	prefix string // with trailing slash
	clock  *clock
}

func newRemoteEnv(t testing.TB, api API, bucket, prefix string, c *clock) *remoteEnv {
	t.Helper()
	fa := &faultAPI{API: api}
	r, err := NewRemote(fa, bucket, prefix, Options{Parallelism: 4, Now: c.Now})
	if err != nil {
		t.Fatalf("new remote: %v", err)
	}
	return &remoteEnv{r: r, api: fa, bucket: bucket, prefix: strings.Trim(prefix, "/") + "/", clock: c}
}

// keys lists the stored keys under the store's prefix + p, relative to the
// store's prefix.
func (e *remoteEnv) keys(t testing.TB, p string) []string {
	t.Helper()
	var ks []string
	pg := s3.NewListObjectsV2Paginator(e.api.API, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket), Prefix: aws.String(e.prefix + p)})
	for pg.HasMorePages() {
		out, err := pg.NextPage(context.Background())
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, o := range out.Contents {
			ks = append(ks, strings.TrimPrefix(aws.ToString(o.Key), e.prefix))
		}
	}
	slices.Sort(ks)
	return ks
}

// sharedOf returns the shared keys a stored manifest references, read
// straight from the bucket.
func (e *remoteEnv) sharedOf(t testing.TB, kind ckpt.Kind, id int64) []string {
	t.Helper()
	b, err := e.r.getBytes(context.Background(), manifestKey(kind, id))
	if err != nil {
		t.Fatalf("read manifest of %s %d: %v", kind, id, err)
	}
	m, err := decodeManifest(b, id, kind)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, f := range m.Files {
		if strings.HasPrefix(f.Key, "shared/") {
			ks = append(ks, f.Key)
		}
	}
	return ks
}

// quietLogger keeps Pebble's informational lines out of test output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
