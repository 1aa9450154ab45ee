package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// fencedCommitLease is a range's claim as a fleet holds it: it keeps the
// range's progress and has a tenure fence.
type fencedCommitLease struct {
	*commitLease
	fence int64
}

func (l fencedCommitLease) Fence() int64 { return l.fence }

func withLease(cfg *Config, l Lease) {
	cfg.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) { return l, nil }}
}

// lakePuts is a lake that remembers the last bytes put under each object
// key, as a holder's in-flight PUTs.
type lakePuts struct {
	recount.Store
	mu   sync.Mutex
	puts map[string][]byte
}

func (s *lakePuts) Put(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, "hour=") {
		s.mu.Lock()
		s.puts[key] = slices.Clone(data)
		s.mu.Unlock()
	}
	return s.Store.Put(ctx, key, data)
}

// recountLake recounts every hour of lake and returns its final clicks and
// spend per (ad, hour row).
func recountLake(t *testing.T, lake recount.Store, rows sink.Rows) map[sink.Key]sums {
	t.Helper()
	ctx := context.Background()
	var hours []int64
	if err := recount.Hours(ctx, lake, 0, func(h int64) error { hours = append(hours, h); return nil }); err != nil {
		t.Fatal(err)
	}
	res, err := recount.Run(ctx, recount.Options{Store: lake, Rows: rows, Hours: hours, Force: true, NoWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[sink.Key]sums{}
	for _, h := range res {
		for _, a := range h.Ads {
			if a.Final != 0 || a.FinalSpend != 0 {
				got[sink.Key{Entity: a.Ad, Bucket: "H" + h.Hour}] = sums{a.Final, a.FinalSpend}
			}
		}
	}
	return got
}

// Issue 26, defect 1, the interleaving: holder H1 (fence 1) commits
// checkpoint c and is paused before its PUT of an epoch-c lake object; H2
// (fence 2) takes the range, restores c, removes epochs ≥ c, replays and
// writes its own epoch-c objects (its first epoch is the restored id), and
// commits; then H1's PUT lands. It must neither replace nor add to H2's
// records: the recount of every hour still equals the independent count of
// the input, and every object H2 wrote is still there as H2 wrote it. For
// a range and for the fleet's one range of every key group (scope "").
func TestLateLakeObjectOfAnOldHolderIsNotRead(t *testing.T) {
	for _, kgs := range []windowing.KeyGroups{{From: 0, To: 64}, windowing.AllKeyGroups} {
		t.Run(kgs.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := writeTrace(t, dir, traceOptions(6_000, 13))
			ref := fileReference(t, path)
			want := map[sink.Key]sums{}
			for k, s := range ref.hour {
				if kgs.Owns(k.Entity) {
					want[k] = s
				}
			}
			folder, err := recount.NewFolder(filepath.Join(dir, "lake"))
			if err != nil {
				t.Fatal(err)
			}

			// H1 runs, committing a checkpoint every 2 s of the trace.
			h1Lake := &lakePuts{Store: folder, puts: map[string][]byte{}}
			cfg1 := replayConfig(filepath.Join(dir, "h1"), path)
			cfg1.KeyGroups, cfg1.Lake, cfg1.OpenLake = kgs, h1Lake, nil
			cfg1.CheckpointIntervalMs, cfg1.CheckpointsKept = 2_000, 1_000 // H2 restores one of the middle
			h1 := &commitLease{testLease: newTestLease()}
			withLease(&cfg1, fencedCommitLease{h1, 1})
			j1 := runToEnd(t, cfg1)
			high, _, err := j1.ckpts.store.High(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			j1.Close()
			if len(h1.commits) < 4 {
				t.Fatalf("H1 committed %v: the trace is too short for the test", h1.commits)
			}
			c := h1.commits[len(h1.commits)/2]
			suffix := fmt.Sprintf("-e%012d.parquet", c)
			late := map[string][]byte{} // H1's epoch-c objects: its PUTs in flight
			for k, b := range h1Lake.puts {
				if strings.HasSuffix(k, suffix) {
					late[k] = b
				}
			}
			if len(late) == 0 {
				t.Fatalf("H1 wrote no object of epoch %d", c)
			}

			// H2 takes the range at checkpoint c and replays to the end,
			// without a checkpoint before it: its epoch c holds every
			// record after c, more than H1's epoch c.
			h2Lake := &lakePuts{Store: folder, puts: map[string][]byte{}}
			cfg2 := replayConfig(filepath.Join(dir, "h2"), path)
			cfg2.KeyGroups, cfg2.Lake, cfg2.OpenLake = kgs, h2Lake, nil
			cfg2.OpenCheckpoints = ckptstore.LocalOpener(cfg1.DataDir, ckptstore.Options{})
			cfg2.CheckpointIntervalMs = 3_600_000
			h2 := &commitLease{testLease: newTestLease(), committed: c, high: max(high, h1.commits[len(h1.commits)-1])}
			withLease(&cfg2, fencedCommitLease{h2, 2})
			j2 := runToEnd(t, cfg2)
			defer j2.Close()
			if got := j2.Status().Restored; got != c {
				t.Fatalf("H2 restored checkpoint %d, want %d", got, c)
			}
			if len(h2.commits) == 0 {
				t.Fatal("H2 committed nothing")
			}
			checkSums(t, "after H2's replay", recountLake(t, folder, j2.Rows()), want)

			// H1 resumes: its PUTs land, straight into the store (it passed
			// its lease check before the pause).
			for k, b := range late {
				if err := folder.Put(context.Background(), k, b); err != nil {
					t.Fatal(err)
				}
			}
			for k, b := range h2Lake.puts {
				now, err := folder.Get(context.Background(), k)
				if err != nil {
					t.Errorf("H2's object %s: %v after H1's late PUTs", k, err)
				} else if !slices.Equal(now, b) {
					t.Errorf("H2's object %s was replaced by H1's late PUT", k)
				}
			}
			checkSums(t, "after H1's late PUTs", recountLake(t, folder, j2.Rows()), want)
		})
	}
}

// checkSums compares the recount's final clicks and spend with the
// independent count, (ad, hour) by (ad, hour).
func checkSums(t *testing.T, when string, got, want map[sink.Key]sums) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g := got[k]; g != w && bad < 10 {
			t.Errorf("%s: %s %s: final %d clicks / %d spend, want %d / %d", when, k.Entity, k.Bucket, g.n, g.spend, w.n, w.spend)
			bad++
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && bad < 10 {
			t.Errorf("%s: %s %s: final %d clicks, want none", when, k.Entity, k.Bucket, g.n)
			bad++
		}
	}
}
