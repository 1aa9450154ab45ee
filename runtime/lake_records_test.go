package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/recount"
)

// TestLakeKeepsPositionsAndRawText: every lake row carries its source
// position (counted and duplicate rows had none, although the recount's
// tie-break uses it), and every invalid record keeps its payload as read —
// also one that parses but fails validation, which used to be logged as
// decoded (a string spend as 0) with no raw text — including bytes that are
// not UTF-8.
func TestLakeKeepsPositionsAndRawText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	const at = "1795687200000"
	lines := []string{
		`{"click_id":"a","ad_id":"ad","campaign_id":"k","device_id":"d","impression_ms":` + at + `,"device_ms":` + at + `,"spend_micros":5,"shard":"s","arrival_ms":` + at + `}`,
		`{"click_id":"a","ad_id":"ad","campaign_id":"k","device_id":"d","impression_ms":` + at + `,"device_ms":` + at + `,"spend_micros":5,"shard":"s","arrival_ms":` + at + `}`,
		`{"click_id":"b","ad_id":"ad","campaign_id":"k","device_id":"d","impression_ms":` + at + `,"device_ms":` + at + `,"spend_micros":"100","shard":"s","arrival_ms":` + at + `}`,
		"{\"click_id\":\"c\xff\xfe\"}",
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runToEnd(t, replayConfig(dir, path)).Close()
	lake, err := recount.NewFolder(filepath.Join(dir, "lake"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []recount.Row
	err = recount.Hours(context.Background(), lake, 0, func(h int64) error {
		return recount.ReadHour(context.Background(), lake, h, func(r *recount.Row) error { rows = append(rows, *r); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[string]recount.Row{}
	for _, r := range rows {
		if r.Seq == "" {
			t.Errorf("%s row of %q has no position", r.Verdict, r.ClickID)
		}
		bySeq[r.Seq] = r
	}
	if len(rows) != len(lines) || len(bySeq) != len(lines) {
		t.Fatalf("lake: %d rows with %d distinct positions, want %d of each: %+v", len(rows), len(bySeq), len(lines), rows)
	}
	verdicts := map[string]int{}
	for _, r := range rows {
		verdicts[r.Verdict]++
		if strings.HasPrefix(r.Verdict, "invalid:") && len(r.Raw) == 0 {
			t.Errorf("invalid row %q keeps no raw payload", r.Verdict)
		}
		if strings.Contains(string(r.Raw), `"spend_micros":"100"`) && !strings.HasPrefix(r.Verdict, "invalid:") {
			t.Errorf("the string-spend line has verdict %q", r.Verdict)
		}
	}
	if verdicts["counted"] != 1 || verdicts["duplicate"] != 1 {
		t.Fatalf("verdicts %v, want one counted and one duplicate", verdicts)
	}
	var sawString, sawBytes bool
	for _, r := range rows {
		sawString = sawString || strings.Contains(string(r.Raw), `"spend_micros":"100"`)
		sawBytes = sawBytes || strings.Contains(string(r.Raw), "\xff\xfe")
	}
	if !sawString || !sawBytes {
		t.Fatalf("raw payloads kept: string-spend line %v, non-UTF-8 line %v; want both", sawString, sawBytes)
	}
}
