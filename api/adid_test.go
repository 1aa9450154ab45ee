package api

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/sink"
)

// ingestAccepts reports whether ingest.Decode accepts id as the ad_id of an
// otherwise valid click, and checks that it then decodes to id itself. The
// id is written into the JSON line with only '"', '\\' and control
// characters escaped, so bytes that are not UTF-8 reach the decoder as they
// are (a producer can send them; ingest must say bad_utf8:ad_id).
func ingestAccepts(t *testing.T, id string) bool {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"click_id":"c1","ad_id":"`)
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`","campaign_id":"cmp","device_id":"dev","impression_ms":1,"device_ms":1,"spend_micros":1}`)
	var c ingest.Click
	r := ingest.Decode([]byte(b.String()), &c)
	switch r {
	case "":
		if c.AdID != id {
			t.Fatalf("ingest decoded ad_id %q as %q", id, c.AdID)
		}
		return true
	case ingest.BadUTF8("ad_id"), ingest.IDTooLong("ad_id"), ingest.MissingField("ad_id"):
		return false
	}
	t.Fatalf("ingest refused ad_id %q for another reason: %s", id, r)
	return false
}

// adServed asks the API for the id's hour row and reports whether the id
// was accepted (the answer is the row, or 404 unknown_ad) rather than
// refused (400 bad_ad, or no route).
func adServed(t *testing.T, s *Server, id string) (bool, *http.Response, []byte) {
	t.Helper()
	rec := do(t, s, "GET", "/v1/ads/"+url.PathEscape(id)+"/hours/2026-11-29T09Z", "", "")
	if rec.Code == http.StatusOK {
		return true, rec.Result(), rec.Body.Bytes()
	}
	var eb ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
		t.Fatalf("ad %q: answer %d is not an error body: %s", id, rec.Code, rec.Body.String())
	}
	return eb.Error.Code == codeUnknownAd, rec.Result(), rec.Body.Bytes()
}

// TestAPIServesEveryAdIDIngestAccepts stores rows under ad ids that ingest
// accepts (spaces, '/', '%', quotes, non-ASCII, control characters, 256
// bytes) and reads each back through the API, its id percent-escaped in
// the path.
func TestAPIServesEveryAdIDIngestAccepts(t *testing.T) {
	ids := []string{
		"ad 7", "ad/7", "a%2Fb", "100%", "é ü 中文 🎉", `quo"te\back`, "ad\n7", "nul\x00", "bell\a", "del\x7f",
		"?q=1&x#frag", "+plus+", ";semi;", "line\u2028sep", "\ufffd", strings.Repeat("é", 128), strings.Repeat("x", 256),
	}
	f := newFakeJob(t)
	var puts []sink.Put
	for _, id := range ids {
		if !ingestAccepts(t, id) {
			t.Fatalf("test id %q: ingest refuses it", id)
		}
		puts = append(puts, sink.Put{Key: sink.Key{Entity: id, Bucket: sink.HourBucket(ms(t, "2026-11-29T09:00:00Z"))},
			Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 30, Gen: 7})
	}
	if _, err := f.rows.Put(t.Context(), puts); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, f, Options{AdminToken: adminTok})
	for _, id := range ids {
		ok, resp, body := adServed(t, s, id)
		if !ok || resp.StatusCode != http.StatusOK {
			t.Errorf("ad %q (path %s): got %d %s, want 200", id, url.PathEscape(id), resp.StatusCode, body)
			continue
		}
		var row HourRow
		if err := json.Unmarshal(body, &row); err != nil {
			t.Fatalf("ad %q: %v", id, err)
		}
		if row.Ad != id || row.Stream.Valid != 5 {
			t.Errorf("ad %q: got row for %q with valid %d, want the stored row (valid 5)", id, row.Ad, row.Stream.Valid)
		}
	}
}

// TestAdIDRuleMatchesIngest compares the API's answer with ingest.Decode's
// verdict over many generated ids: the API accepts exactly the ad ids that
// ingest accepts.
func TestAdIDRuleMatchesIngest(t *testing.T) {
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok})
	rng := rand.New(rand.NewPCG(7, 11))
	pieces := []string{"a", "Z", "0", " ", "/", "%", "%2F", "?", "#", "\x00", "\x07", "\n", "\x1f", "\x7f", "\"", "\\",
		"é", "中", "🎉", "\u2028", "\ufffd", "\xff", "\xc3", "\xed\xa0\x80", "\U0010ffff"}
	ids := []string{"", "x", strings.Repeat("x", ingest.MaxIDBytes), strings.Repeat("x", ingest.MaxIDBytes+1),
		strings.Repeat("é", ingest.MaxIDBytes/2), strings.Repeat("é", ingest.MaxIDBytes/2) + "x"}
	for range 3000 {
		var b strings.Builder
		n := rng.IntN(12)
		if rng.IntN(10) == 0 {
			n = 60 + rng.IntN(40) // around the length limit
		}
		for range n {
			switch rng.IntN(4) {
			case 0:
				b.WriteByte(byte(rng.IntN(256)))
			case 1:
				b.WriteRune(rune(rng.IntN(utf8.MaxRune + 1)))
			default:
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
		}
		ids = append(ids, b.String())
	}
	accepted := 0
	for _, id := range ids {
		want := ingestAccepts(t, id)
		got, resp, body := adServed(t, s, id)
		if got != want {
			t.Errorf("ad %q (%d bytes): API accepts it = %v (%d %s), ingest accepts it = %v", id, len(id), got, resp.StatusCode, body, want)
		}
		if want {
			accepted++
		}
	}
	if accepted < len(ids)/4 || accepted > len(ids)*3/4 {
		t.Errorf("ingest accepted %d of %d generated ids; want a mix", accepted, len(ids))
	}
}
