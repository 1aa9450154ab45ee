package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// Meta is the metadata of a completed checkpoint, stored next to its state
// as meta.json.
type Meta struct {
	ID          int64             `json:"id"`
	JobGen      int64             `json:"job_gen"`
	Fingerprint string            `json:"fingerprint"`
	Settings    string            `json:"settings"`
	Positions   map[string]string `json:"positions"`
	Floors      []int64           `json:"floors"`
	// Forgotten holds each pre-aggregator's guard bound: ids whose expiry
	// lies below it may have been forgotten (restored as the maximum).
	Forgotten []int64 `json:"forgotten,omitempty"`
	// Shards are the shards the watermark tracked at the checkpoint (not
	// read to their end): a restore registers each, so one that has no
	// record after the checkpoint still holds the watermark (until it is
	// idle) as it did in the run before.
	Shards      []string `json:"shards,omitempty"`
	Watermark   int64    `json:"watermark"`
	Parallelism int      `json:"parallelism"`
	Restored    int64    `json:"restored"`
	TakenAtMs   int64    `json:"taken_at_ms"`
	DurationMs  int64    `json:"duration_ms"`
	SizeBytes   int64    `json:"size_bytes"`
	Uploaded    int64    `json:"uploaded_bytes"`
	// NewBytes are the bytes of state files the previous checkpoint did not
	// have (what an incremental checkpoint adds).
	NewBytes int64 `json:"new_bytes"`
	Final    bool  `json:"final,omitempty"`
	// EndOfInput marks the final checkpoint of a file replay read to its
	// end: Watermark is then math.MaxInt64 (every hour is complete as far
	// as this input goes), while Floors stay the last real watermark.
	EndOfInput bool `json:"end_of_input,omitempty"`
	// AllowanceMs is the job's out-of-orderness allowance (Settings holds
	// its horizon): the batch recount must judge clicks with both. Nil in
	// checkpoints of versions that did not record it.
	AllowanceMs *int64 `json:"allowance_ms,omitempty"`
}

// Setting returns the integer value of key in m.Settings, the
// space-separated key=value words the job records ("format=1
// window_ms=60000 horizon_ms=7200000 ..."). ok is false when the settings
// do not name key (a checkpoint of an older version) or its value is not
// an integer (v is then 0). The first word naming key wins.
func (m Meta) Setting(key string) (v int64, ok bool) {
	for w := range strings.FieldsSeq(m.Settings) {
		if k, val, found := strings.Cut(w, "="); found && k == key {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// checkpoints builds checkpoints in a local scratch folder and keeps them
// in a ckpt.Store: DataDir itself in embedded mode, S3 in AWS mode
// (where a container's disk does not survive a restart). The store also
// holds the epoch high-water mark.
type checkpoints struct {
	store   ckpt.Store
	log     *slog.Logger
	dataDir string
	keep    int
	prev    map[string]int64 // state files of the previous checkpoint: name → size
	// commits, if set, keeps the epoch high-water mark and the latest
	// checkpoint in the job's lease (CommitLease) beside the store.
	commits CommitLease
}

func newCheckpoints(dataDir string, store ckpt.Store, open func() (ckpt.Store, error), keep int, log *slog.Logger) (*checkpoints, error) {
	if store == nil {
		var err error
		if store, err = open(); err != nil {
			return nil, fmt.Errorf("runtime: checkpoint store: %w", err)
		}
	}
	return &checkpoints{store: store, log: log, dataDir: dataDir, keep: keep}, nil
}

// fetch downloads checkpoint (or savepoint) id into an empty local folder
// and reads its metadata.
func (c *checkpoints) fetch(ctx context.Context, id int64, kind ckpt.Kind) (string, Meta, error) {
	dir := filepath.Join(c.dataDir, "restore", kind.String()+"-"+strconv.FormatInt(id, 10))
	if err := os.RemoveAll(dir); err != nil {
		return "", Meta{}, fmt.Errorf("runtime: restore dir: %w", err)
	}
	if err := c.store.Download(ctx, id, kind, dir); err != nil {
		return "", Meta{}, fmt.Errorf("runtime: fetch %s %d: %w", kind, id, err)
	}
	m, err := readMeta(dir)
	return dir, m, err
}

// latest fetches the newest complete checkpoint that verifies; found is
// false if there is none. A checkpoint that does not verify (a file whose
// size or checksum differs from its manifest, an unreadable meta.json) is
// skipped, loudly, for the one before it: restoring an older checkpoint is
// safe, because the flush then covers every epoch from the older id to the
// high-water mark, and the replay starts from the older positions. If
// checkpoints exist but none verifies, the start is refused: starting from
// empty state would count everything again.
func (c *checkpoints) latest(ctx context.Context) (dir string, m Meta, found bool, err error) {
	if c.commits != nil {
		return c.committed(ctx)
	}
	ids, err := c.store.List(ctx, ckpt.Checkpoint)
	if err != nil {
		return "", Meta{}, false, fmt.Errorf("runtime: list checkpoints: %w", err)
	}
	var bad []string
	for i := len(ids) - 1; i >= 0; i-- {
		dir, m, err := c.fetch(ctx, ids[i], ckpt.Checkpoint)
		if err == nil {
			if len(bad) > 0 {
				c.log.Error("restoring an older checkpoint: the newer ones do not verify", "checkpoint", ids[i], "skipped", bad)
			}
			return dir, m, true, nil
		}
		if !errors.Is(err, ckpt.ErrCorrupt) {
			return "", Meta{}, false, err
		}
		c.log.Error("checkpoint does not verify; trying the one before", "checkpoint", ids[i], "err", err)
		bad = append(bad, fmt.Sprintf("%d (%v)", ids[i], err))
	}
	if len(bad) > 0 {
		return "", Meta{}, false, fmt.Errorf("runtime: no checkpoint verifies, refusing to start from empty state (it would count everything again): %s", strings.Join(bad, "; "))
	}
	return "", Meta{}, false, nil
}

// committed fetches the checkpoint the lease names as committed (found
// false if none). It must verify: an older one would be safe to restore,
// but the lease does not say which older ones were committed.
func (c *checkpoints) committed(ctx context.Context) (dir string, m Meta, found bool, err error) {
	id, key, lh := c.commits.Committed()
	ids, err := c.store.List(ctx, ckpt.Checkpoint)
	if err != nil {
		return "", Meta{}, false, fmt.Errorf("runtime: list checkpoints: %w", err)
	}
	h, hok, err := c.store.High(ctx)
	if err != nil {
		return "", Meta{}, false, fmt.Errorf("runtime: read the epoch high-water mark: %w", err)
	}
	// Every upload of this lineage is of an epoch its holder opened in the
	// lease first: anything above the lease's mark is someone else's.
	if n := len(ids); (n > 0 && ids[n-1] > lh) || (hok && h > lh) {
		last := int64(0)
		if n > 0 {
			last = ids[n-1]
		}
		return "", Meta{}, false, fmt.Errorf("runtime: the checkpoint store holds checkpoint %d and epochs up to %d, above what the lease recorded (checkpoint %d, epoch high %d): it belongs to another lineage (a changed job name, lease table or checkpoint location?); refusing to start rather than remove it",
			last, h, id, lh)
	}
	if id == 0 {
		return "", Meta{}, false, nil
	}
	if loc := c.store.Location(id, ckpt.Checkpoint); key != "" && key != loc {
		return "", Meta{}, false, fmt.Errorf("runtime: the lease's committed checkpoint %d is at %s, but this job's store names it %s: refusing to restore another lineage's checkpoint", id, key, loc)
	}
	dir, m, err = c.fetch(ctx, id, ckpt.Checkpoint)
	if err != nil {
		return "", Meta{}, false, fmt.Errorf("runtime: the committed checkpoint %d: %w", id, err)
	}
	return dir, m, true, nil
}

// savepoint fetches a savepoint named by id (from from, or the job's own
// store if from is nil) or by a local folder path.
func (c *checkpoints) savepoint(ctx context.Context, ref string, from ckpt.Store) (string, Meta, error) {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		if from != nil {
			other := *c
			other.store = from
			return other.fetch(ctx, id, ckpt.Savepoint)
		}
		return c.fetch(ctx, id, ckpt.Savepoint)
	}
	m, err := readMeta(ref)
	return ref, m, err
}

// cleanRestore removes the downloaded copies.
func (c *checkpoints) cleanRestore() { os.RemoveAll(filepath.Join(c.dataDir, "restore")) }

// put builds checkpoint id in a scratch folder (fill writes the state into
// dir/state), adds meta.json, and stores it — and, if savepoint is set, as a
// savepoint too. It returns the completed metadata and the savepoint's
// location.
func (c *checkpoints) put(ctx context.Context, m Meta, savepoint bool, began time.Time, fill func(dir string) error) (Meta, string, error) {
	dir := filepath.Join(c.dataDir, "scratch", "ckpt-"+strconv.FormatInt(m.ID, 10))
	if err := os.RemoveAll(dir); err != nil {
		return Meta{}, "", fmt.Errorf("runtime: checkpoint scratch: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := fill(dir); err != nil {
		return Meta{}, "", err
	}
	m.SizeBytes = dirSize(dir)
	files := stateFiles(filepath.Join(dir, "state"))
	for name, size := range files {
		if c.prev[name] != size {
			m.NewBytes += size
		}
	}
	c.prev = files
	m.DurationMs = time.Since(began).Milliseconds()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Meta{}, "", fmt.Errorf("runtime: encode checkpoint meta: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644); err != nil {
		return Meta{}, "", fmt.Errorf("runtime: write checkpoint meta: %w", err)
	}
	st, err := c.store.Upload(ctx, dir, m.ID, ckpt.Checkpoint)
	if err != nil {
		return Meta{}, "", fmt.Errorf("runtime: store checkpoint %d: %w", m.ID, err)
	}
	m.Uploaded = st.BytesUploaded
	if c.commits != nil {
		if err := c.commits.Commit(ctx, m.ID, c.store.Location(m.ID, ckpt.Checkpoint), m.Watermark); err != nil {
			return Meta{}, "", fmt.Errorf("runtime: commit checkpoint %d in the lease: %w", m.ID, err)
		}
	}
	loc := ""
	if savepoint {
		if _, err := c.store.Upload(ctx, dir, m.ID, ckpt.Savepoint); err != nil {
			return Meta{}, "", fmt.Errorf("runtime: store savepoint %d: %w", m.ID, err)
		}
		loc = c.store.Location(m.ID, ckpt.Savepoint)
	}
	return m, loc, nil
}

// prune keeps the newest checkpoints (and every savepoint).
func (c *checkpoints) prune(ctx context.Context) error {
	_, err := c.store.Prune(ctx, c.keep)
	return err
}

// oldestRestorable returns the lowest id a restore can go back to (the
// oldest kept checkpoint or savepoint), or ok false.
func (c *checkpoints) oldestRestorable(ctx context.Context) (int64, bool) {
	var oldest int64
	found := false
	for _, k := range []ckpt.Kind{ckpt.Checkpoint, ckpt.Savepoint} {
		ids, err := c.store.List(ctx, k)
		if err != nil {
			return 0, false
		}
		for _, id := range ids {
			if !found || id < oldest {
				oldest, found = id, true
			}
		}
	}
	return oldest, found
}

// high returns the highest epoch any run may have written (ok false if
// none ran).
func (c *checkpoints) high(ctx context.Context) (int64, bool, error) {
	h, ok, err := c.store.High(ctx)
	if c.commits != nil && err == nil {
		if _, _, lh := c.commits.Committed(); lh > h || (lh > 0 && !ok) {
			h, ok = max(h, lh), true
		}
	}
	return h, ok, err
}

// startPinMarginMs is how far before the processing time of a lineage's
// first start its pinned start lies: a "latest" start then also reads the
// records of the last seconds before it (counted once, like any other),
// and a host clock ahead of Kinesis' by less than that loses none.
const startPinMarginMs = 10_000

// setHigh durably records that epochs up to e may be written. It is called
// before any write tagged e can happen.
func (c *checkpoints) setHigh(ctx context.Context, e int64) error {
	if c.commits != nil {
		if err := c.commits.OpenEpoch(ctx, e); err != nil {
			return fmt.Errorf("runtime: open epoch %d in the lease: %w", e, err)
		}
	}
	if err := c.store.SetHigh(ctx, e); err != nil {
		return fmt.Errorf("runtime: record epoch high-water mark: %w", err)
	}
	return nil
}

// dropAfter removes the checkpoints after id (an abandoned lineage).
func (c *checkpoints) dropAfter(ctx context.Context, id int64) error {
	return ckpt.DropAfter(ctx, c.store, id)
}

func readMeta(dir string) (Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return Meta{}, fmt.Errorf("runtime: read checkpoint: %w", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("runtime: %s: meta.json: %w: %w", dir, ckpt.ErrCorrupt, err)
	}
	return m, nil
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// stateFiles lists the files of a Pebble checkpoint by name with their sizes.
func stateFiles(dir string) map[string]int64 {
	out := make(map[string]int64)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !e.IsDir() {
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

// LatestMeta reads the metadata of the newest complete checkpoint in st
// (complete as the store defines it: Store.Latest), its meta.json checked
// against the checkpoint's manifest; found is false if st holds none. It
// reads that one file, not the state: it is for readers of the job's
// watermark and settings, such as the batch recount, not for a restore
// (which also skips a checkpoint whose files do not verify). Safe for
// concurrent use as st is.
func LatestMeta(ctx context.Context, st ckpt.Store) (m Meta, found bool, err error) {
	id, ok, err := st.Latest(ctx, ckpt.Checkpoint)
	if err != nil {
		return Meta{}, false, fmt.Errorf("runtime: latest checkpoint: %w", err)
	}
	if !ok {
		return Meta{}, false, nil
	}
	m, err = MetaOf(ctx, st, id)
	return m, err == nil, err
}

// MetaOf reads the metadata of checkpoint id in st, as LatestMeta does:
// for a reader that knows which checkpoint counts (a fleet's range, whose
// lease item names the committed one).
func MetaOf(ctx context.Context, st ckpt.Store, id int64) (Meta, error) {
	var m Meta
	b, err := st.ReadFile(ctx, id, ckpt.Checkpoint, "meta.json")
	if err != nil {
		return Meta{}, fmt.Errorf("runtime: read checkpoint %d: %w", id, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("runtime: checkpoint %d: meta.json: %w: %w", id, ckpt.ErrCorrupt, err)
	}
	return m, nil
}
