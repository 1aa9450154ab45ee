package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
)

// awkwardIDs are ad ids that Go-syntax quoting (strconv.Quote) writes as
// something that is not JSON (\a, \x00, \v, \U...), plus quotes,
// backslashes, non-ASCII and invalid UTF-8.
var awkwardIDs = []string{
	"ad_7",
	"bell\a",
	"nul\x00byte",
	"tab\tnl\nvt\vff\fcr\rbs\b",
	"esc\x1bdel\x7f",
	`quote"back\slash`,
	"slash/and space",
	"é ü 中文 🎉",
	"line\u2028sep\u2029",
	"tag\U000E0041char",   // not printable: strconv.Quote writes \U000e0041
	"soft\u00adhyphen",    // not printable: strconv.Quote writes \u00ad
	"bad\xffutf8\xc3(",    // invalid UTF-8
	"<html>&amp;",         // encoding/json's default would escape these; rows keeps them
	"lone\xed\xa0\x80sur", // a UTF-8 encoded surrogate: invalid UTF-8
}

// viaEncodingJSON returns s after a round trip through encoding/json: s
// itself when it is valid UTF-8, else s with each invalid byte replaced by
// U+FFFD.
func viaEncodingJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRowsPrintsJSON checks that every line of "adclick rows" is valid JSON
// whose entity is the stored ad id, for ids with control characters,
// quotes, backslashes and non-ASCII; invalid UTF-8 comes out with each bad
// byte replaced by U+FFFD, as encoding/json does.
func TestRowsPrintsJSON(t *testing.T) {
	dir := t.TempDir()
	st, err := embedded.Open(filepath.Join(dir, "store"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var puts []sink.Put
	for _, id := range awkwardIDs {
		puts = append(puts, sink.Put{Key: sink.Key{Entity: id, Bucket: "H2026-11-29T09Z"}, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 4, Gen: 1},
			sink.Put{Key: sink.Key{Entity: id, Bucket: "H2026-11-29T09Z"}, Writer: sink.Late, Valid: 1, SpendMicros: 10, Epoch: 5, Gen: 1})
	}
	ctx := context.Background()
	if _, err := st.Put(ctx, puts); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutFinal(ctx, []sink.FinalPut{{Key: sink.Key{Entity: "nul\x00byte", Bucket: "H2026-11-29T09Z"}, Valid: 4, SpendMicros: 40, Gen: 1, AtMs: 17}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := cmdRows(ctx, []string{"--data", dir}, &out, &errb); err != nil {
		t.Fatalf("rows: %v\nstderr:\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(awkwardIDs) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(awkwardIDs), out.String())
	}
	want := map[string]bool{}
	for _, id := range awkwardIDs {
		want[viaEncodingJSON(t, id)] = true
	}
	for i, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("line %d is not valid JSON: %s", i+1, l)
			continue
		}
		var r struct {
			Entity     string `json:"entity"`
			Bucket     string `json:"bucket"`
			FastValid  *int64 `json:"fast_valid"`
			LateValid  *int64 `json:"late_valid"`
			FastIx     string `json:"fast_ix"`
			FinalValid *int64 `json:"final_valid"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Errorf("line %d: %v", i+1, err)
			continue
		}
		if !want[r.Entity] {
			t.Errorf("line %d: entity %q is not one of the stored ids", i+1, r.Entity)
		}
		delete(want, r.Entity)
		if r.Bucket != "H2026-11-29T09Z" || r.FastValid == nil || *r.FastValid != 3 || r.LateValid == nil || *r.LateValid != 1 || r.FastIx == "" {
			t.Errorf("line %d: got %s, want bucket, fast_valid 3, late_valid 1 and fast_ix", i+1, l)
		}
		if (r.Entity == "nul\x00byte") != (r.FinalValid != nil) {
			t.Errorf("line %d: final_valid %v on entity %q, want it only on the final row", i+1, r.FinalValid, r.Entity)
		}
	}
	for id := range want {
		t.Errorf("entity %q missing from the output", id)
	}
}
