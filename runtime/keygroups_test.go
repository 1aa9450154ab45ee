package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink/embedded"
	"github.com/adclick/adclick/windowing"
)

// A file replay counted by range pipelines that split the key groups, one
// after the other, into one shared store (each through its own scope) and
// one shared lake, gives the rows a job owning every key group gives, value
// for value, and the lake holds every record once, with the same verdict.
func TestRangesCountWhatTheWholeJobCounts(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(6_000, 41))
	ref := fileReference(t, path)

	whole := replayConfig(filepath.Join(dir, "whole"), path)
	j := runToEnd(t, whole)
	wantRows := scanRows(t, j.Rows())
	j.Close()
	checkRows(t, wantRows, ref)
	wantLake := lakeVerdicts(t, filepath.Join(dir, "whole", "lake"))

	store, err := embedded.Open(filepath.Join(dir, "shared-store"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lake, err := recount.NewFolder(filepath.Join(dir, "shared-lake"))
	if err != nil {
		t.Fatal(err)
	}
	var notOwned float64
	for _, r := range []windowing.KeyGroups{{From: 0, To: 50}, {From: 50, To: 51}, {From: 51, To: 128}} {
		view, err := store.Scoped(r.Scope())
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		cfg := replayConfig(filepath.Join(dir, r.String()), path)
		cfg.KeyGroups, cfg.Rows, cfg.Totals, cfg.OpenSinks, cfg.Lake, cfg.OpenLake = r, view, view, nil, lake, nil
		cfg.OpenCheckpoints = ckptstore.LocalOpener(cfg.DataDir, ckptstore.Options{})
		cfg.Registerer = reg
		j := runToEnd(t, cfg)
		if st := j.Status(); st.KeyGroups != r.String() {
			t.Errorf("status key_groups %q, want %q", st.KeyGroups, r.String())
		}
		j.Close()
		v, _ := metricValue(t, reg, "adclick_clicks_not_owned_total")
		notOwned += v
	}
	gotRows := scanRows(t, store)
	checkRows(t, gotRows, ref)
	if len(gotRows) != len(wantRows) {
		t.Errorf("the ranges wrote %d rows, the whole job %d", len(gotRows), len(wantRows))
	}
	for k, want := range wantRows {
		got := gotRows[k]
		if got.Fast.Valid != want.Fast.Valid || got.Fast.SpendMicros != want.Fast.SpendMicros ||
			got.Late.Valid != want.Late.Valid || got.Late.SpendMicros != want.Late.SpendMicros {
			t.Errorf("%s/%s: ranges fast %d/%d late %d/%d, whole job fast %d/%d late %d/%d", k.Entity, k.Bucket,
				got.Fast.Valid, got.Fast.SpendMicros, got.Late.Valid, got.Late.SpendMicros,
				want.Fast.Valid, want.Fast.SpendMicros, want.Late.Valid, want.Late.SpendMicros)
		}
	}
	gotLake := lakeVerdicts(t, filepath.Join(dir, "shared-lake"))
	if !slices.Equal(gotLake, wantLake) {
		t.Errorf("the ranges' lake holds %d records, the whole job's %d; they differ", len(gotLake), len(wantLake))
	}
	// Every record is another range's in two of the three.
	if want := 2 * float64(len(wantLake)); notOwned != want {
		t.Errorf("adclick_clicks_not_owned_total summed to %v, want %v", notOwned, want)
	}
}

// lakeVerdicts returns "click id/ad/verdict" of every lake record, sorted.
func lakeVerdicts(t *testing.T, dir string) []string {
	t.Helper()
	st, err := recount.NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out []string
	err = recount.Hours(ctx, st, 0, func(h int64) error {
		return recount.ReadHour(ctx, st, h, func(r *recount.Row) error {
			out = append(out, fmt.Sprintf("%s/%s/%s/%s/%s", r.ClickID, r.AdID, r.Verdict, r.Shard, r.Seq))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("the lake is empty")
	}
	slices.Sort(out)
	return out
}

// A range's checkpoint holds only its own key groups: restoring it as
// another range, or as the whole job, is refused; a range outside
// 0..128 is refused before anything is opened.
func TestRangeCheckpointRestoresOnlyIntoItsRange(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(500, 42))
	data := filepath.Join(dir, "data")
	cfg := replayConfig(data, path)
	cfg.KeyGroups = windowing.KeyGroups{From: 0, To: 64}
	runToEnd(t, cfg).Close()
	for _, r := range []windowing.KeyGroups{{From: 64, To: 128}, {}} {
		cfg := replayConfig(data, path)
		cfg.KeyGroups = r
		j, err := Open(context.Background(), cfg)
		if err == nil {
			j.Close()
			t.Errorf("the checkpoint of kg0-64 restored as %v", r)
		} else if !strings.Contains(err.Error(), "key_groups=kg0-64") {
			t.Errorf("restoring kg0-64 as %v: %v, want a refusal naming the checkpoint's key groups", r, err)
		}
	}
	cfg = replayConfig(filepath.Join(dir, "other"), path)
	cfg.KeyGroups = windowing.KeyGroups{From: 100, To: 140}
	if j, err := Open(context.Background(), cfg); err == nil {
		j.Close()
		t.Error("a job of key groups 100..140 opened")
	}
	cfg = replayConfig(filepath.Join(dir, "recount"), path)
	cfg.KeyGroups, cfg.Recount = windowing.KeyGroups{From: 0, To: 64}, true
	if j, err := Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "cannot finalise hours") {
		if j != nil {
			j.Close()
		}
		t.Errorf("a range job with the recount: %v, want it refused", err)
	}
}
