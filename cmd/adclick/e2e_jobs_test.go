package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Helpers for end-to-end tests that drive a running job through its HTTP
// API: the job runs as a background process of the real binary, listening
// on a port the kernel picks (--listen 127.0.0.1:0); the test learns the
// port from the job's "http api" log line, waits for /readyz, and calls the
// operator commands (adclick savepoint, stop, sweep) against it.

// jobProc is a job process started by startJob.
type jobProc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	base  string // http://host:port of the job's API
	token string
	data  string // the job's --data, where it keeps the admin token it generated

	mu     sync.Mutex
	stderr bytes.Buffer

	done chan struct{} // closed once the process has exited
	code int           // exit code, valid after done
}

// jobStartTimeout bounds how long a job may take to open its API (restore
// and flush included); generous for a loaded machine.
const jobStartTimeout = 60 * time.Second

// startJob starts "adclick run ARGS..." with its API on a free loopback
// port, JSON logs at info level and no progress line, and returns once the
// API listens. token, if set, is the admin token. The process is killed at
// the end of the test if it is still running, and its log is printed if
// the test failed.
func startJob(t *testing.T, name, token string, args ...string) *jobProc {
	t.Helper()
	// The defaults come first, so that args can override them (a later flag
	// wins); the address and log format come last, as the helper needs them.
	full := append([]string{"run", "--log-level", "info", "--progress", "0"}, args...)
	full = append(full, "--listen", "127.0.0.1:0", "--log-format", "json")
	if token != "" {
		full = append(full, "--admin-token", token)
	}
	cmd := exec.Command(binPath, full...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	j := &jobProc{t: t, name: name, cmd: cmd, token: token, data: flagValue(args, "data"), done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			j.mu.Lock()
			j.stderr.Write(line)
			j.stderr.WriteByte('\n')
			j.mu.Unlock()
			var l struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &l) == nil && l.Msg == "http api" && l.Addr != "" {
				select {
				case addr <- l.Addr:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			j.code = 0
		case errors.As(err, &ee):
			j.code = ee.ExitCode()
		default:
			j.code = -1
		}
		close(j.done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.done:
		default:
			cmd.Process.Kill()
			<-j.done
		}
		if t.Failed() {
			t.Logf("log of %s (exit code %d):\n%s", name, j.code, j.log())
		}
	})
	select {
	case a := <-addr:
		j.base = "http://" + a
	case <-j.done:
		t.Fatalf("%s exited with code %d before its API listened:\n%s", name, j.code, j.log())
	case <-time.After(jobStartTimeout):
		t.Fatalf("%s: no API address logged within %v", name, jobStartTimeout)
	}
	return j
}

// flagValue returns the last value of --name in args ("" if none).
func flagValue(args []string, name string) string {
	v := ""
	for i, a := range args {
		switch {
		case a == "--"+name && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "--"+name+"="):
			v = strings.TrimPrefix(a, "--"+name+"=")
		}
	}
	return v
}

// log returns what the job has logged so far.
func (j *jobProc) log() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stderr.String()
}

// restored returns the checkpoint id of the job's "restored" log line.
func (j *jobProc) restored() (int64, bool) {
	for _, l := range strings.Split(j.log(), "\n") {
		var r struct {
			Msg        string `json:"msg"`
			Checkpoint *int64 `json:"checkpoint"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Msg == "restored" && r.Checkpoint != nil {
			return *r.Checkpoint, true
		}
	}
	return 0, false
}

// get sends GET path to the job and returns the status code and body.
func (j *jobProc) get(path string) (int, []byte, error) {
	c := http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, j.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if j.token != "" {
		req.Header.Set("Authorization", "Bearer "+j.token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

// waitReady waits until /readyz answers 200 (restore and flush finished,
// sources attached).
func (j *jobProc) waitReady() {
	j.t.Helper()
	j.waitUntil("ready", jobStartTimeout, func() (bool, string) {
		code, b, err := j.get("/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, b)
	})
}

// jobStatus is the part of GET /v1/status the tests look at.
type jobStatus struct {
	JobGen             int64 `json:"job_gen"`
	Parallelism        int   `json:"parallelism"`
	Ready              bool  `json:"ready"`
	Done               bool  `json:"done"`
	RestoredCheckpoint int64 `json:"restored_checkpoint"`
	Records            int64 `json:"records"`
	LastCheckpoint     *struct {
		ID          int64 `json:"id"`
		Parallelism int   `json:"parallelism"`
	} `json:"last_checkpoint"`
	Flush *struct {
		Epochs       int `json:"epochs"`
		ItemsScanned int `json:"items_scanned"`
		ItemsDeleted int `json:"items_deleted"`
		AttrsRemoved int `json:"attrs_removed"`
	} `json:"flush"`
}

// status reads GET /v1/status; ok is false if the job did not answer.
func (j *jobProc) status() (jobStatus, bool) {
	code, b, err := j.get("/v1/status")
	if err != nil || code != http.StatusOK {
		return jobStatus{}, false
	}
	var s jobStatus
	if err := json.Unmarshal(b, &s); err != nil {
		j.t.Fatalf("%s: /v1/status: %v: %s", j.name, err, b)
	}
	return s, true
}

// mustStatus is status that fails the test if the job does not answer.
func (j *jobProc) mustStatus() jobStatus {
	j.t.Helper()
	s, ok := j.status()
	if !ok {
		j.t.Fatalf("%s: /v1/status did not answer", j.name)
	}
	return s
}

// waitRecords waits until the job has read at least n records.
func (j *jobProc) waitRecords(n int64, timeout time.Duration) {
	j.t.Helper()
	j.waitUntil(fmt.Sprintf("%d records read", n), timeout, func() (bool, string) {
		s, ok := j.status()
		return ok && s.Records >= n, fmt.Sprintf("records=%d", s.Records)
	})
}

// waitUntil polls cond every 20 ms until it holds; it fails the test when
// the job exits first or timeout passes, with cond's last description.
func (j *jobProc) waitUntil(what string, timeout time.Duration, cond func() (bool, string)) {
	j.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, desc := cond()
		if ok {
			return
		}
		last = desc
		select {
		case <-j.done:
			j.t.Fatalf("%s exited with code %d while waiting for %s (last: %s)", j.name, j.code, what, last)
		default:
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("%s: not %s within %v (last: %s)", j.name, what, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cli runs an operator command (savepoint, stop, sweep, status) against the
// job and returns its standard output; it fails the test on a non-zero
// exit.
func (j *jobProc) cli(args ...string) []byte {
	j.t.Helper()
	out, errs, err := j.tryCLI(args...)
	if err != nil {
		j.t.Fatalf("adclick %s against %s: %v\nstderr: %s", strings.Join(args, " "), j.name, err, errs)
	}
	return out
}

// tryCLI runs an operator command against the job and returns its output,
// its standard error and its error.
func (j *jobProc) tryCLI(args ...string) ([]byte, string, error) {
	full := append([]string{args[0], "--api", j.base}, args[1:]...)
	if j.token != "" {
		full = append(full, "--token", j.token)
	} else if j.data != "" {
		full = append(full, "--data", j.data) // the command reads the token the job generated there
	}
	cmd := exec.Command(binPath, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.String(), err
}

// savepointAnswer is what "adclick savepoint" and "adclick stop" print (the
// API's SavepointInfo, or StopResponse's checkpoint).
type savepointAnswer struct {
	ID          int64  `json:"id"`
	JobGen      int64  `json:"job_gen"`
	Parallelism int    `json:"parallelism"`
	Final       bool   `json:"final"`
	Path        string `json:"path"`
}

// savepoint takes a savepoint through "adclick savepoint" and returns it.
func (j *jobProc) savepoint() savepointAnswer {
	j.t.Helper()
	out := j.cli("savepoint")
	var a savepointAnswer
	if err := json.Unmarshal(out, &a); err != nil || a.ID <= 0 || a.Path == "" {
		j.t.Fatalf("%s: adclick savepoint printed %s (%v); want an id and a path", j.name, out, err)
	}
	return a
}

// stop stops the job through "adclick stop" (with --savepoint if set),
// waits for the process to exit with code 0, and returns the final
// checkpoint.
//
// The job may exit before its answer to the stop request reaches the
// command (the HTTP server is closed, not shut down, when the job ends),
// so the command can fail with EOF although the stop succeeded. The
// checkpoint is then taken from the job's "stopped by operator" log line,
// and the race is logged.
func (j *jobProc) stop(savepoint bool) savepointAnswer {
	j.t.Helper()
	args := []string{"stop"}
	if savepoint {
		args = append(args, "--savepoint")
	}
	out, errs, cerr := j.tryCLI(args...)
	var a struct {
		Stopped    bool            `json:"stopped"`
		Checkpoint savepointAnswer `json:"checkpoint"`
	}
	if cerr == nil {
		if err := json.Unmarshal(out, &a); err != nil || !a.Stopped {
			j.t.Fatalf("%s: adclick stop printed %s (%v); want stopped: true", j.name, out, err)
		}
	}
	if code := j.wait(jobStartTimeout); code != 0 {
		j.t.Fatalf("%s exited with code %d after adclick stop (stop command: %v %s)", j.name, code, cerr, errs)
	}
	if cerr != nil {
		id, path, ok := j.stoppedLine()
		if !ok {
			j.t.Fatalf("adclick stop against %s: %v\nstderr: %s", j.name, cerr, errs)
		}
		j.t.Logf("%s: the job stopped (checkpoint %d) but adclick stop failed: %v; the answer was lost as the job exited", j.name, id, cerr)
		a.Checkpoint = savepointAnswer{ID: id, Path: path, Final: true}
	}
	if savepoint && a.Checkpoint.Path == "" {
		j.t.Fatalf("%s: adclick stop --savepoint: no savepoint path (answer %s)", j.name, out)
	}
	return a.Checkpoint
}

// stoppedLine returns the checkpoint and savepoint path of the job's
// "stopped by operator" log line.
func (j *jobProc) stoppedLine() (int64, string, bool) {
	for _, l := range strings.Split(j.log(), "\n") {
		var r struct {
			Msg        string `json:"msg"`
			Checkpoint *int64 `json:"checkpoint"`
			Savepoint  string `json:"savepoint"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Msg == "stopped by operator" && r.Checkpoint != nil {
			return *r.Checkpoint, r.Savepoint, true
		}
	}
	return 0, "", false
}

// signal sends sig to the job process.
func (j *jobProc) signal(sig os.Signal) {
	j.t.Helper()
	if err := j.cmd.Process.Signal(sig); err != nil {
		j.t.Fatalf("%s: signal %v: %v", j.name, sig, err)
	}
}

// terminate sends SIGTERM (a clean stop with a final checkpoint; with
// --drain every open window fires first) and waits for exit code 0.
func (j *jobProc) terminate() {
	j.t.Helper()
	j.signal(syscall.SIGTERM)
	if code := j.wait(jobStartTimeout); code != 0 {
		j.t.Fatalf("%s exited with code %d after SIGTERM", j.name, code)
	}
}

// wait waits for the process to exit and returns its exit code; it fails
// the test after timeout.
func (j *jobProc) wait(timeout time.Duration) int {
	j.t.Helper()
	select {
	case <-j.done:
		return j.code
	case <-time.After(timeout):
		j.t.Fatalf("%s did not exit within %v", j.name, timeout)
		return -1
	}
}

// metric returns the sum of every sample of the named metric (all label
// combinations) on the job's /metrics, and whether it was found.
func (j *jobProc) metric(name string) (float64, bool) {
	j.t.Helper()
	code, b, err := j.get("/metrics")
	if err != nil || code != http.StatusOK {
		j.t.Fatalf("%s: /metrics: %d %v", j.name, code, err)
	}
	return sumMetric(b, name)
}

// sumMetric adds up the samples of metric name in a Prometheus text
// exposition; name may end in a label set ({verdict="late"}) to pick one
// series.
func sumMetric(exposition []byte, name string) (float64, bool) {
	var sum float64
	found := false
	for _, l := range strings.Split(string(exposition), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest)
		if i := strings.LastIndexByte(l, '}'); i >= 0 {
			f = strings.Fields(l[i+1:])
		}
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// genRow is the part of a row the generation checks need.
type genRow struct {
	Entity   string `json:"entity"`
	Bucket   string `json:"bucket"`
	JobGen   *int64 `json:"job_gen"`
	FastCkpt *int64 `json:"fast_ckpt"`
	FastGen  *int64 `json:"fast_gen"`
	LateCkpt *int64 `json:"late_ckpt"`
	LateGen  *int64 `json:"late_gen"`
}

func parseGenRows(t *testing.T, out []byte) []genRow {
	t.Helper()
	var rs []genRow
	for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var r genRow
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("rows: bad line %s: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// countLines returns the number of non-empty lines of a file.
func countLines(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			n++
		}
	}
	return n
}

// TestStopAnswersBeforeExit checks that "adclick stop" gets the job's
// answer: the job must not close its HTTP server before the answer to the
// stop request is written (a stop command that fails with EOF tells the
// operator nothing about the final checkpoint or the savepoint path).
func TestStopAnswersBeforeExit(t *testing.T) {
	t.Parallel()
	for i := 0; i < 10; i++ {
		j := startJob(t, "gen job", "", "--source", "gen", "--gen-rate", "200", "--data", filepath.Join(t.TempDir(), "data"),
			"--parallelism", "1")
		j.waitReady()
		out, errs, err := j.tryCLI("stop", "--savepoint")
		if code := j.wait(jobStartTimeout); code != 0 {
			t.Fatalf("run %d: the job exited with code %d after stop", i, code)
		}
		if err != nil {
			t.Fatalf("run %d: adclick stop --savepoint failed although the job stopped: %v\n%s", i, err, errs)
		}
		if !bytes.Contains(out, []byte(`"stopped": true`)) {
			t.Fatalf("run %d: adclick stop printed %s", i, out)
		}
	}
}
