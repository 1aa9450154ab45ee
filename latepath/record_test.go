package latepath

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonRecord mirrors the exceptions-log line for decoding.
type jsonRecord struct {
	Verdict      string  `json:"verdict"`
	ClickID      string  `json:"click_id"`
	AdID         string  `json:"ad_id"`
	CampaignID   string  `json:"campaign_id"`
	DeviceID     string  `json:"device_id"`
	ImpressionMs int64   `json:"impression_ms"`
	DeviceMs     int64   `json:"device_ms"`
	EventMs      int64   `json:"event_ms"`
	ArrivalMs    int64   `json:"arrival_ms"`
	SpendMicros  int64   `json:"spend_micros"`
	Shard        string  `json:"shard"`
	Seq          string  `json:"seq"`
	Raw          *string `json:"raw"`
}

// wantString is what a string must decode to: invalid UTF-8 bytes become
// U+FFFD, everything else is kept.
func wantString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func checkRoundtrip(t *testing.T, r *Record) {
	t.Helper()
	prefix := []byte("prefix")
	b := AppendJSON(prefix, r)
	if string(b[:len(prefix)]) != "prefix" {
		t.Fatalf("AppendJSON overwrote dst")
	}
	b = b[len(prefix):]
	if !json.Valid(b) {
		t.Fatalf("AppendJSON(%+v) = %q: not valid JSON", r, b)
	}
	if strings.ContainsAny(string(b), "\n\r") {
		t.Fatalf("AppendJSON output holds a raw newline: %q", b)
	}
	var got jsonRecord
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal(%q): %v", b, err)
	}
	raw := r.Raw
	if len(raw) > MaxRaw {
		raw = raw[:MaxRaw]
	}
	want := jsonRecord{wantString(r.Verdict), wantString(r.ClickID), wantString(r.AdID), wantString(r.CampaignID),
		wantString(r.DeviceID), r.ImpressionMs, r.DeviceMs, r.EventMs, r.ArrivalMs, r.SpendMicros,
		wantString(r.Shard), wantString(r.Seq), nil}
	if raw != "" {
		w := wantString(raw)
		want.Raw = &w
	}
	if (got.Raw == nil) != (want.Raw == nil) || (got.Raw != nil && *got.Raw != *want.Raw) {
		t.Fatalf("raw: got %v, want %v", got.Raw, want.Raw)
	}
	got.Raw, want.Raw = nil, nil
	if got != want {
		t.Fatalf("roundtrip:\n got %+v\nwant %+v", got, want)
	}
}

func TestAppendJSON(t *testing.T) {
	tests := []Record{
		{},
		{Verdict: VerdictCounted, ClickID: "c1", AdID: "ad_7", CampaignID: "camp", DeviceID: "d", ImpressionMs: 1, DeviceMs: -5,
			EventMs: 1 << 62, ArrivalMs: 9, SpendMicros: 1_000_000, Shard: "shardId-000", Seq: "4959"},
		{Verdict: InvalidPrefix + "bad_utf8:click_id", ClickID: "a\"b\\c\x00\x01\x1f\t\n\r", AdID: "\u2028\u2029é日本"},
		{Verdict: VerdictLate, ClickID: "\xff\xfe", AdID: "a\xc3", DeviceID: "\xed\xa0\x80"},
		{Verdict: "invalid:malformed_json", Raw: `{"click_id": "x", ` + "\x00\xff"},
		{Verdict: "invalid:malformed_json", Raw: strings.Repeat("x", MaxRaw+100)},
		{Verdict: "invalid:malformed_json", Raw: strings.Repeat("é", MaxRaw)}, // cut inside a rune
	}
	for _, r := range tests {
		checkRoundtrip(t, &r)
	}
	if got := string(AppendJSON(nil, &Record{Verdict: "x"})); !strings.HasPrefix(got, `{"verdict":"x","click_id":""`) || strings.Contains(got, `"raw"`) {
		t.Fatalf("got %s", got)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("counted", "c1", "ad_7", "\x00\"\\", "\xff", int64(1), int64(-1), "")
	f.Add("late", "\u2028", "日本", "", "a\xc3", int64(0), int64(1<<62), "{\"raw")
	f.Fuzz(func(t *testing.T, verdict, click, ad, dev, shard string, imp, dms int64, raw string) {
		checkRoundtrip(t, &Record{Verdict: verdict, ClickID: click, AdID: ad, CampaignID: ad + click, DeviceID: dev,
			ImpressionMs: imp, DeviceMs: dms, EventMs: imp ^ dms, ArrivalMs: -imp, SpendMicros: dms, Shard: shard, Seq: click, Raw: raw})
	})
}
