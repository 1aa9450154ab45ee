package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunGeneratesAdminToken runs the real binary without --admin-token:
// it generates a token in <--data>/admin-token (mode 0600) and logs where
// it is, never the token; a request as a web page of another origin sends
// it (text/plain, no token) is refused and the job runs on; the operator
// commands find the token under --data; status reads the job's own
// metrics; a restart reuses the token.
func TestRunGeneratesAdminToken(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"--source", "gen", "--gen-rate", "500", "--data", data, "--parallelism", "1", "--checkpoint-interval-ms", "1000"}
	j := startJob(t, "job", "", args...)
	j.waitReady()

	path := filepath.Join(data, "admin-token")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no admin token file: %v", err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("admin token file mode: got %04o, want 0600", m)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if strings.Contains(j.log(), tok) {
		t.Errorf("the job logged its admin token")
	}
	if !strings.Contains(j.log(), `"file":"`+path+`"`) {
		t.Errorf("the job's log does not say where the admin token is (%s):\n%s", path, j.log())
	}

	for _, c := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"no token", map[string]string{"Content-Type": "text/plain"}, http.StatusUnauthorized},
		{"other origin", map[string]string{"Content-Type": "text/plain", "Origin": "http://127.0.0.1:9"}, http.StatusForbidden},
		{"token, text/plain", map[string]string{"Content-Type": "text/plain", "Authorization": "Bearer " + tok}, http.StatusUnsupportedMediaType},
	} {
		req, err := http.NewRequest(http.MethodPost, j.base+"/v1/stop", strings.NewReader(`{"savepoint":true}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: POST /v1/stop answered %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	if code, _, err := j.get("/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("after the refused stops: /readyz %d %v, want 200 (the job must still run)", code, err)
	}

	j.waitUntil("a checkpoint and a few status samples", jobStartTimeout, func() (bool, string) {
		s, ok := j.status()
		return ok && s.LastCheckpoint != nil && s.LastCheckpoint.ID >= 2, "no second checkpoint yet"
	})
	out := string(j.cli("status"))
	words := strings.Join(strings.Fields(out), " ")
	for _, w := range []string{"watermark 20", "(data complete through), lag ", "checkpoint ", " ago), ", "late clicks ",
		"sinks row writes ", "running totals up", "shards 4 (", "SHARD WATERMARK LAG VS JOB STATE CONSUMER LAG S0 20"} {
		if !strings.Contains(words, w) {
			t.Errorf("adclick status lacks %q:\n%s", w, out)
		}
	}
	var js struct {
		Verdicts    map[string]int64 `json:"verdicts"`
		Checkpoints struct {
			Completed *int64 `json:"completed"`
			Failed    *int64 `json:"failed"`
		} `json:"checkpoints"`
		Sinks struct {
			RowWrites     *int64 `json:"row_writes"`
			RefusedWrites *int64 `json:"refused_writes"`
			TotalsStoreUp *bool  `json:"totals_store_up"`
		} `json:"sinks"`
	}
	if err := json.Unmarshal(j.cli("status", "--json"), &js); err != nil {
		t.Fatal(err)
	}
	// The job's metrics reach the status: a metric renamed in runtime
	// without the status following would leave these null.
	if js.Verdicts["counted"] == 0 || js.Checkpoints.Completed == nil || *js.Checkpoints.Completed < 2 || js.Checkpoints.Failed == nil ||
		js.Sinks.RowWrites == nil || js.Sinks.RefusedWrites == nil || js.Sinks.TotalsStoreUp == nil || !*js.Sinks.TotalsStoreUp {
		t.Errorf("status --json: verdicts %v, checkpoints %+v, sinks %+v; want the job's counts", js.Verdicts, js.Checkpoints, js.Sinks)
	}

	sp := j.savepoint() // with the token read from --data
	t.Logf("savepoint %d with the generated token", sp.ID)
	j.stop(false)

	j2 := startJob(t, "job restarted", "", args...)
	j2.waitReady()
	if b2, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b2)) != tok {
		t.Errorf("after a restart the admin token changed (or is gone: %v)", err)
	}
	j2.stop(false)
}
