package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/runtime"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const (
	adminTok = "s3cret-admin"
	readTok  = "read-only"
)

// newTestServer returns a server over job without a sampler goroutine.
func newTestServer(t *testing.T, job Job, o Options) *Server {
	t.Helper()
	o.SampleEvery = -1
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Clock == nil {
		o.Clock = clock.NewVirtual(ms(t, "2026-11-29T10:15:07.5Z"))
	}
	s, err := New(job, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type apiCase struct {
	name   string
	method string
	path   string
	token  string
	body   string
	opts   *Options         // default: admin token, open reads
	setup  func(f *fakeJob) // changes the job before the request
	want   int              // status code
	check  func(*testing.T, *fakeJob)
}

// newRequest returns a request as the CLI sends it: to the loopback
// address the test servers claim, with a JSON body if any.
func newRequest(method, path, token, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Host = "127.0.0.1:8080"
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

func do(t *testing.T, h http.Handler, method, path, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest(method, path, token, body))
	return rec
}

// serveCase runs c against a fresh server over a fresh fake job.
func serveCase(t *testing.T, c apiCase) (*fakeJob, *http.Request, *httptest.ResponseRecorder) {
	t.Helper()
	f := newFakeJob(t)
	if c.setup != nil {
		c.setup(f)
	}
	o := Options{AdminToken: adminTok}
	if c.opts != nil {
		o = *c.opts
	}
	s := newTestServer(t, f, o)
	req := newRequest(c.method, c.path, c.token, c.body)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return f, req, rec
}

// golden compares a response with testdata/golden/<name>.json, or rewrites
// it under -update.
func golden(t *testing.T, name string, rec *httptest.ResponseRecorder) {
	t.Helper()
	var body any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, rec.Body.String())
	}
	got, err := json.MarshalIndent(map[string]any{"status": rec.Code, "content_type": rec.Header().Get("Content-Type"), "body": body}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("response differs from %s (run with -update to rewrite, then review the diff)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// goldenCases are requests to every endpoint, with the answers in
// testdata/golden; TestOpenAPIResponses checks the same answers against
// the OpenAPI document.
func goldenCases() []apiCase {
	big := `{"gen": 6, "since": 41, "pad": "` + strings.Repeat("x", MaxBodyBytes) + `"}`
	return []apiCase{
		{name: "healthz", method: "GET", path: "/healthz", want: 200},
		{name: "readyz_ready", method: "GET", path: "/readyz", want: 200},
		{name: "readyz_restoring", method: "GET", path: "/readyz", want: 503, setup: func(f *fakeJob) { f.st.Ready = false }},
		{name: "readyz_done", method: "GET", path: "/readyz", want: 503, setup: func(f *fakeJob) { f.st.Done = true }},
		{name: "status", method: "GET", path: "/v1/status", want: 200},
		{name: "status_no_watermark", method: "GET", path: "/v1/status", want: 200, setup: func(f *fakeJob) {
			f.st.WatermarkMs, f.st.WatermarkLagMs, f.st.LastCheckpoint, f.st.Flush, f.st.ProcessingMs = eventtime.NoWatermark, 1<<63-1, nil, nil, 0
			f.st.Shards = nil
		}},
		{name: "status_metrics", method: "GET", path: "/v1/status", want: 200,
			opts: &Options{AdminToken: adminTok, Gatherer: fakeJobRegistry(-1, -1)}},
		{name: "status_all_idle", method: "GET", path: "/v1/status", want: 200, setup: func(f *fakeJob) {
			for i := range f.st.Shards {
				f.st.Shards[i].Idle = true
			}
		}},
		{name: "history", method: "GET", path: "/v1/status/history", want: 200},

		// Dashboards.
		{name: "minutes", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-29T09:58Z&to=2026-11-29T10:16Z", want: 200},
		{name: "minutes_rfc3339_offset", method: "GET", path: "/v1/ads/ad_9/minutes?from=2026-11-29T10:13:30Z&to=2026-11-29T11:15:00.5%2B01:00", want: 200},
		{name: "minutes_bucket_prefix", method: "GET", path: "/v1/ads/ad_7/minutes?from=M2026-11-29T10:14Z&to=H2026-11-29T11Z", want: 200},
		{name: "minutes_missing_from", method: "GET", path: "/v1/ads/ad_7/minutes?to=2026-11-29T10:16Z", want: 400},
		{name: "minutes_missing_to", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-29T10:16Z", want: 400},
		{name: "minutes_bad_time", method: "GET", path: "/v1/ads/ad_7/minutes?from=yesterday&to=2026-11-29T10:16Z", want: 400},
		{name: "minutes_bad_time_slash", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026/11/29&to=2026-11-29T10:16Z", want: 400},
		{name: "minutes_to_before_from", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-29T10:16Z&to=2026-11-29T10:14Z", want: 400},
		{name: "minutes_range_too_large", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-28T10:15Z&to=2026-11-29T10:16Z", want: 400},
		{name: "minutes_range_max", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-28T10:16Z&to=2026-11-29T10:16Z", want: 200},
		{name: "minutes_unknown_ad", method: "GET", path: "/v1/ads/ad_404/minutes?from=2026-11-29T10:00Z&to=2026-11-29T10:16Z", want: 404},
		{name: "minutes_no_totals_store", method: "GET", path: "/v1/ads/ad_7/minutes?from=2026-11-29T10:00Z&to=2026-11-29T10:16Z", want: 503,
			setup: func(f *fakeJob) { f.totals = nil }},
		{name: "ad_too_long", method: "GET", path: "/v1/ads/" + strings.Repeat("a", MaxAdBytes+1) + "/minutes?from=2026-11-29T10:00Z&to=2026-11-29T10:16Z", want: 400},
		// Ingest accepts control characters in ad_id (escaped in JSON), so
		// the API looks such an id up instead of refusing it.
		{name: "ad_control_char", method: "GET", path: "/v1/ads/ad%0A7/hours/2026-11-29T09Z", want: 404},
		{name: "ad_bad_utf8", method: "GET", path: "/v1/ads/ad%FF7/hours/2026-11-29T09Z", want: 400},

		// Billing.
		{name: "ad_hour_final", method: "GET", path: "/v1/ads/ad_7/hours/2026-11-29T09Z", want: 200},
		{name: "ad_hour_provisional", method: "GET", path: "/v1/ads/ad_9/hours/2026-11-29T09Z", want: 200},
		{name: "ad_hour_open", method: "GET", path: "/v1/ads/ad_7/hours/H2026-11-29T10Z", want: 200},
		{name: "ad_hour_rfc3339", method: "GET", path: "/v1/ads/ad_9/hours/2026-11-29T09:00:00Z", want: 200},
		{name: "ad_hour_not_aligned", method: "GET", path: "/v1/ads/ad_7/hours/2026-11-29T09:30Z", want: 400},
		{name: "ad_hour_bad_time", method: "GET", path: "/v1/ads/ad_7/hours/noon", want: 400},
		{name: "ad_hour_unknown_ad", method: "GET", path: "/v1/ads/ad_404/hours/2026-11-29T09Z", want: 404},
		{name: "hour_page1", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=3", want: 200},
		{name: "hour_page2", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=3&cursor=YWRfMw", want: 200},
		{name: "hour_page3", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=3&cursor=YWRfNw", want: 200},
		{name: "hour_empty", method: "GET", path: "/v1/hours/2026-11-29T08Z", want: 200},
		{name: "hour_limit_zero", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=0", want: 400},
		{name: "hour_limit_too_large", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=1001", want: 400},
		{name: "hour_limit_not_int", method: "GET", path: "/v1/hours/2026-11-29T09Z?limit=ten", want: 400},
		{name: "hour_bad_cursor", method: "GET", path: "/v1/hours/2026-11-29T09Z?cursor=***", want: 400},
		{name: "hour_bad_time", method: "GET", path: "/v1/hours/2026-13-29T09Z", want: 400},
		{name: "top_ads", method: "GET", path: "/v1/top-ads", want: 200},
		{name: "top_ads_limit", method: "GET", path: "/v1/top-ads?limit=1", want: 200},
		{name: "top_ads_bad_limit", method: "GET", path: "/v1/top-ads?limit=101", want: 400},

		// Operators.
		{name: "savepoint_no_token", method: "POST", path: "/v1/savepoints", want: 401},
		{name: "savepoint_wrong_token", method: "POST", path: "/v1/savepoints", token: "guess", want: 401},
		{name: "savepoint_read_token", method: "POST", path: "/v1/savepoints", token: readTok, want: 401,
			opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		{name: "savepoint", method: "POST", path: "/v1/savepoints", token: adminTok, want: 201,
			check: func(t *testing.T, f *fakeJob) {
				if f.spTaken != 1 {
					t.Errorf("savepoints taken: got %d, want 1", f.spTaken)
				}
			}},
		{name: "savepoint_not_running", method: "POST", path: "/v1/savepoints", token: adminTok, want: 409,
			setup: func(f *fakeJob) { f.spErr = runtime.ErrNotRunning }},
		{name: "savepoint_failed", method: "POST", path: "/v1/savepoints", token: adminTok, want: 500,
			setup: func(f *fakeJob) { f.spErr = errors.New("runtime: checkpoint 42: disk full") }},
		{name: "savepoint_with_body", method: "POST", path: "/v1/savepoints", token: adminTok, body: `{"x":1}`, want: 400},
		{name: "sweep", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41}`, want: 200,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.sweeps) != 1 || f.sweeps[0] != [3]int64{6, 41, 0} {
					t.Errorf("sweeps: got %v, want [[6 41 0]]", f.sweeps)
				}
			}},
		{name: "sweep_high", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41, "high": 60}`, want: 200,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.sweeps) != 1 || f.sweeps[0] != [3]int64{6, 41, 60} {
					t.Errorf("sweeps: got %v, want [[6 41 60]]", f.sweeps)
				}
			}},
		{name: "sweep_no_token", method: "POST", path: "/v1/sweeps", body: `{"gen": 6, "since": 41}`, want: 401,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.sweeps) != 0 {
					t.Errorf("a sweep ran without a token: %v", f.sweeps)
				}
			}},
		{name: "sweep_missing_body", method: "POST", path: "/v1/sweeps", token: adminTok, want: 400},
		{name: "sweep_missing_gen", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"since": 41}`, want: 400},
		{name: "sweep_missing_since", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6}`, want: 400},
		{name: "sweep_negative_since", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": -1}`, want: 400},
		{name: "sweep_high_before_since", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41, "high": 40}`, want: 400},
		{name: "sweep_not_older", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 7, "since": 41}`, want: 409},
		{name: "sweep_unknown_field", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41, "generation": 6}`, want: 400},
		{name: "sweep_trailing_data", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": 6, "since": 41} {}`, want: 400},
		{name: "sweep_bad_json", method: "POST", path: "/v1/sweeps", token: adminTok, body: `{"gen": "six"}`, want: 400},
		{name: "sweep_body_too_large", method: "POST", path: "/v1/sweeps", token: adminTok, body: big, want: 413},
		{name: "stop_savepoint", method: "POST", path: "/v1/stop", token: adminTok, body: `{"savepoint": true}`, want: 200,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.stops) != 1 || !f.stops[0] {
					t.Errorf("stops: got %v, want [true]", f.stops)
				}
			}},
		{name: "stop_no_body", method: "POST", path: "/v1/stop", token: adminTok, want: 200,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.stops) != 1 || f.stops[0] {
					t.Errorf("stops: got %v, want [false]", f.stops)
				}
			}},
		{name: "stop_wrong_token", method: "POST", path: "/v1/stop", token: adminTok + "x", body: `{"savepoint": true}`, want: 401,
			check: func(t *testing.T, f *fakeJob) {
				if len(f.stops) != 0 {
					t.Errorf("the job stopped on a wrong token: %v", f.stops)
				}
			}},
		{name: "stop_not_running", method: "POST", path: "/v1/stop", token: adminTok, want: 409,
			setup: func(f *fakeJob) { f.stopErr = runtime.ErrNotRunning }},
		{name: "operator_disabled", method: "POST", path: "/v1/stop", token: adminTok, want: 403,
			opts: &Options{Addr: "0.0.0.0:8080", NoOperator: true}},
		// A loopback server without an admin token keeps its operator
		// endpoints closed: any web page could reach them.
		{name: "operator_loopback_no_token", method: "POST", path: "/v1/savepoints", want: 401,
			opts: &Options{Addr: "127.0.0.1:8080"},
			check: func(t *testing.T, f *fakeJob) {
				if f.spTaken != 0 {
					t.Errorf("savepoints taken without a token: got %d, want 0", f.spTaken)
				}
			}},

		// Read token.
		{name: "read_token_missing", method: "GET", path: "/v1/status", want: 401, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		{name: "read_token_wrong", method: "GET", path: "/v1/hours/2026-11-29T09Z", token: "nope", want: 401, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		{name: "read_token_ok", method: "GET", path: "/v1/ads/ad_7/hours/2026-11-29T09Z", token: readTok, want: 200, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		{name: "read_token_admin_ok", method: "GET", path: "/v1/ads/ad_7/hours/2026-11-29T09Z", token: adminTok, want: 200, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},
		{name: "read_token_health_open", method: "GET", path: "/healthz", want: 200, opts: &Options{AdminToken: adminTok, ReadToken: readTok}},

		// Routing.
		{name: "not_found", method: "GET", path: "/v1/nothing", want: 404},
		{name: "method_not_allowed", method: "GET", path: "/v1/stop", want: 405},
	}
}

func TestGolden(t *testing.T) {
	cases := goldenCases()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			f, _, rec := serveCase(t, c)
			if rec.Code != c.want {
				t.Errorf("%s %s: got status %d, want %d; body %s", c.method, c.path, rec.Code, c.want, rec.Body.String())
			}
			if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("401 without a WWW-Authenticate header")
			}
			if rec.Code >= 400 && c.path != "/readyz" {
				var eb ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
					t.Errorf("error answer is not {error: {code, message}}: %s", rec.Body.String())
				}
			}
			golden(t, c.name, rec)
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
	// Every golden file belongs to a case: a renamed case leaves no orphan.
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, p := range files {
		if n := strings.TrimSuffix(filepath.Base(p), ".json"); !seen[n] {
			t.Errorf("golden file %s has no case", p)
		}
	}
}

func TestHourPagesCoverEveryAdOnce(t *testing.T) {
	f := newFakeJob(t)
	s := newTestServer(t, f, Options{AdminToken: adminTok})
	want := []string{"ad_1", "ad_2", "ad_3", "ad_4", "ad_5", "ad_7", "ad_9"}
	for _, limit := range []int{1, 2, 3, 6, 7, 1000} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(want)+1 {
				t.Fatalf("limit %d: pagination does not end", limit)
			}
			path := fmt.Sprintf("/v1/hours/2026-11-29T09Z?limit=%d&cursor=%s", limit, cursor)
			rec := do(t, s, "GET", path, "", "")
			if rec.Code != 200 {
				t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body.String())
			}
			var p HourPage
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Rows) > limit {
				t.Fatalf("limit %d: page of %d rows", limit, len(p.Rows))
			}
			for _, r := range p.Rows {
				got = append(got, r.Ad)
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("limit %d: got ads %v, want %v", limit, got, want)
		}
	}
}

func TestNewRefusesOperatorEndpointsWithoutToken(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		noOp        bool
		wantErr     bool
	}{
		{addr: "0.0.0.0:8080", wantErr: true},
		{addr: ":8080", wantErr: true},
		{addr: "", wantErr: true},
		{addr: "10.1.2.3:8080", wantErr: true},
		{addr: "0.0.0.0:8080", token: "t"},
		{addr: "0.0.0.0:8080", noOp: true},
		{addr: "127.0.0.1:8080"},
		{addr: "[::1]:8080"},
		{addr: "localhost:8080"},
	} {
		s, err := New(newFakeJob(t), Options{Addr: c.addr, AdminToken: c.token, NoOperator: c.noOp, SampleEvery: -1})
		if c.wantErr {
			if !errors.Is(err, ErrNoAdminToken) {
				t.Errorf("New(addr %q, token %q): got error %v, want ErrNoAdminToken", c.addr, c.token, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("New(addr %q, token %q, no operator %v): %v", c.addr, c.token, c.noOp, err)
			continue
		}
		s.Close()
	}
}

func TestIsLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true}, {"127.0.0.2:80", true}, {"[::1]:8080", true}, {"localhost:8080", true},
		{"LOCALHOST:1", true}, {"127.0.0.1", true}, {"::1", true},
		{":8080", false}, {"0.0.0.0:8080", false}, {"[::]:8080", false}, {"192.168.1.5:8080", false},
		{"example.com:8080", false}, {"", false}, {"localhost.evil.com:80", false},
	} {
		if got := IsLoopback(c.addr); got != c.want {
			t.Errorf("IsLoopback(%q): got %v, want %v", c.addr, got, c.want)
		}
	}
}
