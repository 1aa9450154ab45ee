package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

const cliHour int64 = 1_795_946_400_000 // 2026-11-29T10:00Z

// recountData makes a data directory with a lake (three clicks of ad_1 in
// hour 10, one a duplicate), the stream's hour row (fast 2) and a checkpoint
// whose watermark is wm.
func recountData(t *testing.T, wm int64) string {
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
	for _, r := range []latepath.Record{
		{Verdict: "counted", ClickID: "c1", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 2000, SpendMicros: 10, Shard: "S0"},
		{Verdict: "counted", ClickID: "c2", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 3000, SpendMicros: 20, Shard: "S1"},
		{Verdict: "duplicate", ClickID: "c2", AdID: "ad_1", CampaignID: "k", DeviceID: "d", ImpressionMs: cliHour + 1000, DeviceMs: cliHour + 1000, EventMs: cliHour + 1000, ArrivalMs: cliHour + 9000, SpendMicros: 20, Shard: "S1"},
	} {
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
	for id, m := range map[string]int64{"ckpt-000000000001": wm - 1000, "ckpt-000000000002": wm} {
		d := filepath.Join(data, "checkpoints", id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"id": 1, "watermark": m})
		if err := os.WriteFile(filepath.Join(d, "meta.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return data
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
