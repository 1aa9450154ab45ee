package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/fleet"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/windowing"
)

// TestFleetServerRefusesForeignHost: a fleet worker's HTTP server (its
// own handler, not api.Server) has the Host rule of adclick run's API: on
// loopback a rebound name gets 421 on every endpoint, a loopback or
// allowed name is answered, and beyond loopback --allowed-hosts applies.
func TestFleetServerRefusesForeignHost(t *testing.T) {
	w, err := lease.NewWorker(leasetest.NewMem(), lease.WorkerOptions{Table: "leases", Job: "j", ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fleet.New(fleet.Options{Worker: w, Config: func(windowing.KeyGroups) (runtime.Config, error) {
		t.Error("no range may start")
		return runtime.Config{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr    string
		allowed []string
		host    string
		want    int
	}{
		{"127.0.0.1:9090", nil, "evil.example.com:9090", http.StatusMisdirectedRequest},
		{"127.0.0.1:9090", nil, "127.0.0.1:9090", http.StatusOK},
		{"127.0.0.1:9090", []string{"worker.internal"}, "worker.internal:9090", http.StatusOK},
		{"0.0.0.0:9090", []string{"worker.internal"}, "evil.example.com:9090", http.StatusMisdirectedRequest},
		{"0.0.0.0:9090", []string{"worker.internal"}, "worker.internal:9090", http.StatusOK},
		{"0.0.0.0:9090", nil, "evil.example.com:9090", http.StatusOK},
	} {
		h, err := fleetServer(f, fleetArgs{workerID: "w1", job: "j", allowedHosts: c.allowed}, prometheus.NewRegistry(), c.addr)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/v1/status", "/metrics", "/healthz"} {
			r := httptest.NewRequest("GET", path, nil)
			r.Host = c.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != c.want {
				t.Errorf("listen %s, allowed %q: GET %s with Host %q: got %d, want %d", c.addr, c.allowed, path, c.host, rec.Code, c.want)
			}
		}
	}
	if _, err := fleetServer(f, fleetArgs{allowedHosts: []string{"http://x"}}, prometheus.NewRegistry(), "127.0.0.1:9090"); err == nil {
		t.Error("a malformed allowed host was taken, want an error")
	}
}

// TestRunAllowedHosts runs the real binary on loopback with
// ADCLICK_RUN_ALLOWED_HOSTS (the variable of --allowed-hosts): a read
// endpoint answers a loopback Host and the allowed one, and refuses a
// rebound name with 421; a malformed entry is a usage error.
func TestRunAllowedHosts(t *testing.T) {
	for _, args := range [][]string{{"--allowed-hosts", "http://dash.example"}, {"--allowed-hosts", "dash.example:8080"}} {
		err := cmdRun(context.Background(), append([]string{"--data", t.TempDir()}, args...), io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--allowed-hosts") {
			t.Errorf("run %v: got %v, want a usage error naming --allowed-hosts", args, err)
		}
	}

	t.Setenv("ADCLICK_RUN_ALLOWED_HOSTS", "dash.example, .corp.example")
	j := startJob(t, "job", "", "--source", "gen", "--gen-rate", "100", "--data", filepath.Join(t.TempDir(), "data"), "--parallelism", "1")
	j.waitReady()
	port := j.base[strings.LastIndex(j.base, ":")+1:]
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"dash.example:" + port, http.StatusOK},
		{"ops.corp.example:" + port, http.StatusOK},
		{"evil.example.com:" + port, http.StatusMisdirectedRequest},
		{"dash.example.evil.com:" + port, http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/v1/status", "/metrics"} {
			req, err := http.NewRequest(http.MethodGet, j.base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = c.host
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("GET %s, Host %s: %v", path, c.host, err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("GET %s with Host %s: got %d, want %d", path, c.host, resp.StatusCode, c.want)
			}
		}
	}
}
