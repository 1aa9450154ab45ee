package sink

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// awkwardStrings are strings that Go-syntax quoting (strconv.Quote) writes
// as something that is not JSON, or that JSON writers disagree on.
var awkwardStrings = []string{
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

// TestAppendJSONStringMatchesEncodingJSON compares appendString with
// encoding/json (HTML escaping off) over awkward and random strings.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := append([]string{""}, awkwardStrings...)
	pieces := []string{"a", "\x00", "\x1f", "\x7f", "\"", "\\", "/", "\u2028", "\u2029", "é", "🎉", "\xff", "\xc3", "\xed\xa0\x80", "<", ">", "&", "\ufffd", "\U000E0041"}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(3) == 0 {
				b.WriteByte(byte(rng.IntN(256)))
			} else {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := appendString([]byte("x"), s)
		if string(got) != "x"+strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("appendString(%q): got %s, want %s", s, got[1:], want.String())
		}
	}
}
