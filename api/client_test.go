package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// clientServer serves a real Server over a fake job over HTTP.
func clientServer(t *testing.T) (*fakeJob, *httptest.Server) {
	t.Helper()
	f := newFakeJob(t)
	srv := httptest.NewServer(newTestServer(t, f, Options{AdminToken: adminTok}))
	t.Cleanup(srv.Close)
	return f, srv
}

// TestClientCallsTheServer: the client's operator calls and status read
// reach the job through the real server, answers copied indented.
func TestClientCallsTheServer(t *testing.T) {
	f, srv := clientServer(t)
	ctx := context.Background()
	c := &Client{Base: srv.URL + "/", Token: adminTok, Timeout: 5 * time.Second}

	var out bytes.Buffer
	if err := c.Call(ctx, http.MethodPost, "/v1/savepoints", nil, &out); err != nil {
		t.Fatal(err)
	}
	if f.spTaken != 1 {
		t.Errorf("savepoints taken: got %d, want 1", f.spTaken)
	}
	if !strings.Contains(out.String(), "\n  \"id\": 42,") || !strings.HasSuffix(strings.TrimRight(out.String(), "\n"), "}") || !json.Valid(out.Bytes()) {
		t.Errorf("savepoint answer: got %q, want indented JSON with id 42", out.String())
	}

	out.Reset()
	if err := c.Call(ctx, http.MethodPost, "/v1/stop", map[string]bool{"savepoint": true}, &out); err != nil {
		t.Fatal(err)
	}
	if len(f.stops) != 1 || !f.stops[0] {
		t.Errorf("stops: got %v, want one with a savepoint", f.stops)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.JobGen != 7 || len(st.Shards) != 3 {
		t.Errorf("status: got job gen %d with %d shards, want 7 with 3", st.JobGen, len(st.Shards))
	}
}

// TestClientErrors: an error answer is a *StatusError with the API's code
// and message; a timeout, an unreachable server and an answer that is not
// JSON are errors saying so; all are api:-prefixed.
func TestClientErrors(t *testing.T) {
	f, srv := clientServer(t)
	ctx := context.Background()

	_, err := (&Client{Base: srv.URL}).Fetch(ctx, http.MethodPost, "/v1/savepoints", nil)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized || se.Code != "unauthorized" || se.Message == "" {
		t.Fatalf("no token: got %v, want a *StatusError 401 unauthorized", err)
	}
	if want := "api: POST " + srv.URL + "/v1/savepoints: 401 Unauthorized (unauthorized): "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("no token: got %q, want it to start with %q", err, want)
	}
	_, err = (&Client{Base: srv.URL, Token: "wrong"}).Fetch(ctx, http.MethodPost, "/v1/sweeps", map[string]int64{"gen": 7, "since": 1})
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized || !strings.Contains(se.Message, "wrong bearer token") {
		t.Errorf("wrong token: got %v, want 401 wrong bearer token", err)
	}
	if len(f.sweeps) != 0 || f.spTaken != 0 {
		t.Errorf("the job acted on refused calls: sweeps %v, savepoints %d", f.sweeps, f.spTaken)
	}

	// Answers of something that is not the API.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gone":
			http.Error(w, "no such thing", http.StatusNotFound)
		case "/html":
			io.WriteString(w, "<html>hello</html>")
		case "/slow":
			<-r.Context().Done()
		}
	}))
	defer plain.Close()
	c := &Client{Base: plain.URL, Timeout: 100 * time.Millisecond}
	_, err = c.Fetch(ctx, http.MethodGet, "/gone", nil)
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || se.Code != "" || se.Body != "no such thing" ||
		err.Error() != "api: GET "+plain.URL+"/gone: 404 Not Found: no such thing" {
		t.Errorf("plain 404: got %#v (%v), want a *StatusError with the body", se, err)
	}
	if _, err = c.Fetch(ctx, http.MethodGet, "/html", nil); err == nil || !strings.Contains(err.Error(), "the answer is not JSON") {
		t.Errorf("HTML answer: got %v, want a not-JSON error", err)
	}
	if _, err = c.Fetch(ctx, http.MethodGet, "/slow", nil); !errors.Is(err, context.DeadlineExceeded) ||
		!strings.HasPrefix(err.Error(), "api: GET "+plain.URL+"/slow: no answer within 100ms: ") {
		t.Errorf("slow answer: got %v, want no answer within 100ms, wrapping the deadline", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	if _, err = (&Client{Base: dead}).Fetch(ctx, http.MethodGet, "/v1/status", nil); err == nil || !strings.HasPrefix(err.Error(), "api: GET "+dead+"/v1/status: ") {
		t.Errorf("nothing listening: got %v, want an api: error naming the URL", err)
	}
}

// TestClientRequests: what the client sends, as the API documents it.
func TestClientRequests(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, strings.Join([]string{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"),
			r.Header.Get("Accept"), string(b)}, " | "))
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	ctx := context.Background()
	c := &Client{Base: srv.URL, Token: "T"}
	if err := c.Call(ctx, http.MethodPost, "/v1/sweeps", map[string]int64{"gen": 7, "since": 51}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Client{Base: srv.URL}).Fetch(ctx, http.MethodGet, "/v1/status", nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`POST | /v1/sweeps | Bearer T | application/json | application/json | {"gen":7,"since":51}`,
		`GET | /v1/status |  |  | application/json | `,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\ngot  %q\nwant %q", got, want)
	}
}
