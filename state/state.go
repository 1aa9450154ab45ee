package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/adclick/adclick/internal/pebbleutil"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// ErrClosed is returned by every method of a closed DB (and of its Dedups).
var ErrClosed = errors.New("state: db closed")

// Options configure a DB. The zero value gives the defaults.
type Options struct {
	// CacheSize is Pebble's block cache in bytes, on top of the memtables
	// (Pebble charges those to the same cache; Open adds them). Default
	// 64 MiB.
	CacheSize int64
	// MemTableSize is the size of one memtable in bytes. Default 64 MiB (at
	// most two exist at once: the one being written and one being flushed).
	MemTableSize uint64
	// MaxCompactions is the most compactions Pebble runs at once. Default 2
	// (one per core of a two-core machine).
	MaxCompactions int
	// DedupBatchBytes is the size in bytes at which a Dedup commits its
	// pending inserts by itself. Default 128 KiB: small enough for the
	// pending table to stay in cache.
	DedupBatchBytes int
}

// Defaults.
const (
	DefaultCacheSize       = 64 << 20
	DefaultMemTableSize    = 64 << 20
	DefaultMaxCompactions  = 2
	DefaultDedupBatchBytes = 128 << 10
)

func (o *Options) ensureDefaults() {
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.MaxCompactions <= 0 {
		o.MaxCompactions = DefaultMaxCompactions
	}
	if o.DedupBatchBytes <= 0 {
		o.DedupBatchBytes = DefaultDedupBatchBytes
	}
}

// DB is the state store of one process. It is safe for concurrent use.
type DB struct {
	db   *pebble.DB
	opts Options

	gate pebbleutil.Gate
}

// Open opens (creating if needed) the state DB in dir, with the write-ahead
// log disabled.
func Open(dir string, o Options) (*DB, error) {
	o.ensureDefaults()
	// Pebble charges its memtables (the one being written and one being
	// flushed) to the block cache; add them so that CacheSize stays for
	// blocks.
	cache := pebble.NewCache(o.CacheSize + 2*int64(o.MemTableSize))
	defer cache.Unref()
	maxc := o.MaxCompactions
	po := &pebble.Options{
		Cache:              cache,
		MemTableSize:       o.MemTableSize,
		DisableWAL:         true,
		FormatMajorVersion: pebble.FormatNewest,
		// Dedup keys are written once and deleted by ranges, and lookups are
		// rare behind the in-memory filters: let L0 grow and compact it into
		// a larger Lbase in bigger files, trading read amplification for
		// less compaction CPU.
		L0CompactionThreshold:      16,
		L0StopWritesThreshold:      64,
		LBaseMaxBytes:              256 << 20,
		CompactionConcurrencyRange: func() (int, int) { return 1, maxc },
		Logger:                     pebbleutil.Logger{Prefix: "state"},
	}
	po.TargetFileSizes[0] = 16 << 20
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", dir, err)
	}
	return &DB{db: db, opts: o, gate: pebbleutil.Gate{Closed: ErrClosed}}, nil
}

// Close waits for running calls and closes the DB. Uncommitted Dedup
// inserts are lost. Later calls of any method return ErrClosed.
func (db *DB) Close() error {
	if err := db.gate.Close(); err != nil {
		return err
	}
	if err := db.db.Close(); err != nil {
		return fmt.Errorf("state: close: %w", err)
	}
	return nil
}

func (db *DB) enter() error { return db.gate.Enter() }

// Checkpoint writes a consistent copy of the DB into dir, which must not
// exist. It flushes the memtable first (the WAL is off, so unflushed data
// would be missing) and hard-links SSTables where the filesystem allows. It
// must be called only while no operator writes, after every Dedup's Commit;
// writes after it returns do not change the checkpoint.
func (db *DB) Checkpoint(dir string) error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.db.Flush(); err != nil {
		return fmt.Errorf("state: checkpoint flush: %w", err)
	}
	if err := db.db.Checkpoint(dir); err != nil {
		return fmt.Errorf("state: checkpoint %s: %w", dir, err)
	}
	return nil
}

// FlushSoon starts writing the memtable to disk in the background and
// returns at once. Called shortly before a checkpoint, it leaves the
// checkpoint's own flush (while the graph is stopped) only what was written
// since.
func (db *DB) FlushSoon() error {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.gate.Leave()
	if _, err := db.db.AsyncFlush(); err != nil {
		return fmt.Errorf("state: flush: %w", err)
	}
	return nil
}

// OpenFromCheckpoint replaces workDir with a copy of the checkpoint in
// ckptDir and opens it. Immutable table files are hard-linked (copied if
// linking fails); every other file is copied, so the checkpoint is never
// modified by the new DB.
func OpenFromCheckpoint(ckptDir, workDir string, o Options) (*DB, error) {
	entries, err := os.ReadDir(ckptDir)
	if err != nil {
		return nil, fmt.Errorf("state: restore: %w", err)
	}
	if err := os.RemoveAll(workDir); err != nil {
		return nil, fmt.Errorf("state: restore: clear %s: %w", workDir, err)
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, fmt.Errorf("state: restore: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("state: restore: unexpected entry %s in checkpoint", e.Name())
		}
		src, dst := filepath.Join(ckptDir, e.Name()), filepath.Join(workDir, e.Name())
		if immutable(e.Name()) && os.Link(src, dst) == nil {
			continue
		}
		if err := copyFile(src, dst); err != nil {
			return nil, fmt.Errorf("state: restore: %w", err)
		}
	}
	return Open(workDir, o)
}

// immutable reports whether Pebble never rewrites the file once written.
func immutable(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return out.Sync()
}

// SizeBytes returns the approximate on-disk size of the state in bytes
// (tables, manifests and logs; memtables not yet flushed are not counted).
// It returns 0 on a closed DB.
func (db *DB) SizeBytes() int64 {
	if db.enter() != nil {
		return 0
	}
	defer db.gate.Leave()
	return int64(db.db.Metrics().DiskSpaceUsage())
}

// Operator blobs.

const (
	prefixBlob  = 'b'
	prefixDedup = 'g'
	// prefixInterimDedup held the dedup entries of a layout that was never
	// released ('e' kg(ad) kg(click id) bucket len(ad) ad id): a DB holding
	// any is refused, not misread.
	prefixInterimDedup = 'e'
	// prefixLegacyDedup holds the dedup entries of the previous version,
	// keyed by click id alone: read, never written, until they expire.
	prefixLegacyDedup = 'd'
	// prefixDedupBound holds the expiry bound of each key group of click
	// ids (Dedup.Expire).
	prefixDedupBound = 'f'
	// MaxBlobKeyGroup is the largest key group PutBlob accepts.
	MaxBlobKeyGroup = 1<<16 - 1
)

func blobPrefix(op string) ([]byte, error) {
	if op == "" || strings.IndexByte(op, 0) >= 0 {
		return nil, fmt.Errorf("state: bad operator name %q", op)
	}
	b := make([]byte, 0, len(op)+4)
	b = append(b, prefixBlob)
	b = append(b, op...)
	return append(b, 0), nil
}

// PutBlob stores val as the state of operator op for key group kg
// (0..MaxBlobKeyGroup), replacing any previous value. It is visible at once
// and part of the next Checkpoint.
func (db *DB) PutBlob(op string, kg int, val []byte) error {
	p, err := blobPrefix(op)
	if err != nil {
		return err
	}
	if kg < 0 || kg > MaxBlobKeyGroup {
		return fmt.Errorf("state: put blob %s: key group %d out of range", op, kg)
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.db.Set(binary.BigEndian.AppendUint16(p, uint16(kg)), val, pebble.NoSync); err != nil {
		return fmt.Errorf("state: put blob %s/%d: %w", op, kg, err)
	}
	return nil
}

// Blobs calls fn for every blob of op in increasing key-group order. val is
// a copy that fn may keep.
func (db *DB) Blobs(op string, fn func(kg int, val []byte) error) error {
	p, err := blobPrefix(op)
	if err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.gate.Leave()
	iter, err := db.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("state: blobs %s: %w", op, err)
	}
	for valid := iter.First(); valid; valid = iter.Next() {
		k := iter.Key()[len(p):]
		if len(k) != 2 {
			return errors.Join(fmt.Errorf("state: blobs %s: corrupt key %x", op, iter.Key()), iter.Close())
		}
		v, err := iter.ValueAndErr()
		if err != nil {
			return errors.Join(fmt.Errorf("state: blobs %s: %w", op, err), iter.Close())
		}
		if err := fn(int(binary.BigEndian.Uint16(k)), append([]byte(nil), v...)); err != nil {
			return errors.Join(err, iter.Close())
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("state: blobs %s: %w", op, err)
	}
	return nil
}

// DeleteBlobs removes every blob of op.
func (db *DB) DeleteBlobs(op string) error {
	p, err := blobPrefix(op)
	if err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.db.DeleteRange(p, prefixEnd(p), pebble.NoSync); err != nil {
		return fmt.Errorf("state: delete blobs %s: %w", op, err)
	}
	return nil
}

// prefixEnd returns the smallest key greater than every key with prefix p
// (nil if p is all 0xFF).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
