package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/adclick/adclick/recount"
)

// The recount's end-to-end tests: the real binary replays a trace with
// duplicates, invalid records, late clicks and clicks beyond the acceptance
// horizon (with and without crashes), `adclick recount --all-ready` writes
// final_*, and the finals are compared with a count made here from the input
// file alone.

// The recount's batch rule (recount.Judge, documented in the package): a
// valid click is beyond the horizon when its impression is before
// arrival - allowance - 1 ms - horizon; of the remaining copies of a click id
// the one that arrived first counts, in the hour of its clamped event time.
// These are the job's and the CLI's defaults.
const (
	refHorizonMs   = 2 * 3_600_000
	refAllowanceMs = 5_000
)

// genTraceBeyond writes a trace like genTrace's, but with heavy-tail delays
// up to 2.5 h, so that some clicks arrive beyond the 2 h horizon.
func genTraceBeyond(t *testing.T, path string, clicks int, seed int) {
	t.Helper()
	run(t, 0, "gen", "--out", path, "--clicks", strconv.Itoa(clicks), "--rate", "100", "--ads", "40",
		"--shards", "3", "--tail-fraction", "0.06", "--tail-max-ms", "9000000", "--dup-fraction", "0.04",
		"--invalid-fraction", "0.01", "--skew-fraction", "0.01", "--idle-every-ms", "80000", "--seed", strconv.Itoa(seed),
		"--start-ms", "1795946400000")
}

// finalRef is the independent count of a trace under the batch rule.
type finalRef struct {
	hour    map[[2]string]sums // (ad, "H…") → final count and spend
	lines   int                // non-empty lines (records the job reads)
	valid   int                // valid lines
	beyond  int                // valid lines beyond the horizon
	lostIDs int                // click ids with valid copies, none within the horizon
	dups    int                // valid, in-horizon copies beyond the first of an id
}

// buildFinalReference counts path independently of the job's code.
func buildFinalReference(t *testing.T, path string) finalRef {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type click struct {
		ad                   string
		imp, dev, arr, spend int64
		shard                string
	}
	ref := finalRef{hour: map[[2]string]sums{}}
	best := map[string]click{}
	validIDs := map[string]bool{}
	lastArr := int64(0)
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		ref.lines++
		var c struct {
			ClickID    *string `json:"click_id"`
			AdID       *string `json:"ad_id"`
			CampaignID *string `json:"campaign_id"`
			DeviceID   *string `json:"device_id"`
			Shard      *string `json:"shard"`
			Imp        *int64  `json:"impression_ms"`
			Dev        *int64  `json:"device_ms"`
			Spend      *int64  `json:"spend_micros"`
			Arr        *int64  `json:"arrival_ms"`
		}
		if json.Unmarshal(l, &c) != nil {
			continue // malformed
		}
		if c.Arr != nil {
			if *c.Arr < lastArr {
				t.Fatalf("trace: arrival %d after %d: the reference assumes arrival order", *c.Arr, lastArr)
			}
			lastArr = *c.Arr
		}
		if c.ClickID == nil || *c.ClickID == "" || c.AdID == nil || *c.AdID == "" || c.CampaignID == nil || *c.CampaignID == "" ||
			c.DeviceID == nil || *c.DeviceID == "" || c.Shard == nil || *c.Shard == "" || c.Imp == nil || c.Dev == nil ||
			c.Spend == nil || c.Arr == nil || *c.Spend < 0 || *c.Imp <= 0 || *c.Arr <= 0 || *c.Imp > *c.Arr {
			continue
		}
		ref.valid++
		validIDs[*c.ClickID] = true
		if *c.Imp < *c.Arr-refAllowanceMs-1-refHorizonMs {
			ref.beyond++
			continue
		}
		k := click{ad: *c.AdID, imp: *c.Imp, dev: *c.Dev, arr: *c.Arr, spend: *c.Spend, shard: *c.Shard}
		old, ok := best[*c.ClickID]
		if ok {
			ref.dups++
		}
		// Earliest arrival wins; on a tie the lower shard, then the first
		// line (the file source has no sequence numbers).
		if !ok || k.arr < old.arr || k.arr == old.arr && k.shard < old.shard {
			best[*c.ClickID] = k
		}
	}
	for id := range validIDs {
		if _, ok := best[id]; !ok {
			ref.lostIDs++
		}
	}
	for _, c := range best {
		ev := min(max(c.dev, c.imp), c.arr)
		h := [2]string{c.ad, time.UnixMilli(ev).UTC().Format("H2006-01-02T15Z")}
		ref.hour[h] = sums{ref.hour[h].n + 1, ref.hour[h].spend + c.spend}
	}
	return ref
}

// finalRow is an hour row with the recount's attributes.
type finalRow struct {
	Entity     string `json:"entity"`
	Bucket     string `json:"bucket"`
	FastValid  *int64 `json:"fast_valid"`
	FastSpend  *int64 `json:"fast_spend_micros"`
	LateValid  *int64 `json:"late_valid"`
	LateSpend  *int64 `json:"late_spend_micros"`
	FinalValid *int64 `json:"final_valid"`
	FinalSpend *int64 `json:"final_spend_micros"`
	FinalGen   *int64 `json:"final_gen"`
}

// finals maps (ad, hour bucket) to final_valid and final_spend_micros.
type finals map[[2]string]sums

// recountAndCheck runs `adclick recount --all-ready` and `adclick reconcile
// --all-ready --json` on data (extra: --lake and the like), and checks that
// final_* equals ref exactly for every (ad, hour) and that every (ad, hour)
// balances. It returns the finals.
func recountAndCheck(t *testing.T, data string, ref finalRef, extra ...string) finals {
	t.Helper()
	// No --force: the final checkpoint of a finished replay has the end of
	// time as its watermark, so every hour is ready.
	run(t, 0, append([]string{"recount", "--all-ready", "--data", data, "--log-level", "warn"}, extra...)...)
	var rs []finalRow
	for _, l := range bytes.Split(bytes.TrimSpace(run(t, 0, "rows", "--data", data)), []byte("\n")) {
		var r finalRow
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("rows: bad line %s: %v", l, err)
		}
		if strings.HasPrefix(r.Bucket, "H") {
			rs = append(rs, r)
		}
	}
	got := finals{}
	var late int64
	for _, r := range rs {
		k := [2]string{r.Entity, r.Bucket}
		late += val(r.LateValid)
		if r.FinalValid == nil || r.FinalSpend == nil {
			t.Errorf("hour row %s/%s has no final_valid/final_spend_micros after recount --all-ready", r.Entity, r.Bucket)
			continue
		}
		if g := val(r.FinalGen); g != 1 {
			t.Errorf("hour row %s/%s: final_gen %d, want 1", r.Entity, r.Bucket, g)
		}
		got[k] = sums{*r.FinalValid, *r.FinalSpend}
	}
	keys := map[[2]string]bool{}
	for k := range ref.hour {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	for k := range keys {
		if g, w := got[k], ref.hour[k]; g != w {
			t.Errorf("final %s/%s = %+v, want %+v (counted from the input file)", k[0], k[1], g, w)
		}
	}
	if late == 0 {
		t.Errorf("no hour row has late_valid: the trace did not exercise late clicks")
	}

	// Reconciliation, without writing: final = fast + late - A + B for
	// every (ad, hour), and its numbers agree with the rows.
	var results []recount.HourResult
	out := run(t, 0, append([]string{"reconcile", "--all-ready", "--json", "--data", data, "--log-level", "error"}, extra...)...)
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("reconcile --json: %v\n%s", err, out)
	}
	byKey := map[[2]string]finalRow{}
	for _, r := range rs {
		byKey[[2]string{r.Entity, r.Bucket}] = r
	}
	seen := map[[2]string]bool{}
	var a, b int64
	for _, h := range results {
		if h.Status != "checked" {
			t.Errorf("reconcile %s: status %q, want checked", h.Hour, h.Status)
		}
		if !h.Balanced {
			t.Errorf("reconcile %s: not balanced", h.Hour)
		}
		for _, ar := range h.Ads {
			k := [2]string{ar.Ad, "H" + h.Hour}
			seen[k] = true
			a += ar.A
			b += ar.B
			if ar.Final != ar.Fast+ar.Late-ar.A+ar.B || ar.FinalSpend != ar.FastSpend+ar.LateSpend-ar.ASpend+ar.BSpend {
				t.Errorf("reconcile %s/%s: final %d (%d µ) != fast %d + late %d - A %d + B %d (%d + %d - %d + %d µ)", k[0], k[1],
					ar.Final, ar.FinalSpend, ar.Fast, ar.Late, ar.A, ar.B, ar.FastSpend, ar.LateSpend, ar.ASpend, ar.BSpend)
			}
			if !ar.Balanced || ar.Unexplained != 0 || ar.UnexplainedSpend != 0 {
				t.Errorf("reconcile %s/%s: balanced %v, unexplained %d (%d µ), want balanced", k[0], k[1], ar.Balanced, ar.Unexplained, ar.UnexplainedSpend)
			}
			if w := ref.hour[k]; ar.Final != w.n || ar.FinalSpend != w.spend {
				t.Errorf("reconcile %s/%s: final %d (%d µ), want %+v", k[0], k[1], ar.Final, ar.FinalSpend, w)
			}
			r := byKey[k]
			if ar.Fast != val(r.FastValid) || ar.Late != val(r.LateValid) || ar.FastSpend != val(r.FastSpend) || ar.LateSpend != val(r.LateSpend) {
				t.Errorf("reconcile %s/%s: fast %d late %d, the row has fast %d late %d", k[0], k[1], ar.Fast, ar.Late, val(r.FastValid), val(r.LateValid))
			}
		}
	}
	for k := range keys {
		if !seen[k] {
			t.Errorf("reconcile has no line for %s/%s", k[0], k[1])
		}
	}
	t.Logf("recount: %d (ad, hour) finals; reconciliation A = %d, B = %d", len(got), a, b)
	return got
}

// lakeObject is one Parquet object of the lake.
type lakeObject struct {
	key   string
	epoch int64
}

var objectName = regexp.MustCompile(`^hour=\d{4}-\d\d-\d\dT\d\d/part-[A-Za-z0-9_-]+-e(\d{12})\.parquet$`)

// lakeObjects lists the Parquet objects of store.
func lakeObjects(t *testing.T, store recount.Store) []lakeObject {
	t.Helper()
	var objs []lakeObject
	err := store.List(context.Background(), "hour=", "", func(key string) error {
		m := objectName.FindStringSubmatch(key)
		if m == nil {
			return fmt.Errorf("unexpected lake object %q", key)
		}
		e, _ := strconv.ParseInt(m[1], 10, 64)
		objs = append(objs, lakeObject{key: key, epoch: e})
		return nil
	})
	if err != nil {
		t.Fatalf("list the lake: %v", err)
	}
	return objs
}

// checkLakeHoldsEachLineOnce reads every lake object with parquet-go (not
// the recount's reader) and checks that the lake holds each line of the
// trace exactly once: as many rows as lines, no two rows of one line (a
// line is its click id, arrival time and raw payload: arrivals strictly
// increase in the trace, and a malformed line keeps its payload), and each
// row in the partition of its hour and carrying the epoch of its object's
// name.
func checkLakeHoldsEachLineOnce(t *testing.T, store recount.Store, ref finalRef) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]string{}
	total := 0
	for _, o := range lakeObjects(t, store) {
		b, err := store.Get(ctx, o.key)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := parquet.Read[recount.Row](bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("read %s: %v", o.key, err)
		}
		for _, r := range rs {
			total++
			if r.Epoch != o.epoch {
				t.Errorf("%s: a row of epoch %d", o.key, r.Epoch)
			}
			if p := recount.HourPrefix(r.EventHourMs); !strings.HasPrefix(o.key, p) {
				t.Errorf("%s: a row of hour %s", o.key, p)
			}
			id := r.ClickID + "|" + strconv.FormatInt(r.ArrivalMs, 10) + "|" + string(r.Raw)
			if prev, dup := seen[id]; dup {
				t.Errorf("line %q is in the lake twice: %s and %s", id, prev, o.key)
			}
			seen[id] = o.key
		}
	}
	if total != ref.lines {
		t.Errorf("the lake holds %d rows, want one per line of the trace: %d", total, ref.lines)
	}
}

// checkRef fails unless the trace exercises what the tests are about.
func checkRef(t *testing.T, ref finalRef) {
	t.Helper()
	if ref.beyond == 0 || ref.lostIDs == 0 || ref.dups == 0 || ref.valid == ref.lines {
		t.Fatalf("trace: %d beyond-horizon lines (%d ids lost), %d in-horizon duplicates, %d invalid lines: want some of each",
			ref.beyond, ref.lostIDs, ref.dups, ref.lines-ref.valid)
	}
}

func TestRecountIsExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTraceBeyond(t, trace, 8000, 31)
	ref := buildFinalReference(t, trace)
	checkRef(t, ref)
	data := filepath.Join(dir, "a")
	replay(t, trace, data)
	lake, err := recount.NewFolder(filepath.Join(data, "lake"))
	if err != nil {
		t.Fatal(err)
	}
	checkLakeHoldsEachLineOnce(t, lake, ref)
	recountAndCheck(t, data, ref)
}

// lakeEpochs returns the epochs of the lake's objects and manifests.
func lakeEpochs(t *testing.T, lakeDir string) (objects, manifests []int64) {
	t.Helper()
	lake, err := recount.NewFolder(lakeDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range lakeObjects(t, lake) {
		objects = append(objects, o.epoch)
	}
	ents, _ := os.ReadDir(filepath.Join(lakeDir, "_epochs"))
	for _, e := range ents {
		if v, err := strconv.ParseInt(strings.TrimPrefix(e.Name(), "e"), 10, 64); err == nil {
			manifests = append(manifests, v)
		}
	}
	return objects, manifests
}

func maxOf(vs []int64) int64 {
	m := int64(-1)
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// maxObjectEpoch returns the highest epoch of the Parquet objects under
// lakeDir (-1 if none), reading the folders directly: it runs while the job
// writes them.
func maxObjectEpoch(lakeDir string) int64 {
	m := int64(-1)
	hours, _ := os.ReadDir(lakeDir)
	for _, h := range hours {
		if !strings.HasPrefix(h.Name(), "hour=") {
			continue
		}
		objs, _ := os.ReadDir(filepath.Join(lakeDir, h.Name()))
		for _, o := range objs {
			if mm := objectName.FindStringSubmatch(h.Name() + "/" + o.Name()); mm != nil {
				e, _ := strconv.ParseInt(mm[1], 10, 64)
				m = max(m, e)
			}
		}
	}
	return m
}

// killDuringCheckpoint starts a replay on data and kills it (SIGKILL) while
// a checkpoint is under way: once the lake holds an object of an epoch ≥
// the newest complete checkpoint c ≥ 2 (a barrier flushed the lake, its
// checkpoint is not written yet). It reports whether the process died with
// lake objects of epochs ≥ that checkpoint on disk.
func killDuringCheckpoint(t *testing.T, trace, data string) bool {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"run", "--source", "file:" + trace, "--data", data}, runFlags...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("replay: %v\n%s", err, errb.String())
			}
			return false // finished before a kill point was seen
		default:
		}
		c := latestCkpt(t, data)
		if c >= 2 && maxObjectEpoch(filepath.Join(data, "lake")) >= c {
			cmd.Process.Kill()
			err := <-done
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				return false // it finished meanwhile
			}
			objs, _ := lakeEpochs(t, filepath.Join(data, "lake"))
			return maxOf(objs) >= latestCkpt(t, data)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

var removedLog = regexp.MustCompile(`lake_objects_removed=(\d+)`)

// TestRestoreRemovesLakeEpochs kills the job in the middle of a checkpoint
// (after the barrier flushed the lake, before the checkpoint was written),
// restarts it so that it restores and crashes after one record, and checks
// that the restore removed every lake object of epochs ≥ the restored
// checkpoint c; then it runs the job to the end and checks that the lake
// holds each record once, no object of an epoch the restored run did not
// make, and that the recount's finals equal those of a run without crashes
// and the count from the file.
func TestRestoreRemovesLakeEpochs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTraceBeyond(t, trace, 20000, 41)
	ref := buildFinalReference(t, trace)
	checkRef(t, ref)

	clean := filepath.Join(dir, "clean")
	replay(t, trace, clean)
	want := recountAndCheck(t, clean, ref)

	var data string
	var hit bool
	for attempt := 0; attempt < 10 && !hit; attempt++ {
		data = filepath.Join(dir, fmt.Sprintf("crash%d", attempt))
		hit = killDuringCheckpoint(t, trace, data)
	}
	if !hit {
		t.Fatalf("no kill landed between a barrier's lake flush and its checkpoint in 10 attempts")
	}
	lakeDir := filepath.Join(data, "lake")
	c, h := latestCkpt(t, data), readHigh(t, data)
	before, _ := lakeEpochs(t, lakeDir)
	t.Logf("killed with checkpoint %d complete, epoch high %d, lake object epochs up to %d", c, h, maxOf(before))

	// The restored run removes the lake objects of epochs ≥ c before any
	// output, and crashes after its first record (before its first barrier).
	cmd := exec.Command(binPath, append([]string{"run", "--source", "file:" + trace, "--data", data, "--fail-after-records", "1"},
		append(runFlags, "--log-level", "info")...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	var ee *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Fatalf("restart with --fail-after-records 1: %v, want exit 137\n%s", err, errb.String())
	}
	if got := latestCkpt(t, data); got != c {
		t.Fatalf("the restart completed checkpoint %d; the test needs it to stop before its first barrier", got)
	}
	var wantRemoved int
	for _, e := range before {
		if e >= c {
			wantRemoved++
		}
	}
	// The log counts the keys the manifests list, present or not (the kill
	// may have come before all of an epoch's objects were written).
	if m := removedLog.FindStringSubmatch(errb.String()); m == nil {
		t.Errorf("the restore did not log lake_objects_removed\n%s", errb.String())
	} else if n, _ := strconv.Atoi(m[1]); n < wantRemoved || wantRemoved == 0 {
		t.Errorf("restore log says lake_objects_removed=%d, want at least the %d objects of epochs ≥ %d", n, wantRemoved, c)
	}
	after, mans := lakeEpochs(t, lakeDir)
	for _, e := range append(after, mans...) {
		if e >= c {
			t.Errorf("after restoring checkpoint %d the lake still holds an object or manifest of epoch %d (objects %v, manifests %v)", c, e, after, mans)
		}
	}
	if len(after) != len(before)-wantRemoved {
		t.Errorf("after the restore the lake holds %d objects, want %d - %d", len(after), len(before), wantRemoved)
	}

	// Run to the end: epochs c+1..h were only the killed run's.
	replay(t, trace, data)
	final, _ := lakeEpochs(t, lakeDir)
	for _, e := range final {
		if e > c && e <= h {
			t.Errorf("the lake holds an object of epoch %d, which only the killed run used (restored %d, high %d)", e, c, h)
		}
	}
	lake, err := recount.NewFolder(lakeDir)
	if err != nil {
		t.Fatal(err)
	}
	checkLakeHoldsEachLineOnce(t, lake, ref)
	got := recountAndCheck(t, data, ref)
	compareFinals(t, got, want)
}

func compareFinals(t *testing.T, got, want finals) {
	t.Helper()
	keys := map[[2]string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var diff []string
	for k := range keys {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%s/%s: %+v after crashes, %+v without", k[0], k[1], got[k], want[k]))
		}
	}
	sort.Strings(diff)
	for _, d := range diff {
		t.Errorf("final differs: %s", d)
	}
}

// TestRecountAfterCrashes crashes the job at random records (one or two
// crashes, then a run to the end) and checks the lake and the finals.
func TestRecountAfterCrashes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	const clicks = 6000
	genTraceBeyond(t, trace, clicks, 13)
	ref := buildFinalReference(t, trace)
	checkRef(t, ref)
	clean := filepath.Join(dir, "clean")
	replay(t, trace, clean)
	want := recountAndCheck(t, clean, ref)
	for i, at := range [][]int{{4321}, {1500, 2500}, {5990}} {
		t.Run(fmt.Sprintf("crash_at_%v", at), func(t *testing.T) {
			data := filepath.Join(dir, fmt.Sprintf("run%d", i))
			forbidden := map[int64]bool{}
			for _, n := range at {
				code := runCode(t, append([]string{"run", "--source", "file:" + trace, "--data", data, "--fail-after-records", strconv.Itoa(n)}, runFlags...)...)
				if code != 137 {
					t.Fatalf("crash run at %d: exit %d, want 137", n, code)
				}
				c, h := latestCkpt(t, data), readHigh(t, data)
				for e := c + 1; e <= h; e++ {
					forbidden[e] = true
				}
			}
			replay(t, trace, data)
			objs, _ := lakeEpochs(t, filepath.Join(data, "lake"))
			for _, e := range objs {
				if forbidden[e] {
					t.Errorf("the lake holds an object of epoch %d, which only a crashed run used", e)
				}
			}
			lake, err := recount.NewFolder(filepath.Join(data, "lake"))
			if err != nil {
				t.Fatal(err)
			}
			checkLakeHoldsEachLineOnce(t, lake, ref)
			compareFinals(t, recountAndCheck(t, data, ref), want)
		})
	}
}
