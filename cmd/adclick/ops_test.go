package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/adclick/adclick/api"
	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// opsJob is an api.Job that records the operator calls it gets.
type opsJob struct {
	mu     sync.Mutex
	calls  []string
	rows   *sinktest.MemRows
	stopFn func() error
}

func (j *opsJob) record(s string) {
	j.mu.Lock()
	j.calls = append(j.calls, s)
	j.mu.Unlock()
}

func (j *opsJob) Status() runtime.Status {
	return runtime.Status{JobGen: 8, Parallelism: 4, Source: "gen", Ready: true, WatermarkMs: 1_795_947_300_999,
		ProcessingMs: 1_795_947_307_200, WatermarkLagMs: 6201}
}

func (j *opsJob) Savepoint(ctx context.Context) (runtime.Meta, string, error) {
	j.record("savepoint")
	return runtime.Meta{ID: 51, JobGen: 8}, "data/savepoints/sp-51", nil
}

func (j *opsJob) Stop(ctx context.Context, savepoint bool) (runtime.Meta, string, error) {
	if savepoint {
		j.record("stop savepoint")
	} else {
		j.record("stop")
	}
	if j.stopFn != nil {
		if err := j.stopFn(); err != nil {
			return runtime.Meta{}, "", err
		}
	}
	return runtime.Meta{ID: 52, JobGen: 8, Final: true}, "", nil
}

func (j *opsJob) Sweep(ctx context.Context, gen, since, high int64) (flush.Report, error) {
	j.record("sweep " + itoa(gen) + " " + itoa(since) + " " + itoa(high))
	return flush.Report{Epochs: 101, AttrsRemoved: 3}, nil
}

func (j *opsJob) Rows() sink.Rows     { return j.rows }
func (j *opsJob) Totals() sink.Totals { return nil }

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

// opsServer serves the real API over an opsJob, with an admin token.
func opsServer(t *testing.T) (*opsJob, string) {
	t.Helper()
	job := &opsJob{rows: sinktest.NewMemRows()}
	s, err := api.New(job, api.Options{Addr: "0.0.0.0:8080", AdminToken: "tok", SampleEvery: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return job, srv.URL
}

func TestOpsCommands(t *testing.T) {
	type cmdFunc func(context.Context, []string, io.Writer, io.Writer) error
	for _, c := range []struct {
		name     string
		cmd      cmdFunc
		args     []string
		wantCall string // "" = no operator call
		wantOut  []string
	}{
		{"savepoint", cmdSavepoint, nil, "savepoint", []string{`"id": 51`, `"path": "data/savepoints/sp-51"`}},
		{"stop", cmdStop, nil, "stop", []string{`"stopped": true`, `"id": 52`}},
		{"stop savepoint", cmdStop, []string{"--savepoint"}, "stop savepoint", []string{`"stopped": true`}},
		{"sweep", cmdSweep, []string{"--gen", "7", "--since", "51"}, "sweep 7 51 0", []string{`"gen": 7`, `"epochs": 101`, `"attrs_removed": 3`}},
		{"sweep high", cmdSweep, []string{"--gen=7", "--since=51", "--high=90"}, "sweep 7 51 90", []string{`"high": 90`}},
		{"status json", cmdStatus, []string{"--json"}, "", []string{`"job_gen": 8`, `"parallelism": 4`, `"data_complete_through": "2026-11-29T10:15:00.999Z"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			job, url := opsServer(t)
			var out, errb bytes.Buffer
			args := append([]string{"--api", url + "/", "--token", "tok"}, c.args...)
			if err := c.cmd(context.Background(), args, &out, &errb); err != nil {
				t.Fatalf("got error %v; stderr %s", err, errb.String())
			}
			var calls []string
			if c.wantCall != "" {
				calls = []string{c.wantCall}
			}
			if strings.Join(job.calls, ";") != strings.Join(calls, ";") {
				t.Errorf("job calls: got %q, want %q", job.calls, calls)
			}
			if !json.Valid(out.Bytes()) {
				t.Errorf("stdout is not JSON: %s", out.String())
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %s:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestOpsTokenFromEnvironment(t *testing.T) {
	job, url := opsServer(t)
	t.Setenv("ADCLICK_API", url)
	t.Setenv("ADCLICK_TOKEN", "tok")
	var out bytes.Buffer
	if err := cmdSavepoint(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatalf("savepoint with ADCLICK_API and ADCLICK_TOKEN: %v", err)
	}
	if len(job.calls) != 1 {
		t.Errorf("job calls: got %q, want one savepoint", job.calls)
	}
	// The admin token's own variable works too when ADCLICK_TOKEN is unset.
	t.Setenv("ADCLICK_TOKEN", "")
	t.Setenv("ADCLICK_ADMIN_TOKEN", "tok")
	if err := cmdSavepoint(context.Background(), nil, &out, io.Discard); err != nil {
		t.Fatalf("savepoint with ADCLICK_ADMIN_TOKEN: %v", err)
	}
}

func TestOpsErrors(t *testing.T) {
	t.Setenv("ADCLICK_ADMIN_TOKEN", "")
	t.Setenv("ADCLICK_DATA", t.TempDir()) // no token file there
	job, url := opsServer(t)
	// A port with nothing listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		name      string
		run       func() error
		usage     bool
		wantInErr []string
	}{
		{"no token", func() error {
			return cmdSavepoint(context.Background(), []string{"--api", url}, io.Discard, io.Discard)
		},
			false, []string{"401", "unauthorized", "missing bearer token", "--token", "no token file", "admin-token"}},
		{"wrong token", func() error {
			return cmdStop(context.Background(), []string{"--api", url, "--token", "nope", "--savepoint"}, io.Discard, io.Discard)
		}, false, []string{"401", "wrong bearer token"}},
		{"sweep not older", func() error {
			return cmdSweep(context.Background(), []string{"--api", url, "--token", "tok", "--gen", "8", "--since", "51"}, io.Discard, io.Discard)
		}, false, []string{"409", "conflict", "not older"}},
		{"sweep missing flags", func() error {
			return cmdSweep(context.Background(), []string{"--api", url, "--token", "tok"}, io.Discard, io.Discard)
		}, true, []string{"--gen", "--since"}},
		{"sweep bad gen", func() error {
			return cmdSweep(context.Background(), []string{"--gen", "seven", "--since", "1"}, io.Discard, io.Discard)
		}, true, []string{"gen"}},
		{"sweep negative", func() error {
			return cmdSweep(context.Background(), []string{"--gen", "0", "--since", "1"}, io.Discard, io.Discard)
		}, true, []string{"gen >= 1"}},
		{"bad api url", func() error {
			return cmdStatus(context.Background(), []string{"--api", "127.0.0.1:8080"}, io.Discard, io.Discard)
		}, true, []string{"--api", "http://"}},
		{"nothing listening", func() error { return cmdStatus(context.Background(), []string{"--api", dead}, io.Discard, io.Discard) },
			false, []string{dead + "/v1/status", "is the job running"}},
		{"job not running", func() error {
			job.stopFn = func() error { return runtime.ErrNotRunning }
			return cmdStop(context.Background(), []string{"--api", url, "--token", "tok"}, io.Discard, io.Discard)
		}, false, []string{"409", "not running"}},
		{"stray argument", func() error { return cmdStatus(context.Background(), []string{"now"}, io.Discard, io.Discard) },
			true, []string{"unexpected"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil {
				t.Fatal("got nil error")
			}
			var ue usageError
			if errors.As(err, &ue) != c.usage {
				t.Errorf("usage error: got %v, want %v (%v)", errors.As(err, &ue), c.usage, err)
			}
			for _, w := range c.wantInErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if n := len(job.calls); n != 1 { // only the refused stop reached the job
		t.Errorf("job calls: got %q, want only the stop that found the job not running", job.calls)
	}
}

// The commands send exactly what the API documents, checked against a bare
// handler rather than the real server.
func TestOpsRequests(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	base := []string{"--api", srv.URL, "--token", "T"}
	for _, run := range []func() error{
		func() error { return cmdSavepoint(ctx, base, io.Discard, io.Discard) },
		func() error { return cmdStop(ctx, append(base, "--savepoint"), io.Discard, io.Discard) },
		func() error {
			return cmdSweep(ctx, append(base, "--gen", "7", "--since", "51"), io.Discard, io.Discard)
		},
		func() error { return cmdStatus(ctx, base, io.Discard, io.Discard) },
	} {
		if err := run(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"POST /v1/savepoints Bearer T ",
		`POST /v1/stop Bearer T {"savepoint":true}`,
		`POST /v1/sweeps Bearer T {"gen":7,"since":51}`,
		"GET /v1/status Bearer T ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\ngot  %q\nwant %q", got, want)
	}
}

// TestValkeyTLSCAUnreadable: a CA file that cannot be used stops the job
// before it starts, saying why.
func TestValkeyTLSCAUnreadable(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binPath, "run", "--data", filepath.Join(dir, "data"), "--listen", "", "--progress", "0",
		"--valkey", "127.0.0.1:1", "--valkey-tls-ca", filepath.Join(dir, "absent.pem"))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("run with an absent --valkey-tls-ca: %v, want a non-zero exit", err)
	}
	if !strings.Contains(errb.String(), "valkey: tls:") || !strings.Contains(errb.String(), "absent.pem") {
		t.Fatalf("stderr %q does not say the CA file is unusable", errb.String())
	}
}
