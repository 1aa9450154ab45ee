package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adclick/adclick/api"
	"github.com/adclick/adclick/sink/sinktest"
)

func TestEnsureAdminToken(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	tok, err := ensureAdminToken(dir, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) < 40 {
		t.Errorf("generated token %d characters long, want at least 40 (32 random bytes)", len(tok))
	}
	path := filepath.Join(dir, "admin-token")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no token file: %v", err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("token file mode: got %04o, want 0600", m)
	}
	again, err := ensureAdminToken(dir, "", log)
	if err != nil || again != tok {
		t.Errorf("second start: got %q, %v; want the same token", again, err)
	}
	if !strings.Contains(logs.String(), path) {
		t.Errorf("the log does not say where the token is:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), tok) {
		t.Errorf("the log holds the token:\n%s", logs.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("data dir holds %d entries, want only the token file (no temporary left)", len(ents))
	}

	// A given token wins and writes nothing.
	other := t.TempDir()
	if got, err := ensureAdminToken(other, "given", log); err != nil || got != "given" {
		t.Errorf("given token: got %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(other, "admin-token")); !os.IsNotExist(err) {
		t.Errorf("a token file was written although a token was given: %v", err)
	}

	// Two tokens from two data dirs differ.
	if tok2, _ := ensureAdminToken(t.TempDir(), "", log); tok2 == tok {
		t.Errorf("two generated tokens are equal")
	}
}

func TestAdminTokenFileRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"readable by others", "tok\n", 0o644, "chmod 600"},
		{"readable by the group", "tok\n", 0o640, "chmod 600"},
		{"empty", "\n", 0o600, "does not hold one token"},
		{"two words", "a b\n", 0o600, "does not hold one token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "admin-token")
			if err := os.WriteFile(path, []byte(c.content), c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil { // umask
				t.Fatal(err)
			}
			_, err := ensureAdminToken(dir, "", log)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("got %v, want an error naming %s and saying %q", err, path, c.want)
			}
		})
	}
}

// loopbackServer serves the real API over an opsJob on a loopback
// address with admin token tok.
func loopbackServer(t *testing.T, tok string) (*opsJob, string) {
	t.Helper()
	job := &opsJob{rows: sinktest.NewMemRows()}
	srv := httptest.NewUnstartedServer(nil)
	s, err := api.New(job, api.Options{Addr: srv.Listener.Addr().String(), AdminToken: tok, SampleEvery: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = s
	srv.Start()
	t.Cleanup(func() { srv.Close(); s.Close() })
	return job, srv.URL
}

// The operator commands find the token the job generated under --data,
// as adclick run writes it.
func TestOpsTokenFromDataDir(t *testing.T) {
	t.Setenv("ADCLICK_TOKEN", "")
	t.Setenv("ADCLICK_ADMIN_TOKEN", "")
	data := t.TempDir()
	tok, err := ensureAdminToken(data, "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	job, url := loopbackServer(t, tok)
	var out, errb bytes.Buffer
	if err := cmdSavepoint(context.Background(), []string{"--api", url, "--data", data}, &out, &errb); err != nil {
		t.Fatalf("savepoint with the token file under --data: %v", err)
	}
	t.Setenv("ADCLICK_DATA", data)
	if err := cmdStop(context.Background(), []string{"--api", url}, &out, &errb); err != nil {
		t.Fatalf("stop with the token file under $ADCLICK_DATA: %v", err)
	}
	if strings.Join(job.calls, ";") != "savepoint;stop" {
		t.Errorf("job calls: got %q, want savepoint then stop", job.calls)
	}

	// --token wins over the file.
	err = cmdSavepoint(context.Background(), []string{"--api", url, "--data", data, "--token", "wrong"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "wrong bearer token") {
		t.Errorf("--token wrong with a good token file: got %v, want a wrong-token error", err)
	}

	// The file of another job's data dir: 401, saying where the token came from.
	stale := t.TempDir()
	if _, err := ensureAdminToken(stale, "", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	err = cmdSavepoint(context.Background(), []string{"--api", url, "--data", stale}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "read from "+filepath.Join(stale, "admin-token")) {
		t.Errorf("token file of another job: got %v, want a 401 naming the file", err)
	}
	if len(job.calls) != 2 {
		t.Errorf("job calls: got %q, want no more", job.calls)
	}
}

// A token file is never sent to another machine.
func TestOpsTokenFileOnlyForLoopback(t *testing.T) {
	t.Setenv("ADCLICK_ADMIN_TOKEN", "")
	data := t.TempDir()
	if _, err := ensureAdminToken(data, "", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		api  string
		want bool
	}{
		{"http://127.0.0.1:8080", true}, {"http://localhost:1", true}, {"http://[::1]:8080", true},
		{"http://10.0.0.7:8080", false}, {"https://adclick.example.com", false}, {"http://127.0.0.1.example.com:80", false},
	} {
		cl := opsFlags{base: c.api, data: data, timeout: 1}
		if err := cl.check(); err != nil {
			t.Fatal(err)
		}
		if got := cl.token != ""; got != c.want {
			t.Errorf("--api %s: token from the file %v, want %v (note %q)", c.api, got, c.want, cl.tokenNote)
		}
	}
}
