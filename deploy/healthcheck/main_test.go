package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	// A port nothing listens on: listen, take the address, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/healthz"
	l.Close()
	// A server that accepts and never answers.
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()

	started := filepath.Join(t.TempDir(), "started")
	try := func(url, marker string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		ok, msg := probe(ctx, http.DefaultClient, url, marker)
		t.Logf("%s: %v %s", url, ok, msg)
		return ok
	}
	if !try(closed, started) {
		t.Error("not listening before the first answer: got unhealthy, want starting (healthy)")
	}
	if try(closed, "") {
		t.Error("not listening, no -started file: got healthy, want unhealthy")
	}
	if !try(srv.URL+"/healthz", started) {
		t.Error("200: got unhealthy")
	}
	if _, err := os.Stat(started); err != nil {
		t.Fatalf("the first 2xx answer did not create the -started file: %v", err)
	}
	if try(closed, started) {
		t.Error("not listening after the API had answered: got healthy, want unhealthy")
	}
	status = http.StatusServiceUnavailable
	if try(srv.URL+"/healthz", started) {
		t.Error("503: got healthy")
	}
	if try(hang.URL+"/healthz", "") {
		t.Error("no answer within the timeout: got healthy")
	}
}
