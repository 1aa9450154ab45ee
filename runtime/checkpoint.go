package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	Watermark   int64             `json:"watermark"`
	Parallelism int               `json:"parallelism"`
	Restored    int64             `json:"restored"`
	TakenAtMs   int64             `json:"taken_at_ms"`
	DurationMs  int64             `json:"duration_ms"`
	SizeBytes   int64             `json:"size_bytes"`
	Final       bool              `json:"final,omitempty"`
}

// checkpoints is the local checkpoint storage under DataDir/checkpoints, and
// the epoch high-water mark under DataDir/epoch-high.
type checkpoints struct {
	dir      string
	highFile string
}

func newCheckpoints(dataDir string) (*checkpoints, error) {
	c := &checkpoints{dir: filepath.Join(dataDir, "checkpoints"), highFile: filepath.Join(dataDir, "epoch-high")}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("runtime: checkpoint dir: %w", err)
	}
	return c, nil
}

func ckptName(id int64) string { return fmt.Sprintf("ckpt-%012d", id) }

func (c *checkpoints) path(id int64) string { return filepath.Join(c.dir, ckptName(id)) }

// ids returns the ids of the complete checkpoints, ascending.
func (c *checkpoints) ids() ([]int64, error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("runtime: list checkpoints: %w", err)
	}
	var ids []int64
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), "ckpt-")
		if !ok || !e.IsDir() {
			continue
		}
		id, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(c.dir, e.Name(), "meta.json")); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// latest returns the newest complete checkpoint, or ok false.
func (c *checkpoints) latest() (m Meta, ok bool, err error) {
	ids, err := c.ids()
	if err != nil || len(ids) == 0 {
		return Meta{}, false, err
	}
	m, err = c.meta(ids[len(ids)-1])
	return m, err == nil, err
}

func (c *checkpoints) meta(id int64) (Meta, error) {
	return readMeta(c.path(id))
}

func readMeta(dir string) (Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return Meta{}, fmt.Errorf("runtime: read checkpoint: %w", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("runtime: %s: corrupt meta.json: %w", dir, err)
	}
	return m, nil
}

// dropAfter removes the checkpoints with ids above id.
func (c *checkpoints) dropAfter(id int64) error {
	ids, err := c.ids()
	if err != nil {
		return err
	}
	for _, x := range ids {
		if x > id {
			if err := os.RemoveAll(c.path(x)); err != nil {
				return fmt.Errorf("runtime: drop checkpoint %d: %w", x, err)
			}
		}
	}
	return nil
}

// staging returns an empty directory to build checkpoint id in.
func (c *checkpoints) staging(id int64) (string, error) {
	p := filepath.Join(c.dir, "tmp-"+ckptName(id))
	if err := os.RemoveAll(p); err != nil {
		return "", fmt.Errorf("runtime: checkpoint staging: %w", err)
	}
	return p, nil
}

// commit writes meta.json into the staging directory, syncs it and renames
// the directory into place: a checkpoint exists only once complete.
func (c *checkpoints) commit(staging string, m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("runtime: encode checkpoint meta: %w", err)
	}
	if err := writeFileSync(filepath.Join(staging, "meta.json"), b); err != nil {
		return err
	}
	if err := os.Rename(staging, c.path(m.ID)); err != nil {
		return fmt.Errorf("runtime: commit checkpoint %d: %w", m.ID, err)
	}
	return syncDir(c.dir)
}

// prune removes all but the newest keep checkpoints and any staging leftovers.
func (c *checkpoints) prune(keep int) error {
	ids, err := c.ids()
	if err != nil {
		return err
	}
	for len(ids) > keep {
		if err := os.RemoveAll(c.path(ids[0])); err != nil {
			return fmt.Errorf("runtime: prune checkpoint %d: %w", ids[0], err)
		}
		ids = ids[1:]
	}
	ents, _ := os.ReadDir(c.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "tmp-") {
			os.RemoveAll(filepath.Join(c.dir, e.Name()))
		}
	}
	return nil
}

// high returns the highest epoch any run may have written (0 if none ran).
func (c *checkpoints) high() (int64, bool, error) {
	b, err := os.ReadFile(c.highFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("runtime: read epoch high-water mark: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("runtime: corrupt epoch high-water mark %q: %w", b, err)
	}
	return v, true, nil
}

// setHigh durably records that epochs up to e may be written. It is called
// before any write tagged e can happen.
func (c *checkpoints) setHigh(e int64) error {
	tmp := c.highFile + ".tmp"
	if err := writeFileSync(tmp, []byte(strconv.FormatInt(e, 10)+"\n")); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.highFile); err != nil {
		return fmt.Errorf("runtime: record epoch high-water mark: %w", err)
	}
	return syncDir(filepath.Dir(c.highFile))
}

func writeFileSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("runtime: write %s: %w", filepath.Base(path), err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("runtime: write %s: %w", filepath.Base(path), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("runtime: sync %s: %w", filepath.Base(path), err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("runtime: sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("runtime: sync dir: %w", err)
	}
	return nil
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
