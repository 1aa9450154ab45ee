package ingest

import (
	"strings"
	"testing"
	"time"
)

// ms returns the Unix ms of a UTC time on the day of seed 001's story.
func ms(h, m, s, milli int) int64 {
	return time.Date(2026, time.November, 29, h, m, s, milli*int(time.Millisecond), time.UTC).UnixMilli()
}

func TestClamp(t *testing.T) {
	impression, arrival := ms(10, 14, 50, 0), ms(10, 14, 59, 900)
	phone2031 := time.Date(2031, time.March, 3, 8, 0, 0, 0, time.UTC).UnixMilli()
	tests := []struct {
		name             string
		device, imp, arr int64
		want             int64
	}{
		{"inside the interval", ms(10, 14, 55, 0), impression, arrival, ms(10, 14, 55, 0)},
		{"equal to impression", impression, impression, arrival, impression},
		{"equal to arrival", arrival, impression, arrival, arrival},
		{"device before impression", ms(10, 14, 49, 999), impression, arrival, impression},
		{"device clock reset to 1970", 0, impression, arrival, impression},
		{"negative device time", -5, impression, arrival, impression},
		{"device after arrival", ms(10, 15, 0, 0), impression, arrival, arrival},
		{"phone clock in 2031 (seed 001, c7)", phone2031, impression, arrival, arrival},
		{"device at max int64", 1<<63 - 1, impression, arrival, arrival},
		{"device at min int64", -1 << 63, impression, arrival, impression},
		{"empty interval: arrival wins", 50, 100, 10, 10},
		{"point interval", 7, 5, 5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Clamp(tt.device, tt.imp, tt.arr); got != tt.want {
				t.Fatalf("Clamp(%d, %d, %d) = %d, want %d", tt.device, tt.imp, tt.arr, got, tt.want)
			}
		})
	}
}

// TestClampExhaustive compares Clamp with its definition on a small domain:
// when impression ≤ arrival, the result lies in [impression, arrival], equals
// device when device does, and is the nearer bound otherwise.
func TestClampExhaustive(t *testing.T) {
	for dev := int64(-4); dev <= 4; dev++ {
		for imp := int64(-4); imp <= 4; imp++ {
			for arr := int64(-4); arr <= 4; arr++ {
				got := Clamp(dev, imp, arr)
				var want int64
				switch {
				case imp > arr:
					want = arr
				case dev < imp:
					want = imp
				case dev > arr:
					want = arr
				default:
					want = dev
				}
				if got != want {
					t.Fatalf("Clamp(%d, %d, %d) = %d, want %d", dev, imp, arr, got, want)
				}
			}
		}
	}
}

func TestFinish(t *testing.T) {
	impression, arrival := ms(10, 14, 50, 0), ms(10, 14, 59, 900)
	phone2031 := time.Date(2031, time.March, 3, 8, 0, 0, 0, time.UTC).UnixMilli()
	tests := []struct {
		name      string
		device    int64
		imp       int64
		arrival   int64
		want      Reason
		wantEvent int64
	}{
		{"on time", ms(10, 14, 58, 0), impression, arrival, "", ms(10, 14, 58, 0)},
		{"phone clock in 2031 (seed 001, c7)", phone2031, impression, arrival, "", arrival},
		{"slow phone clock", ms(10, 10, 0, 0), impression, arrival, "", impression},
		{"impression equals arrival", impression + 5, impression, impression, "", impression},
		{"impression after arrival", impression, arrival + 1, arrival, ReasonImpressionAfterArrival, 0},
		{"zero arrival", impression, impression, 0, ReasonArrivalNotPositive, 0},
		{"negative arrival", impression, impression, -1, ReasonArrivalNotPositive, 0},
		{"arrival after year 9999", impression, impression, MaxTimeMs + 1, ReasonArrivalOutOfRange, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Click{ClickID: "c7", AdID: "ad_9", CampaignID: "k", DeviceID: "d", ImpressionMs: tt.imp, DeviceMs: tt.device, EventMs: 123}
			if got := c.Finish(tt.arrival); got != tt.want {
				t.Fatalf("Finish(%d): got %q, want %q", tt.arrival, got, tt.want)
			}
			if c.EventMs != tt.wantEvent {
				t.Fatalf("EventMs: got %d, want %d", c.EventMs, tt.wantEvent)
			}
			if c.ArrivalMs != tt.arrival {
				t.Fatalf("ArrivalMs: got %d, want %d", c.ArrivalMs, tt.arrival)
			}
			if c.DeviceMs != tt.device {
				t.Fatalf("DeviceMs: got %d, want the raw %d", c.DeviceMs, tt.device)
			}
		})
	}
}

// TestFinishDecoded walks seed 001's 2031 phone through Decode and Finish.
func TestFinishDecoded(t *testing.T) {
	phone2031 := time.Date(2031, time.March, 3, 8, 0, 0, 0, time.UTC).UnixMilli()
	in := `{"click_id":"c7","ad_id":"ad_9","campaign_id":"cmp_1","device_id":"phone_7",` +
		`"impression_ms":1795947290000,"device_ms":1930291200000,"spend_micros":500000}`
	var c Click
	if r := Decode([]byte(in), &c); r != "" {
		t.Fatalf("Decode: got %q, want valid", r)
	}
	if c.DeviceMs != phone2031 {
		t.Fatalf("DeviceMs: got %d, want %d (2031-03-03T08:00Z)", c.DeviceMs, phone2031)
	}
	arrival := ms(10, 14, 59, 900)
	if r := c.Finish(arrival); r != "" {
		t.Fatalf("Finish: got %q, want valid", r)
	}
	if c.EventMs != arrival || c.DeviceMs != phone2031 {
		t.Fatalf("got event %d device %d, want event %d (arrival) and device %d (raw)", c.EventMs, c.DeviceMs, arrival, phone2031)
	}
}

func TestFinishLine(t *testing.T) {
	base := Click{ClickID: "c", AdID: "a", CampaignID: "k", DeviceID: "d", ImpressionMs: 100, DeviceMs: 150, SpendMicros: 1}
	tests := []struct {
		name      string
		edit      func(c *Click)
		want      Reason
		wantEvent int64
	}{
		{"complete line", func(c *Click) { c.Shard, c.ArrivalMs, c.HasArrival = "s1", 120, true }, "", 120},
		{"no arrival_ms", func(c *Click) { c.Shard = "s1" }, MissingField("arrival_ms"), 0},
		{"no shard", func(c *Click) { c.ArrivalMs, c.HasArrival = 120, true }, MissingField("shard"), 0},
		{"arrival before impression", func(c *Click) { c.Shard, c.ArrivalMs, c.HasArrival = "s1", 99, true }, ReasonImpressionAfterArrival, 0},
		{"zero arrival", func(c *Click) { c.Shard, c.HasArrival = "s1", true }, ReasonArrivalNotPositive, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			if got := c.FinishLine(); got != tt.want {
				t.Fatalf("FinishLine: got %q, want %q", got, tt.want)
			}
			if c.EventMs != tt.wantEvent {
				t.Fatalf("EventMs: got %d, want %d", c.EventMs, tt.wantEvent)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	base := Click{ClickID: "c", AdID: "a", CampaignID: "k", DeviceID: "d", ImpressionMs: 100, DeviceMs: 150, SpendMicros: 1}
	tests := []struct {
		name string
		edit func(c *Click)
		want Reason
	}{
		{"valid", func(c *Click) {}, ""},
		{"valid with shard", func(c *Click) { c.Shard = "s1" }, ""},
		{"zero spend", func(c *Click) { c.SpendMicros = 0 }, ""},
		{"spend at the cap", func(c *Click) { c.SpendMicros = MaxSpendMicros }, ""},
		{"device time anywhere", func(c *Click) { c.DeviceMs = -1 << 63 }, ""},
		{"empty click_id", func(c *Click) { c.ClickID = "" }, MissingField("click_id")},
		{"empty ad_id", func(c *Click) { c.AdID = "" }, MissingField("ad_id")},
		{"empty campaign_id", func(c *Click) { c.CampaignID = "" }, MissingField("campaign_id")},
		{"empty device_id", func(c *Click) { c.DeviceID = "" }, MissingField("device_id")},
		{"bad utf8", func(c *Click) { c.DeviceID = "d\xc3" }, BadUTF8("device_id")},
		{"bad utf8 shard", func(c *Click) { c.Shard = "\xff" }, BadUTF8("shard")},
		{"long id", func(c *Click) { c.CampaignID = strings.Repeat("k", MaxIDBytes+1) }, IDTooLong("campaign_id")},
		{"id at the cap", func(c *Click) { c.CampaignID = strings.Repeat("k", MaxIDBytes) }, ""},
		{"negative spend", func(c *Click) { c.SpendMicros = -1 }, ReasonNegativeSpend},
		{"spend over the cap", func(c *Click) { c.SpendMicros = MaxSpendMicros + 1 }, ReasonSpendTooLarge},
		{"impression at the last accepted time", func(c *Click) { c.ImpressionMs = MaxTimeMs }, ""},
		{"impression after year 9999", func(c *Click) { c.ImpressionMs = MaxTimeMs + 1 }, ReasonImpressionOutOfRange},
		{"zero impression", func(c *Click) { c.ImpressionMs = 0 }, ReasonImpressionNotPositive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			if got := c.Validate(); got != tt.want {
				t.Fatalf("Validate: got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReasonNames(t *testing.T) {
	tests := []struct {
		got  Reason
		want string
	}{
		{MissingField("click_id"), "missing_field:click_id"},
		{MissingField("shard"), "missing_field:shard"},
		{MissingField("other"), "missing_field:other"},
		{BadType("spend_micros"), "bad_type:spend_micros"},
		{BadUTF8("ad_id"), "bad_utf8:ad_id"},
		{IDTooLong("device_id"), "id_too_long:device_id"},
		{ReasonMalformedJSON, "malformed_json"},
		{ReasonNegativeSpend, "negative_spend"},
		{ReasonImpressionAfterArrival, "impression_after_arrival"},
	}
	for _, tt := range tests {
		if string(tt.got) != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = MissingField("device_ms") }); n != 0 {
		t.Errorf("MissingField of a known field: got %v allocs, want 0", n)
	}
}

// TestAllReasons checks that AllReasons is duplicate-free and holds every
// reason the other tests produce.
func TestAllReasons(t *testing.T) {
	all := map[Reason]bool{}
	for _, r := range AllReasons() {
		if r == "" || all[r] {
			t.Fatalf("AllReasons: empty or duplicate reason %q", r)
		}
		all[r] = true
	}
	// 2 + 9 bad_type + 5 bad_utf8 + 5 id_too_long + 9 missing_field + 7 ranges.
	if want := 37; len(all) != want {
		t.Fatalf("AllReasons: got %d reasons, want %d", len(all), want)
	}
	for _, r := range []Reason{
		ReasonMalformedJSON, ReasonNotObject, ReasonNegativeSpend, ReasonSpendTooLarge,
		ReasonImpressionNotPositive, ReasonArrivalNotPositive, ReasonImpressionAfterArrival,
		BadType("arrival_ms"), BadUTF8("shard"), IDTooLong("click_id"), MissingField("arrival_ms"),
	} {
		if !all[r] {
			t.Errorf("AllReasons lacks %q", r)
		}
	}
}
