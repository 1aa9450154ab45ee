package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHostPolicyAllows(t *testing.T) {
	for _, c := range []struct {
		addr    string
		allowed []string
		host    string
		want    bool
	}{
		// A loopback server answers loopback Hosts only.
		{"127.0.0.1:8080", nil, "127.0.0.1:8080", true},
		{"127.0.0.1:8080", nil, "localhost:8080", true},
		{"127.0.0.1:8080", nil, "LOCALHOST.", true},
		{"127.0.0.1:8080", nil, "[::1]:8080", true},
		{"127.0.0.1:8080", nil, "127.1.2.3", true},
		{"127.0.0.1:8080", nil, "evil.example.com", false},
		{"127.0.0.1:8080", nil, "evil.example.com:8080", false},
		{"127.0.0.1:8080", nil, "localhost.evil.com:8080", false},
		{"127.0.0.1:8080", nil, "10.0.0.5:8080", false},
		{"127.0.0.1:8080", nil, "", false},
		{"localhost:8080", nil, "evil.example.com", false},
		// ... and those it is given.
		{"127.0.0.1:8080", []string{"dash.internal"}, "Dash.Internal:8080", true},
		{"127.0.0.1:8080", []string{"dash.internal"}, "dash.internal.", true},
		{"127.0.0.1:8080", []string{"dash.internal"}, "x.dash.internal", false},
		{"127.0.0.1:8080", []string{".corp.example"}, "corp.example", true},
		{"127.0.0.1:8080", []string{".corp.example"}, "a.b.corp.example:80", true},
		{"127.0.0.1:8080", []string{".corp.example"}, "evilcorp.example", false},
		{"127.0.0.1:8080", []string{"[fd00::1]"}, "[fd00::1]:8080", true},
		// A server beyond loopback answers any Host without a list, only
		// the list's (and loopback ones) with one.
		{"0.0.0.0:8080", nil, "evil.example.com", true},
		{":8080", nil, "adclick.internal:8080", true},
		{"0.0.0.0:8080", []string{"adclick.internal"}, "adclick.internal:8080", true},
		{"0.0.0.0:8080", []string{"adclick.internal"}, "127.0.0.1:8080", true},
		{"0.0.0.0:8080", []string{"adclick.internal"}, "evil.example.com", false},
		{"0.0.0.0:8080", []string{"adclick.internal"}, "10.0.0.5:8080", false},
		{"0.0.0.0:8080", []string{"10.0.0.5"}, "10.0.0.5:8080", true},
	} {
		p, err := NewHostPolicy(c.addr, c.allowed)
		if err != nil {
			t.Fatalf("NewHostPolicy(%q, %q): %v", c.addr, c.allowed, err)
		}
		if got := p.Allows(c.host); got != c.want {
			t.Errorf("listen %q, allowed %q: Allows(%q) = %v, want %v", c.addr, c.allowed, c.host, got, c.want)
		}
	}
}

func TestHostPolicyRefusesMalformedEntries(t *testing.T) {
	bad := []string{"http://dash.internal", "dash.internal:8080", "dash.internal/x", "*.corp.example", "user@host", ".", "a..b"}
	_, err := NewHostPolicy("127.0.0.1:8080", append([]string{"ok.example", " ", "::1"}, bad...))
	if err == nil {
		t.Fatal("NewHostPolicy took malformed entries, want an error")
	}
	for _, b := range bad {
		if !strings.Contains(err.Error(), `"`+b+`"`) {
			t.Errorf("error does not name %q: %v", b, err)
		}
	}
	if strings.Contains(err.Error(), "ok.example") {
		t.Errorf("error names a good entry: %v", err)
	}
	if _, err := New(newFakeJob(t), Options{Addr: "127.0.0.1:0", SampleEvery: -1, AllowedHosts: []string{"http://x"}}); err == nil {
		t.Error("New took a malformed allowed host, want an error")
	}
}

// TestForeignHostRefusedOnEveryRoute is DNS rebinding as the server sees
// it: a page on evil.example.com whose name now resolves to 127.0.0.1
// sends requests with its own Host. A loopback server must answer none of
// them, read endpoints and /metrics included, with any token; the same
// requests with a loopback Host (or an allowed one) are answered.
func TestForeignHostRefusedOnEveryRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	reqs := []struct{ method, path string }{
		{"GET", "/v1/status"}, {"GET", "/v1/status/history"},
		{"GET", "/v1/ads/ad_1/minutes?from=2026-11-29T10:00Z&to=2026-11-29T10:15Z"},
		{"GET", "/v1/ads/ad_1/hours/2026-11-29T10Z"}, {"GET", "/v1/hours/2026-11-29T10Z"},
		{"GET", "/v1/top-ads"}, {"GET", "/"}, {"GET", "/healthz"}, {"GET", "/readyz"},
		{"GET", "/metrics"}, {"GET", "/v1/openapi.yaml"}, {"GET", "/no/such/path"},
		{"POST", "/v1/savepoints"}, {"POST", "/v1/stop"},
	}
	for _, c := range []struct {
		name string
		opts Options
		host string
		want bool // answered
	}{
		{"loopback server, rebound name", Options{Addr: "127.0.0.1:8080"}, "evil.example.com", false},
		{"loopback server, rebound name and port", Options{Addr: "127.0.0.1:8080"}, "evil.example.com:8080", false},
		{"loopback server, read token", Options{Addr: "127.0.0.1:8080", ReadToken: readTok}, "evil.example.com:8080", false},
		{"loopback server, loopback host", Options{Addr: "127.0.0.1:8080"}, "localhost:8080", true},
		{"loopback server, allowed host", Options{Addr: "127.0.0.1:8080", AllowedHosts: []string{"dash.example.com"}}, "dash.example.com:8080", true},
		{"network server, list, foreign host", Options{Addr: "0.0.0.0:8080", AllowedHosts: []string{"adclick.internal"}}, "evil.example.com:8080", false},
		{"network server, list, its name", Options{Addr: "0.0.0.0:8080", AllowedHosts: []string{"adclick.internal"}}, "adclick.internal:8080", true},
		{"network server, no list", Options{Addr: "0.0.0.0:8080"}, "evil.example.com:8080", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeJob(t)
			c.opts.AdminToken, c.opts.Gatherer = adminTok, reg
			s := newTestServer(t, f, c.opts)
			for _, q := range reqs {
				r := httptest.NewRequest(q.method, q.path, nil)
				r.Host = c.host
				r.Header.Set("Authorization", "Bearer "+adminTok)
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, r)
				if !c.want {
					if rec.Code != http.StatusMisdirectedRequest {
						t.Errorf("%s %s, Host %q: got %d, want 421; body %.200s", q.method, q.path, c.host, rec.Code, rec.Body.String())
						continue
					}
					var b ErrorBody
					if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || b.Error.Code != codeMisdirected {
						t.Errorf("%s %s: body %s, want error code %s", q.method, q.path, rec.Body.String(), codeMisdirected)
					}
					continue
				}
				if rec.Code == http.StatusMisdirectedRequest {
					t.Errorf("%s %s, Host %q: got 421, want it answered; body %s", q.method, q.path, c.host, rec.Body.String())
				}
			}
			acted := f.spTaken > 0 || len(f.stops) > 0
			if acted == !c.want {
				t.Errorf("job took %d savepoints and stopped %d times with Host %q", f.spTaken, len(f.stops), c.host)
			}
		})
	}
}
