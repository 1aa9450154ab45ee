package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

const cliHour int64 = 1_795_946_400_000 // 2026-11-29T10:00Z

// recountData makes a data directory with a lake (three clicks of ad_1 in
// hour 10, one a duplicate), the stream's hour row (fast 2) and two
// checkpoints of a job with the default horizon and allowance, the newer
// one's watermark wm.
func recountData(t *testing.T, wm int64) string {
	t.Helper()
	return recountDataJob(t, wm, 7_200_000, 5_000)
}

// recountDataJob is recountData for a job with the given horizon and
// allowance. If the horizon is shorter than 1.5 h, the lake also holds a
// click that arrived 1.5 h after its impression, which the stream rejected
// as beyond it.
func recountDataJob(t *testing.T, wm, horizonMs, allowanceMs int64) string {
	t.Helper()
	ctx := context.Background()
	data := t.TempDir()
	lake, err := recount.NewFolder(filepath.Join(data, "lake"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := recount.NewWriter(lake, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	recs := []latepath.Record{
		{Verdict: "counted", ClickID: "c1", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 2000, SpendMicros: 10, Shard: "S0"},
		{Verdict: "counted", ClickID: "c2", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 3000, SpendMicros: 20, Shard: "S1"},
		{Verdict: "duplicate", ClickID: "c2", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 9000, SpendMicros: 20, Shard: "S1"},
	}
	if late := cliHour + 1000 + 5_400_000; late-allowanceMs-1-horizonMs > cliHour+1000 {
		recs = append(recs, latepath.Record{Verdict: "beyond_horizon", ClickID: "c3", AdID: "ad_1", CampaignID: "k", DeviceID: "d",
			ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: late, SpendMicros: 40, Shard: "S0"})
	}
	for _, r := range recs {
		w.Add(&r)
	}
	if err := w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st, err := embedded.Open(filepath.Join(data, "store"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Put(ctx, []sink.Put{{Key: sink.Key{Entity: "ad_1", Bucket: "H2026-11-29T10Z"}, Writer: sink.Fast, Valid: 2, SpendMicros: 30, Epoch: 1, Gen: 1}})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range map[int64]int64{1: wm - 1000, 2: wm} {
		writeCheckpoint(t, data, runtime.Meta{ID: id, JobGen: 1, Watermark: m, AllowanceMs: &allowanceMs,
			Settings: fmt.Sprintf("format=3 window_ms=60000 horizon_ms=%d max_parallelism=128 dedup=true", horizonMs)})
	}
	return data
}

// writeCheckpoint stores a checkpoint holding meta.json only in data's
// checkpoint store, as the job does (complete once its manifest is in).
func writeCheckpoint(t *testing.T, data string, m runtime.Meta) {
	t.Helper()
	st, err := ckptstore.NewLocal(data, ckptstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Upload(context.Background(), dir, m.ID, ckpt.Checkpoint); err != nil {
		t.Fatal(err)
	}
}

func storedFinal(t *testing.T, data string) sink.FinalAttrs {
	t.Helper()
	st, err := embedded.Open(filepath.Join(data, "store"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	it, _, err := st.Get(context.Background(), sink.Key{Entity: "ad_1", Bucket: "H2026-11-29T10Z"})
	if err != nil {
		t.Fatal(err)
	}
	return it.Final
}

func TestCmdRecountWritesFinalsAndReconciles(t *testing.T) {
	ready := recount.ReadyAt(cliHour, 7_200_000, 600_000)
	data := recountData(t, ready)
	var out, errb bytes.Buffer
	if err := cmdRecount(context.Background(), []string{"--hour", "2026-11-29T10Z", "--data", data, "--gen", "3", "--json"}, &out, &errb); err != nil {
		t.Fatalf("recount: %v\n%s", err, errb.String())
	}
	var res []recount.HourResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if len(res) != 1 || res[0].Status != "final" || !res[0].Balanced || len(res[0].Ads) != 1 {
		t.Fatalf("results %+v, want one final balanced hour with one ad", res)
	}
	a := res[0].Ads[0]
	if a.Fast != 2 || a.Final != 2 || a.FinalSpend != 30 || a.A != 0 || a.B != 0 {
		t.Errorf("ad_1: got %+v, want fast 2, final 2 (spend 30), A 0, B 0", a)
	}
	if f := storedFinal(t, data); f.Valid != 2 || f.SpendMicros != 30 || f.Gen != 3 || f.AtMs == 0 {
		t.Errorf("stored final %+v, want 2 clicks, 30 spend, gen 3, final_at set", f)
	}
	// An older generation is refused.
	out.Reset()
	err := cmdRecount(context.Background(), []string{"--hour", "2026-11-29T10Z", "--data", data, "--gen", "2"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "newer generation") {
		t.Errorf("older gen: got %v, want a refusal naming the newer generation", err)
	}
	// reconcile prints the table.
	out.Reset()
	if err := cmdReconcile(context.Background(), []string{"--from", "2026-11-29T10Z", "--to", "2026-11-29T10Z", "--data", data}, &out, &errb); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, s := range []string{"fast", "final", "balanced", "ad_1", "2026-11-29T10Z", "yes"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("reconcile table lacks %q:\n%s", s, out.String())
		}
	}
}

func TestCmdRecountRefusesHourNotFinal(t *testing.T) {
	ready := recount.ReadyAt(cliHour, 7_200_000, 600_000)
	data := recountData(t, ready-60_000)
	var out, errb bytes.Buffer
	err := cmdRecount(context.Background(), []string{"--hour", "2026-11-29T10Z", "--data", data}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "not final yet") || !strings.Contains(err.Error(), "1m0s to go") {
		t.Fatalf("got %v, want a not-final refusal with 1m0s to go", err)
	}
	if f := storedFinal(t, data); f.Present {
		t.Errorf("refused recount wrote %+v", f)
	}
	// --all-ready picks nothing; --force recounts.
	if err := cmdRecount(context.Background(), []string{"--all-ready", "--data", data}, &out, &errb); err != nil {
		t.Errorf("all-ready: %v", err)
	}
	if f := storedFinal(t, data); f.Present {
		t.Errorf("--all-ready wrote an hour that is not ready: %+v", f)
	}
	if err := cmdRecount(context.Background(), []string{"--all-ready", "--force", "--data", data}, &out, &errb); err != nil {
		t.Errorf("forced: %v", err)
	}
	if f := storedFinal(t, data); f.Valid != 2 {
		t.Errorf("forced final %+v, want 2", f)
	}
	// The watermark override.
	if err := cmdRecount(context.Background(), []string{"--hour", "2026-11-29T10Z", "--data", data, "--watermark", "2026-11-29T13:10:00Z", "--gen", "4"}, &out, &errb); err != nil {
		t.Errorf("--watermark at the ready time: %v", err)
	}
	for _, args := range [][]string{{"--data", data}, {"--hour", "10", "--data", data}, {"--hour", "2026-11-29T10Z", "--all-ready", "--data", data}} {
		if err := cmdRecount(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%v: got nil error, want a usage error", args)
		}
	}
}

// TestCmdRecountJudgesWithTheJobsSettings: the job ran with a 1 h horizon
// and no allowance, recorded in its checkpoints. recount and reconcile use
// them without being told (a click 1.5 h late stays rejected, final 2);
// --horizon-ms or --allowance-ms that differ, on the command line or in
// the environment, are refused naming both values, unless
// --force-settings. (They used to judge with the flags' defaults, write
// final 3 and report the hour balanced.)
func TestCmdRecountJudgesWithTheJobsSettings(t *testing.T) {
	ready := recount.ReadyAt(cliHour, 7_200_000, 600_000) // final under either horizon
	data := recountDataJob(t, ready, 3_600_000, 0)
	ctx := context.Background()
	recountJSON := func(t *testing.T, args ...string) ([]recount.HourResult, error) {
		t.Helper()
		var out, errb bytes.Buffer
		err := cmdRecount(ctx, append([]string{"--hour", "2026-11-29T10Z", "--data", data, "--json"}, args...), &out, &errb)
		if err != nil {
			return nil, err
		}
		var res []recount.HourResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("json: %v\n%s", err, out.String())
		}
		return res, nil
	}

	res, err := recountJSON(t, "--gen", "1")
	if err != nil {
		t.Fatalf("recount with the job's settings: %v", err)
	}
	if len(res) != 1 || len(res[0].Ads) != 1 || res[0].Ads[0].Final != 2 || res[0].Ads[0].B != 0 || !res[0].Balanced {
		t.Fatalf("recount: got %+v, want ad_1 final 2, B 0, balanced (the 1.5 h click beyond the job's 1 h horizon)", res)
	}
	if f := storedFinal(t, data); f.Valid != 2 {
		t.Errorf("stored final %d, want 2", f.Valid)
	}

	// The job's values given explicitly are fine.
	if _, err := recountJSON(t, "--gen", "2", "--horizon-ms", "3600000", "--allowance-ms", "0"); err != nil {
		t.Errorf("recount with the job's values as flags: %v", err)
	}

	// Other values are refused, each naming the flag's and the job's.
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"horizon_flag", []string{"--horizon-ms", "7200000"}, nil, []string{"--horizon-ms 7200000 differs from the job's 3600000", "checkpoint 2", "--force-settings"}},
		{"allowance_flag", []string{"--allowance-ms", "5000"}, nil, []string{"--allowance-ms 5000 differs from the job's 0"}},
		{"both", []string{"--horizon-ms", "7200000", "--allowance-ms", "5000"}, nil, []string{"--horizon-ms 7200000 differs", "--allowance-ms 5000 differs"}},
		{"horizon_env", nil, map[string]string{"ADCLICK_RECOUNT_HORIZON_MS": "7200000", "ADCLICK_RECONCILE_HORIZON_MS": "7200000"}, []string{"--horizon-ms 7200000 differs from the job's 3600000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := recountJSON(t, append([]string{"--gen", "3"}, tc.args...)...)
			if err == nil {
				t.Fatalf("got no error, want a refusal naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			var out, errb bytes.Buffer
			err = cmdReconcile(ctx, append([]string{"--hour", "2026-11-29T10Z", "--data", data}, tc.args...), &out, &errb)
			if err == nil || !strings.Contains(err.Error(), tc.want[0]) {
				t.Errorf("reconcile: got %v, want a refusal naming %q", err, tc.want[0])
			}
		})
	}
	if f := storedFinal(t, data); f.Valid != 2 || f.Gen != 2 {
		t.Errorf("refused recounts wrote %+v, want final 2 of gen 2", f)
	}

	// Forced, the flags win: the 1.5 h click is accepted (B 1, final 3).
	res, err = recountJSON(t, "--gen", "4", "--horizon-ms", "7200000", "--force-settings")
	if err != nil {
		t.Fatalf("forced: %v", err)
	}
	if a := res[0].Ads[0]; a.Final != 3 || a.B != 1 {
		t.Errorf("forced: got %+v, want final 3, B 1", a)
	}
}

// TestCmdRecountTakesTheStoresLatestCheckpoint: the recount reads the job's
// latest checkpoint as the checkpoint store defines it. A newer checkpoint
// directory without its manifest (an upload that never completed, which a
// restore would not use either) is not taken, though its meta.json would
// make the hour final; once stored completely, it is. A data directory
// without checkpoints gets none created.
func TestCmdRecountTakesTheStoresLatestCheckpoint(t *testing.T) {
	ctx := context.Background()
	ready := recount.ReadyAt(cliHour, 7_200_000, 600_000)
	data := recountData(t, ready-60_000) // checkpoints 1 and 2, the hour 1 min short of final
	allowanceMs := int64(5_000)
	newer := runtime.Meta{ID: 3, JobGen: 1, Watermark: ready, AllowanceMs: &allowanceMs,
		Settings: "format=3 window_ms=60000 horizon_ms=7200000 max_parallelism=128 dedup=true"}
	st, err := ckptstore.NewLocal(data, ckptstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	partial := st.Dir(3, ckpt.Checkpoint)
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "meta.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	id, ok, err := st.Latest(ctx, ckpt.Checkpoint)
	if err != nil || !ok || id != 2 {
		t.Fatalf("store: Latest got %d, %v, %v; want checkpoint 2", id, ok, err)
	}
	ck, _, err := latestCheckpoint(ctx, "", data)
	if err != nil || ck == nil || ck.meta.ID != id || ck.meta.Watermark != ready-60_000 || ck.where != st.Dir(2, ckpt.Checkpoint) {
		t.Fatalf("recount: latest checkpoint %+v, %v; want the store's, checkpoint %d at %s", ck, err, id, st.Dir(2, ckpt.Checkpoint))
	}
	var out, errb bytes.Buffer
	err = cmdRecount(ctx, []string{"--hour", "2026-11-29T10Z", "--data", data}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "1m0s to go") {
		t.Fatalf("with checkpoint 3 incomplete: got %v, want the hour not final by checkpoint 2's watermark (1m0s to go)", err)
	}

	// Completed, checkpoint 3 is the latest for both.
	if err := os.RemoveAll(partial); err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, data, newer)
	if id, _, _ := st.Latest(ctx, ckpt.Checkpoint); id != 3 {
		t.Fatalf("store: Latest got %d, want 3", id)
	}
	if ck, _, err := latestCheckpoint(ctx, "", data); err != nil || ck == nil || ck.meta.ID != 3 {
		t.Fatalf("recount: latest checkpoint %+v, %v; want 3", ck, err)
	}
	if err := cmdRecount(ctx, []string{"--hour", "2026-11-29T10Z", "--data", data}, &out, &errb); err != nil {
		t.Fatalf("with checkpoint 3 complete: %v", err)
	}

	// No checkpoints folder: none is found, and none is created.
	empty := t.TempDir()
	ck, where, err := latestCheckpoint(ctx, "", empty)
	if err != nil || ck != nil || where != filepath.Join(empty, "checkpoints") {
		t.Errorf("empty data dir: got %+v, %q, %v; want no checkpoint in %s", ck, where, err, filepath.Join(empty, "checkpoints"))
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("reading the checkpoints of an empty data dir created %d entries", len(ents))
	}
}

// TestCmdRecountHourRangeIsAUsageError: a range recount.SelectHours
// refuses exits 2, naming the hours.
func TestCmdRecountHourRangeIsAUsageError(t *testing.T) {
	data := recountData(t, recount.ReadyAt(cliHour, 7_200_000, 600_000))
	for _, args := range [][]string{
		{"--from", "2026-11-29T12Z", "--to", "2026-11-29T10Z"},
		{"--from", "2026-11-29T10Z", "--to", "2027-12-01T10Z"},
	} {
		var out, errb bytes.Buffer
		code := realMain(append([]string{"reconcile", "--data", data}, args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "want hour starts, from <= to, at most a year apart") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the range refused", args, code, errb.String())
		}
	}
}
