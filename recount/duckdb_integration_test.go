//go:build integration

package recount

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
)

// TestDuckDBReadsLake opens lake objects with DuckDB (installed from the npm
// registry by scripts/test.sh into scripts/duckdb), a Parquet reader
// independent of parquet-go, and checks the documented schema (SchemaDoc:
// names, physical types, all required) and the rows.
func TestDuckDBReadsLake(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "scripts", "duckdb", "read-parquet.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@duckdb", "node-api")); err != nil {
		t.Fatalf("DuckDB is not installed (%v): run ./scripts/test.sh, which installs it with npm ci in scripts/duckdb", err)
	}
	dir := t.TempDir()
	st, err := NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := genLines(t, 5000, 3, 100)
	simulateStream(t, st, lines, 1000, 1)
	var keys []string
	if err := st.List(context.Background(), "hour=", "", func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	var files []string
	var wantRows, wantSpend int64
	ids := map[string]bool{}
	for _, k := range keys {
		files = append(files, filepath.Join(dir, filepath.FromSlash(k)))
	}
	for _, h := range hoursOf(t, st) {
		if err := ReadHour(context.Background(), st, h, func(r *Row) error {
			wantRows++
			wantSpend += r.SpendMicros
			ids[r.ClickID] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if int(wantRows) != len(lines) {
		t.Fatalf("the lake holds %d rows, want %d", wantRows, len(lines))
	}
	cmd := exec.Command("node", append([]string{script}, files...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("duckdb: %v\n%s", err, stderr)
	}
	var got struct {
		Columns []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Nullable bool   `json:"nullable"`
		} `json:"columns"`
		Rows  int64 `json:"rows"`
		Spend int64 `json:"spend"`
		IDs   int   `json:"ids"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("duckdb output %s: %v", out, err)
	}
	// The documented schema: the first two words of each SchemaDoc line.
	var want []string
	for _, l := range strings.Split(SchemaDoc, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[1] == "BYTE_ARRAY" || f[1] == "INT64") {
			want = append(want, f[0]+" "+f[1])
		}
	}
	var have []string
	for _, c := range got.Columns {
		have = append(have, c.Name+" "+c.Type)
		if c.Nullable {
			t.Errorf("column %s is nullable, want required", c.Name)
		}
	}
	if strings.Join(have, ",") != strings.Join(want, ",") {
		t.Errorf("DuckDB sees columns\n  %v\nwant (SchemaDoc)\n  %v", have, want)
	}
	if got.Rows != wantRows || got.Spend != wantSpend || got.IDs != len(ids) {
		t.Errorf("DuckDB reads %d rows, spend %d, %d distinct ids; want %d, %d, %d", got.Rows, got.Spend, got.IDs, wantRows, wantSpend, len(ids))
	}
}

func hoursOf(t *testing.T, st Store) []int64 {
	t.Helper()
	var hs []int64
	if err := Hours(context.Background(), st, 0, func(h int64) error { hs = append(hs, h); return nil }); err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestDuckDBReadsNonUTF8Raw: the raw payload of an invalid record is kept
// as bytes, so a payload that is not UTF-8 does not make DuckDB refuse the
// lake object (it did while raw was a STRING column).
func TestDuckDBReadsNonUTF8Raw(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "scripts", "duckdb", "read-parquet.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := NewFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs := []latepath.Record{
		rec("counted", "c1", "ad_1", h10+1000, h10+1500, h10+2000, 123),
		rec("invalid:malformed_json", "", "", 0, 0, h10+3000, 0),
	}
	rs[1].Raw = "{\"click_id\":\"\xff\xfe"
	writeLake(t, st, 7, rs...)
	out, err := exec.Command("node", script, filepath.Join(dir, filepath.FromSlash(ObjectKey(h10, "preagg-0", 7)))).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("duckdb refused the object: %v\n%s", err, stderr)
	}
	var got struct {
		Rows     int64 `json:"rows"`
		RawBytes int64 `json:"raw_bytes"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("duckdb output %s: %v", out, err)
	}
	if got.Rows != 2 || got.RawBytes != int64(len(rs[1].Raw)) {
		t.Fatalf("duckdb reads %d rows and %d raw bytes, want 2 and %d", got.Rows, got.RawBytes, len(rs[1].Raw))
	}
}
