package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOperatorEndpointsRefuseBrowserRequests sends the requests a web page
// in the operator's browser can make to another origin without asking
// first (text/plain and form bodies, no Authorization header) and the
// variants a token alone would let through, and checks that none reaches
// the job.
func TestOperatorEndpointsRefuseBrowserRequests(t *testing.T) {
	const host = "127.0.0.1:8080"
	type req struct {
		method, path, body, ctype, token string
		headers                          map[string]string
		host                             string // default host
	}
	for _, c := range []struct {
		name  string
		opts  Options
		req   req
		want  int
		acted bool // the job took a savepoint or stopped
	}{
		// The job as adclick run started it before the admin token was
		// required: loopback, no token.
		{"no token: text/plain savepoint", Options{Addr: host},
			req{method: "POST", path: "/v1/savepoints", body: "{}", ctype: "text/plain"}, 401, false},
		{"no token: text/plain stop", Options{Addr: host},
			req{method: "POST", path: "/v1/stop", body: `{"savepoint":true}`, ctype: "text/plain;charset=UTF-8"}, 401, false},
		{"no token: text/plain garbage", Options{Addr: host},
			req{method: "POST", path: "/v1/stop", body: "x", ctype: "text/plain"}, 401, false},
		{"no token: empty stop", Options{Addr: host},
			req{method: "POST", path: "/v1/stop"}, 401, false},
		{"no token: cross-origin empty form stop", Options{Addr: host},
			req{method: "POST", path: "/v1/stop", ctype: "application/x-www-form-urlencoded",
				headers: map[string]string{"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"}}, 403, false},

		// With a token, a request must also be same-origin and JSON.
		{"token: text/plain body", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/stop", body: `{"savepoint":true}`, ctype: "text/plain", token: adminTok}, 415, false},
		{"token: form body", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", body: "a=b", ctype: "application/x-www-form-urlencoded", token: adminTok}, 415, false},
		{"token: body without content type", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", body: "{}", token: adminTok}, 415, false},
		{"token: other origin", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, headers: map[string]string{"Origin": "http://evil.example"}}, 403, false},
		{"token: other port", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, headers: map[string]string{"Origin": "http://127.0.0.1:9999"}}, 403, false},
		{"token: null origin", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, headers: map[string]string{"Origin": "null"}}, 403, false},
		{"token: cross-site fetch", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, headers: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, false},
		{"token: rebound host name", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, host: "evil.example:8080",
				headers: map[string]string{"Origin": "http://evil.example:8080"}}, 421, false},

		// What the CLI, curl and a same-origin page send.
		{"token: no body", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok}, 201, true},
		{"token: JSON with charset", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/stop", body: `{"savepoint":true}`, ctype: "application/json; charset=utf-8", token: adminTok}, 200, true},
		{"token: same origin", Options{Addr: host, AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok,
				headers: map[string]string{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}}, 201, true},
		{"token: network server, its own name", Options{Addr: "0.0.0.0:8080", AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, host: "adclick.internal:8080",
				headers: map[string]string{"Origin": "http://adclick.internal:8080"}}, 201, true},
		{"token: localhost, default port", Options{Addr: "127.0.0.1:80", AdminToken: adminTok},
			req{method: "POST", path: "/v1/savepoints", token: adminTok, host: "localhost",
				headers: map[string]string{"Origin": "http://localhost:80"}}, 201, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeJob(t)
			var logs bytes.Buffer
			c.opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := newTestServer(t, f, c.opts)
			var body *strings.Reader
			if c.req.body != "" {
				body = strings.NewReader(c.req.body)
			}
			var r *http.Request
			if body != nil {
				r = httptest.NewRequest(c.req.method, c.req.path, body)
			} else {
				r = httptest.NewRequest(c.req.method, c.req.path, nil)
			}
			r.Host = host
			if c.req.host != "" {
				r.Host = c.req.host
			}
			if c.req.ctype != "" {
				r.Header.Set("Content-Type", c.req.ctype)
			}
			if c.req.token != "" {
				r.Header.Set("Authorization", "Bearer "+c.req.token)
			}
			for k, v := range c.req.headers {
				r.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, r)
			if rec.Code != c.want {
				t.Errorf("got status %d, want %d; body %s", rec.Code, c.want, rec.Body.String())
			}
			acted := f.spTaken > 0 || len(f.stops) > 0
			if acted != c.acted {
				t.Errorf("job acted (savepoints %d, stops %v): got %v, want %v", f.spTaken, f.stops, acted, c.acted)
			}
			if strings.Contains(logs.String(), adminTok) {
				t.Errorf("the admin token is in the log:\n%s", logs.String())
			}
		})
	}
}

// Reads stay open to any origin (a browser cannot read the answer across
// origins: the server sends no CORS headers).
func TestReadEndpointsIgnoreOrigin(t *testing.T) {
	s := newTestServer(t, newFakeJob(t), Options{})
	r := httptest.NewRequest("GET", "/v1/status", nil)
	r.Host = "127.0.0.1:8080"
	r.Header.Set("Origin", "http://evil.example")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Errorf("GET /v1/status from another origin: got %d, want 200", rec.Code)
	}
	if v := rec.Header().Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("Access-Control-Allow-Origin: got %q, want none", v)
	}
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, host string
		tls          bool
		want         bool
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080", false, true},
		{"http://LOCALHOST:8080", "localhost:8080", false, true},
		{"http://localhost", "localhost:80", false, true},
		{"https://h", "h:443", true, true},
		{"http://[::1]:8080", "[::1]:8080", false, true},
		{"https://127.0.0.1:8080", "127.0.0.1:8080", false, false}, // scheme differs
		{"http://127.0.0.1:8081", "127.0.0.1:8080", false, false},
		{"http://127.0.0.1", "127.0.0.1:8080", false, false},
		{"null", "127.0.0.1:8080", false, false},
		{"file://", "127.0.0.1:8080", false, false},
		{"http://127.0.0.1:8080/x", "127.0.0.1:8080", false, false},
		{"::", "127.0.0.1:8080", false, false},
	} {
		r := httptest.NewRequest("POST", "/v1/stop", nil)
		r.Host = c.host
		if c.tls {
			r = httptest.NewRequest("POST", "https://"+c.host+"/v1/stop", nil)
		}
		if got := sameOrigin(c.origin, r); got != c.want {
			t.Errorf("sameOrigin(%q, host %q, tls %v): got %v, want %v", c.origin, c.host, c.tls, got, c.want)
		}
	}
}
