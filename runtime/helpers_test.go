package runtime

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

// traceOptions is a generated trace with late, out-of-order, duplicate,
// invalid, clock-skewed and idle-shard traffic. The heavy tail stays under
// the 2 h horizon (5.4 M ms + 30 s of impression lead < 7.2 M ms), so every
// valid first copy is in the horizon and the reference needs no watermark.
func traceOptions(clicks int64, seed uint64) ingest.GenOptions {
	return ingest.GenOptions{
		Clicks: clicks, Ads: 40, Shards: 3, Rate: 100, TailFraction: 0.05, TailMaxMs: 5_400_000,
		DupFraction: 0.03, InvalidFraction: 0.01, SkewFraction: 0.01, IdleEveryMs: 80_000, Seed: seed,
	}
}

// writeTrace writes a generated trace to a file in dir and returns its path.
func writeTrace(t *testing.T, dir string, o ingest.GenOptions) string {
	t.Helper()
	path := filepath.Join(dir, "trace.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.WriteTrace(f, o, nil); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

type sums struct{ n, spend int64 }

// reference counts clicks independently of the job's code: each valid
// click id once (its first valid copy in arrival order), by ad and by the
// hour and minute of its clamped event time.
type reference struct {
	hour   map[sink.Key]sums
	minute map[sink.Key]sums
	valid  int
}

// refClick is one click as the reference reads it. arrivalMs 0 means the
// line's own arrival_ms.
type refClick struct {
	ClickID    *string `json:"click_id"`
	AdID       *string `json:"ad_id"`
	CampaignID *string `json:"campaign_id"`
	DeviceID   *string `json:"device_id"`
	Imp        *int64  `json:"impression_ms"`
	Dev        *int64  `json:"device_ms"`
	Spend      *int64  `json:"spend_micros"`
	Arr        *int64  `json:"arrival_ms"`
}

func newReference() reference {
	return reference{hour: map[sink.Key]sums{}, minute: map[sink.Key]sums{}}
}

// add counts one payload arriving at arrivalMs (0: the payload's own
// arrival_ms) unless it is invalid or a duplicate of a click in seen.
func (r *reference) add(line []byte, arrivalMs int64, seen map[string]bool) {
	var c refClick
	if json.Unmarshal(line, &c) != nil {
		return
	}
	if arrivalMs == 0 {
		if c.Arr == nil {
			return
		}
		arrivalMs = *c.Arr
	}
	if c.ClickID == nil || *c.ClickID == "" || c.AdID == nil || *c.AdID == "" || c.CampaignID == nil || *c.CampaignID == "" ||
		c.DeviceID == nil || *c.DeviceID == "" || c.Imp == nil || c.Dev == nil || c.Spend == nil ||
		*c.Spend < 0 || *c.Imp <= 0 || arrivalMs <= 0 || *c.Imp > arrivalMs {
		return
	}
	if seen[*c.ClickID] {
		return
	}
	seen[*c.ClickID] = true
	ev := min(max(*c.Dev, *c.Imp), arrivalMs)
	tm := time.UnixMilli(ev).UTC()
	h := sink.Key{Entity: *c.AdID, Bucket: tm.Format("H2006-01-02T15Z")}
	m := sink.Key{Entity: *c.AdID, Bucket: tm.Format("M2006-01-02T15:04Z")}
	r.hour[h] = sums{r.hour[h].n + 1, r.hour[h].spend + *c.Spend}
	r.minute[m] = sums{r.minute[m].n + 1, r.minute[m].spend + *c.Spend}
	r.valid++
}

// fileReference builds the reference of a trace file (lines without a shard
// are invalid in the file format).
func fileReference(t *testing.T, path string) reference {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := newReference()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s struct {
			Shard *string `json:"shard"`
		}
		if json.Unmarshal(sc.Bytes(), &s) != nil || s.Shard == nil || *s.Shard == "" {
			continue
		}
		ref.add(sc.Bytes(), 0, seen)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if ref.valid == 0 {
		t.Fatal("reference: the trace has no valid click")
	}
	return ref
}

// scanRows reads every item of rows, by key.
func scanRows(t *testing.T, rows sink.Rows) map[sink.Key]sink.Item {
	t.Helper()
	out := map[sink.Key]sink.Item{}
	err := rows.Scan(context.Background(), func(it sink.Item) error {
		out[it.Key] = it
		return nil
	})
	if err != nil {
		t.Fatalf("scan rows: %v", err)
	}
	return out
}

// checkRows verifies the rows against the reference: every hour row's fast
// total is the sum of its minute rows; no minute row carries late_* or
// exceeds its true count; for every (ad, hour) fast + late equals the
// reference count and spend — nothing lost, nothing doubled.
func checkRows(t *testing.T, items map[sink.Key]sink.Item, ref reference) {
	t.Helper()
	minuteSum := map[sink.Key]sums{}
	hours := map[sink.Key]sink.Item{}
	for k, it := range items {
		switch k.Bucket[0] {
		case 'M':
			if it.Late.Present {
				t.Errorf("minute row %s/%s carries late_*", k.Entity, k.Bucket)
			}
			if want := ref.minute[k]; it.Fast.Valid > want.n {
				t.Errorf("minute row %s/%s: fast_valid %d exceeds the true count %d", k.Entity, k.Bucket, it.Fast.Valid, want.n)
			}
			hk := sink.Key{Entity: k.Entity, Bucket: "H" + k.Bucket[1:14] + "Z"}
			minuteSum[hk] = sums{minuteSum[hk].n + it.Fast.Valid, minuteSum[hk].spend + it.Fast.SpendMicros}
		case 'H':
			hours[k] = it
		default:
			t.Errorf("row %s/%s: unknown bucket", k.Entity, k.Bucket)
		}
	}
	for k, it := range hours {
		if got, want := (sums{it.Fast.Valid, it.Fast.SpendMicros}), minuteSum[k]; got != want {
			t.Errorf("hour row %s/%s: fast %+v, want the sum of its minute rows %+v", k.Entity, k.Bucket, got, want)
		}
	}
	for k, s := range minuteSum {
		if _, ok := hours[k]; !ok && s.n > 0 {
			t.Errorf("hour %s/%s: minute rows sum to %+v but there is no hour row", k.Entity, k.Bucket, s)
		}
	}
	keys := map[sink.Key]bool{}
	for k := range ref.hour {
		keys[k] = true
	}
	for k := range hours {
		keys[k] = true
	}
	sorted := make([]sink.Key, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Entity != sorted[j].Entity {
			return sorted[i].Entity < sorted[j].Entity
		}
		return sorted[i].Bucket < sorted[j].Bucket
	})
	bad := 0
	for _, k := range sorted {
		it := hours[k]
		got := sums{it.Fast.Valid + it.Late.Valid, it.Fast.SpendMicros + it.Late.SpendMicros}
		if want := ref.hour[k]; got != want {
			if bad++; bad <= 20 {
				t.Errorf("hour %s/%s: fast+late = %+v, want %+v (valid, de-duplicated clicks)", k.Entity, k.Bucket, got, want)
			}
		}
	}
	if bad > 20 {
		t.Errorf("... and %d more hours differ", bad-20)
	}
}

// metricValue returns the value of the counter or gauge name (summed over
// its series) in reg, and whether it was found.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += value(m)
		}
		return v, true
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// replayConfig is a file replay of path into dir with the embedded store.
func replayConfig(dir, path string) Config {
	cfg := Config{
		DataDir: dir, Source: "file:" + path, OpenSource: source.File(path), Parallelism: 2, CheckpointIntervalMs: 5_000,
		FlushWritesPerSec: 1e6,
	}
	useLocalStores(&cfg)
	return cfg
}

// useLocalStores makes cfg keep everything under its data dir, as embedded
// mode does: the embedded row and total store, the folder checkpoint store
// and the folder lake (each used only where cfg sets no other).
func useLocalStores(cfg *Config) {
	cfg.OpenSinks = embedded.Opener(filepath.Join(cfg.DataDir, "store"), embedded.Options{Registerer: cfg.Registerer})
	cfg.OpenCheckpoints = ckptstore.LocalOpener(cfg.DataDir, ckptstore.Options{})
	cfg.OpenLake = recount.FolderOpener(filepath.Join(cfg.DataDir, "lake"))
}

// runToEnd opens a job with cfg, runs it to the end of its input and
// returns it (open: the caller closes it).
func runToEnd(t *testing.T, cfg Config) *Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := j.Run(ctx); err != nil {
		j.Close()
		t.Fatalf("run: %v", err)
	}
	return j
}
