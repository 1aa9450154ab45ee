package api

import (
	"github.com/adclick/adclick/eventtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/runtime"
)

func TestParseTime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // RFC 3339 UTC, or "" for an error
	}{
		{"2026-11-29T10:14:05Z", "2026-11-29T10:14:05Z"},
		{"2026-11-29T10:14:05.25Z", "2026-11-29T10:14:05.25Z"},
		{"2026-11-29T11:14:05+01:00", "2026-11-29T10:14:05Z"},
		{"2026-11-29T10:14Z", "2026-11-29T10:14:00Z"},
		{"M2026-11-29T10:14Z", "2026-11-29T10:14:00Z"},
		{"2026-11-29T10Z", "2026-11-29T10:00:00Z"},
		{"H2026-11-29T10Z", "2026-11-29T10:00:00Z"},
		{"", ""},
		{"2026-11-29", ""},
		{"2026-11-29T10:14", ""},
		{"2026-11-29T25Z", ""},
		{"X2026-11-29T10Z", ""},
		{"1795947300999", ""},
		{strings.Repeat("9", 100), ""},
	} {
		got, err := parseTime(c.in)
		if c.want == "" {
			if err == nil {
				t.Errorf("parseTime(%q): got %d, want an error", c.in, got)
			}
			continue
		}
		want, _ := time.Parse(time.RFC3339Nano, c.want)
		if err != nil || got != want.UnixMilli() {
			t.Errorf("parseTime(%q): got %d, %v; want %d", c.in, got, err, want.UnixMilli())
		}
	}
}

func TestParseHour(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"2026-11-29T10Z", true}, {"2026-11-29T10:00Z", true}, {"2026-11-29T10:00:00Z", true},
		{"2026-11-29T10:30Z", false}, {"2026-11-29T10:00:00.001Z", false}, {"2026-11-29T10:30:00+00:30", true},
	} {
		if _, err := parseHour(c.in); (err == nil) != c.ok {
			t.Errorf("parseHour(%q): got error %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

func TestStatuses(t *testing.T) {
	h := int64(3_600_000 * 500_000) // an hour start
	for _, c := range []struct {
		wm    int64
		final bool
		want  string
	}{
		{eventtime.NoWatermark, false, StatusOpen},
		{h - 1, false, StatusOpen},
		{h + hourMs - 2, false, StatusOpen},
		{h + hourMs - 1, false, StatusProvisional}, // the hour's last millisecond: closed
		{h + 5*hourMs, false, StatusProvisional},
		{h + hourMs - 2, true, StatusFinal},
		{h + 5*hourMs, true, StatusFinal},
	} {
		row := hourRow(itemWithFinal(c.final), h, c.wm)
		if row.Status != c.want || row.Billable != (c.want == StatusFinal) {
			t.Errorf("wm %d final %v: got %s billable %v, want %s", c.wm-h, c.final, row.Status, row.Billable, c.want)
		}
	}
}

func TestHistoryRing(t *testing.T) {
	h := newHistory(3)
	if got := len(h.samples()); got != 0 {
		t.Fatalf("empty history: got %d samples", got)
	}
	for i := int64(1); i <= 5; i++ {
		h.add(Sample{AtMs: i})
		got := h.samples()
		want := min(int(i), 3)
		if len(got) != want {
			t.Fatalf("after %d adds: got %d samples, want %d", i, len(got), want)
		}
		for k, s := range got {
			if wantAt := i - int64(len(got)) + 1 + int64(k); s.AtMs != wantAt {
				t.Errorf("after %d adds, sample %d: got at %d, want %d", i, k, s.AtMs, wantAt)
			}
		}
	}
}

func TestSamplerRunsUntilClose(t *testing.T) {
	f := newFakeJob(t)
	s, err := New(f, Options{Addr: "127.0.0.1:0", SampleEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.hist.samples()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("sampler took %d samples in 5 s, want >= 4", len(s.hist.samples()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.Close()
	n := len(s.hist.samples())
	time.Sleep(30 * time.Millisecond)
	if got := len(s.hist.samples()); got != n {
		t.Errorf("samples after Close: got %d, want %d (the sampler kept running)", got, n)
	}
	s.Close() // a second Close is harmless
}

func TestSampleWithoutWatermark(t *testing.T) {
	s := sampleOf(5, runtime.Status{WatermarkMs: eventtime.NoWatermark, WatermarkLagMs: 1<<63 - 1}, jobMetrics{})
	if s.WatermarkMs != nil || s.LagMs != nil {
		t.Errorf("sample before any watermark: got %+v, want nulls", s)
	}
}

func TestHTTPMetricsByRoutePattern(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFakeJob(t)
	s := newTestServer(t, f, Options{AdminToken: adminTok, Registerer: reg, Gatherer: reg})
	do(t, s, "GET", "/v1/ads/ad_7/hours/2026-11-29T09Z", "", "")
	do(t, s, "GET", "/v1/ads/ad_9/hours/2026-11-29T09Z", "", "")
	do(t, s, "GET", "/v1/ads/ad_404/hours/2026-11-29T09Z", "", "")
	do(t, s, "POST", "/v1/stop", "", "")
	do(t, s, "GET", "/no/such/path", "", "")
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{routeAdHour, "200", 2}, {routeAdHour, "404", 1}, {routeStop, "401", 1}, {routeOther, "404", 1},
		{routeSweep, "200", 0}, // initialised, never hit
	} {
		if got := counterValue(t, s.m.requests.WithLabelValues(c.route, c.code)); got != c.want {
			t.Errorf("requests{route=%q,code=%q}: got %v, want %v", c.route, c.code, got, c.want)
		}
	}
	rec := do(t, s, "GET", "/metrics", "", "")
	body := rec.Body.String()
	if rec.Code != 200 || !strings.Contains(body, `adclick_http_requests_total{code="404",route="/v1/ads/{ad}/hours/{hour}"} 1`) {
		t.Errorf("/metrics: status %d, missing the request counter:\n%.2000s", rec.Code, body)
	}
	if strings.Contains(body, "ad_404") {
		t.Errorf("/metrics carries a raw ad id as a label value")
	}
	// A second server on the same registry reports the duplicate.
	if _, err := New(f, Options{Addr: "127.0.0.1:0", Registerer: reg, SampleEvery: -1}); err == nil {
		t.Errorf("New with an already-registered registerer: got nil error")
	}
}

func TestConsumerLagFromOptionalInterface(t *testing.T) {
	f := newFakeJob(t)
	f.consumerL = map[string]int64{"S1": 1200, "S3": 0}
	s := newTestServer(t, lagJob{f}, Options{AdminToken: adminTok})
	resp := s.statusOf(f.Status(), jobMetrics{})
	got := map[string]string{}
	for _, sh := range resp.Shards {
		v := "null"
		if sh.ConsumerLagMs != nil {
			v = time.Duration(*sh.ConsumerLagMs * int64(time.Millisecond)).String()
		}
		got[sh.ID] = v
	}
	want := map[string]string{"S1": "1.2s", "S2": "null", "S3": "0s"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("shard %s consumer lag: got %s, want %s", k, got[k], v)
		}
	}
}

func TestStatusPageIsSelfContained(t *testing.T) {
	s := newTestServer(t, newFakeJob(t), Options{AdminToken: adminTok})
	rec := do(t, s, "GET", "/", "", "")
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	for _, bad := range []string{"http://", "https://", "src=\"/", "<link"} {
		if strings.Contains(body, bad) {
			t.Errorf("status page refers to an external asset (%q)", bad)
		}
	}
	for _, want := range []string{"/v1/status", "/v1/status/history", "/v1/top-ads", "<canvas"} {
		if !strings.Contains(body, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
