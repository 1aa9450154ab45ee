package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
