package ingest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// benchClick is a realistic click of about 250 bytes: UUID ids, the seven
// fields of the contract, and two unknown fields a producer might add.
const benchClick = `{"click_id":"5b0e8c1e-3f0a-4d2b-9a57-1c9e0b7d4f21","ad_id":"ad_7",` +
	`"campaign_id":"cmp_winter","device_id":"a4f1c2d9-77b3-4e0f-8c21-90d5e6f7a8b3",` +
	`"impression_ms":1795947235000,"device_ms":1795947245000,"spend_micros":1250000,` +
	`"placement":"feed","sdk":{"v":[4,2]}}`

// validClick returns a minimal valid click object with extra members
// appended (each extra is `"key":value`).
func validClick(extra ...string) string {
	parts := []string{
		`"click_id":"c1"`, `"ad_id":"ad_7"`, `"campaign_id":"cmp_1"`, `"device_id":"dev_1"`,
		`"impression_ms":1000`, `"device_ms":2000`, `"spend_micros":30`,
	}
	return "{" + strings.Join(append(parts, extra...), ",") + "}"
}

func TestDecodeRealistic(t *testing.T) {
	if n := len(benchClick); n < 230 || n > 270 {
		t.Fatalf("benchClick is %d bytes, want about 250", n)
	}
	var c Click
	if r := Decode([]byte(benchClick), &c); r != "" {
		t.Fatalf("Decode: got reason %q, want valid", r)
	}
	want := Click{
		ClickID:      "5b0e8c1e-3f0a-4d2b-9a57-1c9e0b7d4f21",
		AdID:         "ad_7",
		CampaignID:   "cmp_winter",
		DeviceID:     "a4f1c2d9-77b3-4e0f-8c21-90d5e6f7a8b3",
		ImpressionMs: 1795947235000,
		DeviceMs:     1795947245000,
		SpendMicros:  1250000,
	}
	if c != want {
		t.Fatalf("Decode:\n got %+v\nwant %+v", c, want)
	}
}

func TestDecodeFileLine(t *testing.T) {
	line := validClick(`"shard":"shardId-000000000001"`, `"arrival_ms":2500`)
	var c Click
	if r := Decode([]byte(line), &c); r != "" {
		t.Fatalf("Decode: got reason %q, want valid", r)
	}
	if c.Shard != "shardId-000000000001" || c.ArrivalMs != 2500 || !c.HasArrival {
		t.Fatalf("got shard %q arrival %d has %v, want shardId-000000000001 2500 true", c.Shard, c.ArrivalMs, c.HasArrival)
	}
	if r := c.FinishLine(); r != "" {
		t.Fatalf("FinishLine: got %q, want valid", r)
	}
	if c.EventMs != 2000 {
		t.Fatalf("EventMs: got %d, want 2000", c.EventMs)
	}
}

// TestDecodeValues checks decoded values for inputs that exercise the
// scanner: whitespace, key order, escapes, Unicode, duplicates, null.
func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		check func(c *Click) (got, want any)
	}{
		{"whitespace everywhere", " \t\r\n{ \"click_id\" : \"c1\" ,\n\"ad_id\":\"a\",\"campaign_id\":\"k\",\"device_id\":\"d\",\"impression_ms\" :\t5 ,\"device_ms\": 6,\"spend_micros\":0 } \n",
			func(c *Click) (any, any) {
				return [3]int64{c.ImpressionMs, c.DeviceMs, c.SpendMicros}, [3]int64{5, 6, 0}
			}},
		{"reverse key order", `{"spend_micros":7,"device_ms":6,"impression_ms":5,"device_id":"d","campaign_id":"k","ad_id":"a","click_id":"c"}`,
			func(c *Click) (any, any) {
				return []string{c.ClickID, c.AdID, c.CampaignID, c.DeviceID}, []string{"c", "a", "k", "d"}
			}},
		{"simple escapes", validClick(`"click_id":"a\"b\\c\/d\b\f\n\r\t"`),
			func(c *Click) (any, any) { return c.ClickID, "a\"b\\c/d\b\f\n\r\t" }},
		{"unicode escapes", validClick(`"ad_id":"\u0041\u00e9\u20AC\u0000"`),
			func(c *Click) (any, any) { return c.AdID, "Aé€\x00" }},
		{"surrogate pair", validClick(`"device_id":"x\ud83d\ude00y"`),
			func(c *Click) (any, any) { return c.DeviceID, "x😀y" }},
		{"raw utf8", validClick(`"campaign_id":"kampagne-größe-😀"`),
			func(c *Click) (any, any) { return c.CampaignID, "kampagne-größe-😀" }},
		{"escaped key", validClick(`"click\u005fid":"viaescape"`),
			func(c *Click) (any, any) { return c.ClickID, "viaescape" }},
		{"duplicate key last wins", validClick(`"ad_id":"second"`, `"spend_micros":99`),
			func(c *Click) (any, any) { return fmt.Sprintf("%s %d", c.AdID, c.SpendMicros), "second 99" }},
		{"key case matters", validClick(`"AD_ID":"upper"`),
			func(c *Click) (any, any) { return c.AdID, "ad_7" }},
		{"nested unknown", validClick(`"x":{"a":[1,{"b":"}]"},[],{}],"click_id":"inner"}`, `"y":[true,false,null,-1.5e+3,"\u1234"]`),
			func(c *Click) (any, any) { return c.ClickID, "c1" }},
		{"negative zero", validClick(`"device_ms":-0`),
			func(c *Click) (any, any) { return c.DeviceMs, int64(0) }},
		{"int64 extremes", validClick(`"device_ms":-9223372036854775808`, `"impression_ms":253402300799999`),
			func(c *Click) (any, any) {
				// Device time may be anything (it is clamped); impression time
				// at most MaxTimeMs (a larger one is impression_out_of_range).
				return [2]int64{c.DeviceMs, c.ImpressionMs}, [2]int64{-1 << 63, MaxTimeMs}
			}},
		{"id of exactly MaxIDBytes", validClick(`"click_id":"` + strings.Repeat("é", MaxIDBytes/2) + `"`),
			func(c *Click) (any, any) { return len(c.ClickID), MaxIDBytes }},
		{"null then value", validClick(`"ad_id":null`, `"ad_id":"back"`),
			func(c *Click) (any, any) { return c.AdID, "back" }},
		{"arrival absent", validClick(),
			func(c *Click) (any, any) {
				return fmt.Sprintf("%v %d %v", c.HasArrival, c.ArrivalMs, c.Shard == ""), "false 0 true"
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Click
			if r := Decode([]byte(tt.in), &c); r != "" {
				t.Fatalf("Decode(%s): got reason %q, want valid", tt.in, r)
			}
			if got, want := tt.check(&c); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Decode(%s): got %q, want %q", tt.in, fmt.Sprint(got), fmt.Sprint(want))
			}
		})
	}
}

// TestDecodeReasons has one or more inputs for every reason Decode returns.
func TestDecodeReasons(t *testing.T) {
	long := strings.Repeat("a", MaxIDBytes+1)
	tests := []struct {
		name string
		in   string
		want Reason
	}{
		{"empty input", "", ReasonMalformedJSON},
		{"only whitespace", " \n\t", ReasonMalformedJSON},
		{"truncated", validClick()[:40], ReasonMalformedJSON},
		{"truncated in escape", `{"click_id":"a\u00`, ReasonMalformedJSON},
		{"trailing bytes", validClick() + "x", ReasonMalformedJSON},
		{"two objects", validClick() + validClick(), ReasonMalformedJSON},
		{"trailing comma", `{"click_id":"a",}`, ReasonMalformedJSON},
		{"missing colon", `{"click_id" "a"}`, ReasonMalformedJSON},
		{"unquoted key", `{click_id:"a"}`, ReasonMalformedJSON},
		{"single quotes", `{'click_id':'a'}`, ReasonMalformedJSON},
		{"bad escape", validClick(`"x":"\q"`), ReasonMalformedJSON},
		{"escaped apostrophe", validClick(`"x":"\'"`), ReasonMalformedJSON},
		{"bad hex in escape", validClick(`"ad_id":"\u12G4"`), ReasonMalformedJSON},
		{"raw control char", validClick("\"ad_id\":\"a\tb\""), ReasonMalformedJSON},
		{"leading zero", validClick(`"spend_micros":01`), ReasonMalformedJSON},
		{"plus sign", validClick(`"spend_micros":+1`), ReasonMalformedJSON},
		{"bare minus", validClick(`"spend_micros":-`), ReasonMalformedJSON},
		{"dot without digits", validClick(`"spend_micros":1.`), ReasonMalformedJSON},
		{"exponent without digits", validClick(`"spend_micros":1e`), ReasonMalformedJSON},
		{"bad literal", validClick(`"x":nul`), ReasonMalformedJSON},
		{"unclosed nested", validClick(`"x":[1,2`), ReasonMalformedJSON},
		{"mismatched brackets", validClick(`"x":[1}`), ReasonMalformedJSON},
		{"syntax error after a type error", `{"spend_micros":"x",}`, ReasonMalformedJSON},
		{"array", `[1,2]`, ReasonNotObject},
		{"string", `"click"`, ReasonNotObject},
		{"number", ` 42 `, ReasonNotObject},
		{"null", `null`, ReasonNotObject},
		{"id is a number", validClick(`"click_id":12`), BadType("click_id")},
		{"id is an object", validClick(`"device_id":{"a":1}`), BadType("device_id")},
		{"id is a bool", validClick(`"campaign_id":true`), BadType("campaign_id")},
		{"shard is an array", validClick(`"shard":["s"]`), BadType("shard")},
		{"time is a string", validClick(`"impression_ms":"1000"`), BadType("impression_ms")},
		{"time is a float", validClick(`"device_ms":1000.0`), BadType("device_ms")},
		{"time has an exponent", validClick(`"device_ms":1e3`), BadType("device_ms")},
		{"spend overflows", validClick(`"spend_micros":9223372036854775808`), BadType("spend_micros")},
		{"time underflows", validClick(`"device_ms":-9223372036854775809`), BadType("device_ms")},
		{"huge number", validClick(`"impression_ms":123456789012345678901234567890`), BadType("impression_ms")},
		{"arrival is a bool", validClick(`"arrival_ms":false`), BadType("arrival_ms")},
		{"bad type in an overwritten duplicate", validClick(`"ad_id":1`, `"ad_id":"a"`), BadType("ad_id")},
		{"first problem wins", validClick(`"device_ms":"x"`, `"ad_id":2`), BadType("device_ms")},
		{"invalid utf8", validClick("\"device_id\":\"d\xff\""), BadUTF8("device_id")},
		{"utf16 surrogate as utf8", validClick("\"ad_id\":\"\xed\xa0\x80\""), BadUTF8("ad_id")},
		{"lone high surrogate", validClick(`"click_id":"\ud83d"`), BadUTF8("click_id")},
		{"high surrogate then letter", validClick(`"click_id":"\ud83dx"`), BadUTF8("click_id")},
		{"high surrogate then non-low escape", validClick(`"click_id":"\ud83d\u0041"`), BadUTF8("click_id")},
		{"lone low surrogate", validClick(`"shard":"\ude00"`), BadUTF8("shard")},
		{"id too long", validClick(`"ad_id":"` + long + `"`), IDTooLong("ad_id")},
		{"id too long after decoding", validClick(`"click_id":"` + strings.Repeat(`\u00e9`, MaxIDBytes/2+1) + `"`), IDTooLong("click_id")},
		{"shard too long", validClick(`"shard":"` + long + `"`), IDTooLong("shard")},
		{"missing click_id", `{"ad_id":"a","campaign_id":"k","device_id":"d","impression_ms":1,"device_ms":1,"spend_micros":1}`, MissingField("click_id")},
		{"empty ad_id", validClick(`"ad_id":""`), MissingField("ad_id")},
		{"null campaign_id", validClick(`"campaign_id":null`), MissingField("campaign_id")},
		{"missing device_id", `{"click_id":"c","ad_id":"a","campaign_id":"k","impression_ms":1,"device_ms":1,"spend_micros":1}`, MissingField("device_id")},
		{"missing impression_ms", `{"click_id":"c","ad_id":"a","campaign_id":"k","device_id":"d","device_ms":1,"spend_micros":1}`, MissingField("impression_ms")},
		{"null device_ms", validClick(`"device_ms":null`), MissingField("device_ms")},
		{"missing spend_micros", `{"click_id":"c","ad_id":"a","campaign_id":"k","device_id":"d","impression_ms":1,"device_ms":1}`, MissingField("spend_micros")},
		{"empty object", `{}`, MissingField("click_id")},
		{"missing before range", validClick(`"ad_id":""`, `"spend_micros":-1`), MissingField("ad_id")},
		{"negative spend", validClick(`"spend_micros":-1`), ReasonNegativeSpend},
		{"spend too large", validClick(`"spend_micros":1000000000001`), ReasonSpendTooLarge},
		{"zero impression", validClick(`"impression_ms":0`), ReasonImpressionNotPositive},
		{"negative impression", validClick(`"impression_ms":-5`), ReasonImpressionNotPositive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Click
			if got := Decode([]byte(tt.in), &c); got != tt.want {
				t.Fatalf("Decode(%q): got %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecodeKeepsCleanFieldsOnReason(t *testing.T) {
	var c Click
	if r := Decode([]byte(validClick(`"spend_micros":-7`)), &c); r != ReasonNegativeSpend {
		t.Fatalf("got %q, want %q", r, ReasonNegativeSpend)
	}
	if c.ClickID != "c1" || c.SpendMicros != -7 {
		t.Fatalf("got click_id %q spend %d, want c1 -7", c.ClickID, c.SpendMicros)
	}
	if r := Decode([]byte(validClick()[:60]), &c); r != ReasonMalformedJSON || c != (Click{}) {
		t.Fatalf("after malformed: got %q %+v, want %q and a zero click", r, c, ReasonMalformedJSON)
	}
}

func TestDecodeResetsClick(t *testing.T) {
	dirty := Click{ClickID: "old", Shard: "s9", ArrivalMs: 9, EventMs: 9, HasArrival: true}
	c := dirty
	if r := Decode([]byte(validClick()), &c); r != "" {
		t.Fatalf("got %q, want valid", r)
	}
	if c.Shard != "" || c.ArrivalMs != 0 || c.EventMs != 0 || c.HasArrival || c.ClickID != "c1" {
		t.Fatalf("Decode did not reset the click: %+v", c)
	}
}

// TestDecodeDepth checks the nesting limit against encoding/json's.
func TestDecodeDepth(t *testing.T) {
	for _, depth := range []int{1, 2, maxDepth - 1, maxDepth, maxDepth + 1} {
		// The click object is level 1; the unknown value adds depth-1 levels.
		nested := strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1)
		if depth == 1 {
			nested = "0"
		}
		in := validClick(`"x":` + nested)
		wantValid := json.Valid([]byte(in))
		var c Click
		got := Decode([]byte(in), &c)
		if (got != ReasonMalformedJSON) != wantValid {
			t.Fatalf("depth %d: got %q, encoding/json valid=%v", depth, got, wantValid)
		}
		if wantValid != (depth <= maxDepth) {
			t.Fatalf("depth %d: encoding/json valid=%v, want limit %d", depth, wantValid, maxDepth)
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want float64
	}{
		{"realistic click", benchClick, 1},
		{"escaped ids", validClick(`"click_id":"a\u00e9\ud83d\ude00"`, `"shard":"s\n1"`), 1},
		{"malformed", benchClick[:100], 0},
		{"missing field", `{"click_id":1}`, 0},
	}
	for _, tt := range tests {
		var c Click
		b := []byte(tt.in)
		got := testing.AllocsPerRun(200, func() { Decode(b, &c) })
		if got != tt.want {
			t.Errorf("%s: got %v allocs per Decode, want %v", tt.name, got, tt.want)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	in := []byte(benchClick)
	var c Click
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if r := Decode(in, &c); r != "" {
			b.Fatalf("Decode: %q", r)
		}
	}
}

// BenchmarkDecodeStdlib is the baseline: encoding/json into an equivalent
// struct.
func BenchmarkDecodeStdlib(b *testing.B) {
	in := []byte(benchClick)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		var r refClick
		if err := json.Unmarshal(in, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// refClick is the click as encoding/json decodes it. Pointers make null
// clear a field, which is how Decode treats null.
type refClick struct {
	ClickID      *string `json:"click_id"`
	AdID         *string `json:"ad_id"`
	CampaignID   *string `json:"campaign_id"`
	DeviceID     *string `json:"device_id"`
	Shard        *string `json:"shard"`
	ImpressionMs *int64  `json:"impression_ms"`
	DeviceMs     *int64  `json:"device_ms"`
	SpendMicros  *int64  `json:"spend_micros"`
	ArrivalMs    *int64  `json:"arrival_ms"`
}

// oracle is the expected outcome of decoding a syntactically valid object,
// worked out independently of Decode from encoding/json's token stream.
type oracle struct {
	want        Reason // ignoring bad_utf8, which tokens cannot show
	strs        [numStringFields]*string
	ints        [numFields - numStringFields]*int64
	typeProblem bool // some occurrence of a known field had the wrong type
	caseVariant bool // a key equals a known name only case-insensitively
}

func tokenOracle(b []byte) (o oracle, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return o, err
	}
	var prob Reason
	note := func(r Reason) {
		if prob == "" {
			prob = r
		}
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return o, err
		}
		key := kt.(string)
		f := -1
		for i, name := range fieldNames {
			if key == name {
				f = i
			} else if strings.EqualFold(key, name) {
				o.caseVariant = true
			}
		}
		vt, err := dec.Token()
		if err != nil {
			return o, err
		}
		if d, ok := vt.(json.Delim); ok {
			if err := skipTokens(dec, d); err != nil {
				return o, err
			}
		}
		if f < 0 {
			continue
		}
		isStr := f < numStringFields
		var sp *string
		var ip *int64
		switch v := vt.(type) {
		case nil:
		case string:
			switch {
			case !isStr:
				o.typeProblem = true
				note(BadType(fieldNames[f]))
			default:
				if len(v) > MaxIDBytes {
					note(IDTooLong(fieldNames[f]))
				}
				sp = &v
			}
		case json.Number:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if isStr || err != nil {
				o.typeProblem = true
				note(BadType(fieldNames[f]))
			} else {
				ip = &n
			}
		default: // bool, object, array
			o.typeProblem = true
			note(BadType(fieldNames[f]))
		}
		if isStr {
			o.strs[f] = sp
		} else {
			o.ints[f-numStringFields] = ip
		}
	}
	o.want = prob
	if o.want == "" {
		o.want = o.expectedRange()
	}
	return o, nil
}

// expectedRange returns the missing-field or range reason for the final
// field values.
func (o *oracle) expectedRange() Reason {
	for f := range fDeviceID + 1 {
		if o.strs[f] == nil || *o.strs[f] == "" {
			return MissingField(fieldNames[f])
		}
	}
	for f := fImpression; f <= fSpend; f++ {
		if o.ints[f-numStringFields] == nil {
			return MissingField(fieldNames[f])
		}
	}
	spend, imp := *o.ints[fSpend-numStringFields], *o.ints[fImpression-numStringFields]
	switch {
	case spend < 0:
		return ReasonNegativeSpend
	case spend > MaxSpendMicros:
		return ReasonSpendTooLarge
	case imp <= 0:
		return ReasonImpressionNotPositive
	case imp > MaxTimeMs:
		return ReasonImpressionOutOfRange
	}
	return ""
}

// click returns the click the oracle expects Decode to produce.
func (o *oracle) click() Click {
	var c Click
	strs := [numStringFields]*string{&c.ClickID, &c.AdID, &c.CampaignID, &c.DeviceID, &c.Shard}
	for f, p := range o.strs {
		if p != nil {
			*strs[f] = *p
		}
	}
	ints := [...]*int64{&c.ImpressionMs, &c.DeviceMs, &c.SpendMicros, &c.ArrivalMs}
	for f, p := range o.ints {
		if p != nil {
			*ints[f] = *p
		}
	}
	c.HasArrival = o.ints[fArrival-numStringFields] != nil
	return c
}

// matchesStruct reports whether the oracle's final values are those
// encoding/json decoded into the struct.
func (o *oracle) matchesStruct(r *refClick) bool {
	strs := [...]*string{r.ClickID, r.AdID, r.CampaignID, r.DeviceID, r.Shard}
	for f, p := range strs {
		if (p == nil) != (o.strs[f] == nil) || p != nil && *p != *o.strs[f] {
			return false
		}
	}
	ints := [...]*int64{r.ImpressionMs, r.DeviceMs, r.SpendMicros, r.ArrivalMs}
	for f, p := range ints {
		if (p == nil) != (o.ints[f] == nil) || p != nil && *p != *o.ints[f] {
			return false
		}
	}
	return true
}

// skipTokens consumes the tokens of the container opened by d.
func skipTokens(dec *json.Decoder, d json.Delim) error {
	if d != '{' && d != '[' {
		return fmt.Errorf("unexpected delimiter %v", d)
	}
	depth := 1
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// surrogateEscape finds an escaped UTF-16 surrogate, the only way valid
// UTF-8 input can hold bad Unicode.
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

// FuzzDecode holds Decode to encoding/json: the same inputs are malformed,
// the same objects decode to the same values, and the reasons follow from
// an independent reading of the token stream. No input may panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		benchClick,
		validClick(),
		validClick(`"shard":"s1"`, `"arrival_ms":2500`),
		validClick(`"click_id":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`),
		validClick(`"x":{"a":[1,{"b":"}"}],"c":null}`),
		validClick(`"spend_micros":99999999999999999999`),
		validClick(`"ad_id":""`),
		benchClick[:120],
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Click
		got := Decode(b, &c)

		// Decoding into a used click gives the same result.
		d := Click{ClickID: "x", Shard: "y", ArrivalMs: 1, EventMs: 2, HasArrival: true}
		if again := Decode(b, &d); again != got || d != c {
			t.Fatalf("second Decode: got %q %+v, want %q %+v", again, d, got, c)
		}
		if got == "" {
			// Finishing a decoded click never panics and keeps the bounds.
			fc := c
			if r := fc.Finish(c.ImpressionMs); r != "" || fc.EventMs != c.ImpressionMs {
				t.Fatalf("Finish(impression): got %q event %d, want valid event %d", r, fc.EventMs, c.ImpressionMs)
			}
		}

		if !json.Valid(b) {
			if got != ReasonMalformedJSON {
				t.Fatalf("invalid JSON %q: got %q, want %q", b, got, ReasonMalformedJSON)
			}
			return
		}
		if got == ReasonMalformedJSON {
			t.Fatalf("valid JSON %q: got %q", b, got)
		}
		if trimmed := bytes.TrimLeft(b, " \t\r\n"); trimmed[0] != '{' {
			if got != ReasonNotObject {
				t.Fatalf("non-object %q: got %q, want %q", b, got, ReasonNotObject)
			}
			return
		}

		o, err := tokenOracle(b)
		if err != nil {
			t.Fatalf("token oracle on valid JSON %q: %v", b, err)
		}
		if !o.caseVariant {
			// Cross-check the oracle with encoding/json's struct decoding,
			// which matches keys case-insensitively.
			var ref refClick
			err := json.Unmarshal(b, &ref)
			var typeErr *json.UnmarshalTypeError
			switch {
			case o.typeProblem && !errors.As(err, &typeErr):
				t.Fatalf("oracle found a type problem in %q, encoding/json says %v", b, err)
			case !o.typeProblem && err != nil:
				t.Fatalf("oracle found no type problem in %q, encoding/json says %v", b, err)
			case err == nil && !o.matchesStruct(&ref):
				t.Fatalf("oracle and encoding/json disagree on the values of %q", b)
			}
		}

		if field, ok := strings.CutPrefix(string(got), "bad_utf8:"); ok {
			if matchKey([]byte(field)) >= numStringFields || matchKey([]byte(field)) < 0 {
				t.Fatalf("%q: got %q for a field that is not a string", b, got)
			}
			if utf8.Valid(b) && !surrogateEscape.Match(b) {
				t.Fatalf("%q is valid Unicode: got %q", b, got)
			}
			return
		}
		if got != o.want {
			t.Fatalf("Decode(%q): got %q, want %q", b, got, o.want)
		}
		if got == "" {
			if want := o.click(); c != want {
				t.Fatalf("Decode(%q):\n got %+v\nwant %+v", b, c, want)
			}
		}
	})
}

// TestStopWord compares the eight-bytes-at-a-time string scan with the
// byte table it stands for: every byte value at every position, then random
// words holding several special bytes.
func TestStopWord(t *testing.T) {
	naive := func(w [8]byte) (stop bool) {
		for _, c := range w {
			stop = stop || c < 0x20 || c == '"' || c == '\\'
		}
		return stop
	}
	check := func(w [8]byte) {
		t.Helper()
		x := binary.LittleEndian.Uint64(w[:])
		wantStop := naive(w)
		if got := stopWord(x) != 0; got != wantStop {
			t.Fatalf("stopWord(%q): got %v, want %v", w, got, wantStop)
		}
		b := w[:]
		wantPlain := 0
		for wantPlain < len(b) && strPlain[b[wantPlain]] {
			wantPlain++
		}
		if got := plainRun(b, 0); got != wantPlain {
			t.Fatalf("plainRun(%q): got %d, want %d", w, got, wantPlain)
		}
		wantSkip := 0
		for wantSkip < len(b) && strSkip[b[wantSkip]] {
			wantSkip++
		}
		if got := skipRun(b, 0); got != wantSkip {
			t.Fatalf("skipRun(%q): got %d, want %d", w, got, wantSkip)
		}
	}
	for v := range 256 {
		for p := range 8 {
			w := [8]byte{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}
			w[p] = byte(v)
			check(w)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 0x1f, 0x20, '!', '"', '#', '[', '\\', ']', 0x7f, 0x80, 0x9f, 0xa2, 0xdc, 0xff, 'a'}
	for range 200000 {
		var w [8]byte
		for i := range w {
			w[i] = alphabet[rng.IntN(len(alphabet))]
		}
		check(w)
	}
}
