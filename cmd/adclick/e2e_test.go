package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The end-to-end tests run the real binary as a subprocess, so that a crash
// (--fail-after-records: exit 137, no cleanup) is a real process death.

var binPath string

// sharedBuildEnv (with -trimpath) is the environment in which scripts/test.sh builds the one
// binary the tests share, as the Dockerfile does: a test that builds the
// binary again with these settings (a stamped version) compiles nothing
// anew, only links.
func sharedBuildEnv() []string {
	return append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
}

// TestMain builds the binary, or takes the one ADCLICK_TEST_BINARY names
// (scripts/test.sh builds it once for this package, deploy and runbooks).
//
// The slowest tests (the crash campaigns, the Kinesis, fleet and blue-green
// runs) call t.Parallel: each has its own data dirs, stream, table and
// Valkey prefix, and spends most of its time waiting on the binary and the
// servers, so two run at once (-parallel defaults to GOMAXPROCS). They
// start after every sequential test, so t.Setenv elsewhere cannot reach
// them.
func TestMain(m *testing.M) {
	if p := os.Getenv("ADCLICK_TEST_BINARY"); p != "" {
		binPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "adclick-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "adclick")
	build := exec.Command("go", "build", "-trimpath", "-o", binPath, ".")
	build.Env = sharedBuildEnv()
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build adclick:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// genTrace writes a trace with late, out-of-order, duplicate, invalid,
// clock-skewed and idle-shard traffic. Heavy-tail delays stay under the 2 h
// horizon, so every valid first copy is in the horizon and the reference
// count needs no watermark.
func genTrace(t *testing.T, path string, clicks int, seed int) {
	t.Helper()
	genTraceRate(t, path, clicks, seed, 100)
}

func genTraceRate(t *testing.T, path string, clicks int, seed int, rate float64) {
	t.Helper()
	run(t, 0, "gen", "--out", path, "--clicks", strconv.Itoa(clicks), "--rate", strconv.FormatFloat(rate, 'f', -1, 64), "--ads", "40",
		"--shards", "3", "--tail-fraction", "0.05", "--tail-max-ms", "5400000", "--dup-fraction", "0.03",
		"--invalid-fraction", "0.01", "--skew-fraction", "0.01", "--idle-every-ms", "80000", "--seed", strconv.Itoa(seed),
		"--start-ms", "1795946400000")
}

var runFlags = []string{"--listen", "", "--progress", "0", "--parallelism", "2", "--checkpoint-interval-ms", "5000",
	"--flush-writes-per-sec", "1000000", "--log-level", "warn"}

// run runs the binary, checks its exit code and returns its stdout.
func run(t *testing.T, wantCode int, args ...string) []byte {
	t.Helper()
	out, _ := runBoth(t, wantCode, args...)
	return out
}

// runBoth runs the binary, checks its exit code and returns its stdout and
// stderr.
func runBoth(t *testing.T, wantCode int, args ...string) ([]byte, []byte) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("adclick %v: %v", args, err)
	}
	if code != wantCode {
		t.Fatalf("adclick %v: exit code %d, want %d\nstderr:\n%s", args, code, wantCode, errb.String())
	}
	return out.Bytes(), errb.Bytes()
}

func replay(t *testing.T, trace, data string, extra ...string) {
	t.Helper()
	args := append([]string{"run", "--source", "file:" + trace, "--data", data}, runFlags...)
	run(t, 0, append(args, extra...)...)
}

type row struct {
	Entity    string `json:"entity"`
	Bucket    string `json:"bucket"`
	JobGen    *int64 `json:"job_gen"`
	FastValid *int64 `json:"fast_valid"`
	FastSpend *int64 `json:"fast_spend_micros"`
	FastCkpt  *int64 `json:"fast_ckpt"`
	LateValid *int64 `json:"late_valid"`
	LateSpend *int64 `json:"late_spend_micros"`
	LateCkpt  *int64 `json:"late_ckpt"`
	FastIx    string `json:"fast_ix"`
	LateIx    string `json:"late_ix"`
	Fence     *int64 `json:"wf"` // the fence of the last tagged write (a fleet's range lease)
}

func rows(t *testing.T, data string) ([]row, []byte) {
	t.Helper()
	out := run(t, 0, "rows", "--data", data)
	return parseRows(t, out), out
}

// runCode runs the binary and returns its exit code; an exit code other
// than 0 and 137 (an injected crash) is logged with the process's stderr.
func runCode(t *testing.T, args ...string) int {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if c := ee.ExitCode(); c != 137 {
			t.Logf("adclick %v: exit code %d\nstderr:\n%s", args, c, errb.String())
		}
		return ee.ExitCode()
	} else if err != nil {
		t.Fatalf("adclick %v: %v", args, err)
	}
	return 0
}

func parseRows(t *testing.T, out []byte) []row {
	t.Helper()
	var rs []row
	for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		r, ok := scanRow(l)
		if !ok {
			// Anything scanRow does not read (an escape, a nested value, a
			// fraction) goes through encoding/json.
			r = row{}
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatalf("rows: bad line %s: %v", l, err)
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// scanRow reads one line of `adclick rows` whose values are plain strings,
// integers and nulls, as encoding/json would into a row, and reports false
// for any other line. The crash campaigns parse the rows after every crash
// and every restore; under -race, encoding/json's reflection was half of
// the test process's CPU in TestSparseAdCrashes (38 CPU-s for the test and
// its children before, 27 with scanRow).
// TestScanRowMatchesEncodingJSON holds the two to the same result.
func scanRow(l []byte) (row, bool) {
	var r row
	i := skipSpace(l, 0)
	if i >= len(l) || l[i] != '{' {
		return r, false
	}
	i = skipSpace(l, i+1)
	if i < len(l) && l[i] == '}' {
		return r, skipSpace(l, i+1) == len(l)
	}
	for {
		key, j, ok := scanString(l, i)
		if !ok {
			return r, false
		}
		i = skipSpace(l, j)
		if i >= len(l) || l[i] != ':' {
			return r, false
		}
		i = skipSpace(l, i+1)
		if i >= len(l) {
			return r, false
		}
		var (
			str   string
			num   *int64
			isStr bool
		)
		switch c := l[i]; {
		case c == '"':
			str, j, ok = scanString(l, i)
			if !ok {
				return r, false
			}
			isStr, i = true, j
		case c == 'n':
			if !bytes.HasPrefix(l[i:], []byte("null")) {
				return r, false
			}
			i += 4
		case c == '-' || c >= '0' && c <= '9':
			j = i + 1
			for j < len(l) && l[j] >= '0' && l[j] <= '9' {
				j++
			}
			if j < len(l) && (l[j] == '.' || l[j] == 'e' || l[j] == 'E') {
				return r, false
			}
			v, err := strconv.ParseInt(string(l[i:j]), 10, 64)
			if err != nil {
				return r, false
			}
			num, i = &v, j
		default:
			return r, false // an object, array or boolean
		}
		if !r.set(key, str, isStr, num) {
			return r, false
		}
		i = skipSpace(l, i)
		if i >= len(l) {
			return r, false
		}
		if l[i] == '}' {
			return r, skipSpace(l, i+1) == len(l)
		}
		if l[i] != ',' {
			return r, false
		}
		i = skipSpace(l, i+1)
	}
}

// set stores one value under its JSON name; a string in an integer's place
// or the reverse is not scanRow's to judge (false). Other names are
// ignored, as encoding/json ignores them.
func (r *row) set(key, str string, isStr bool, num *int64) bool {
	var (
		sp *string
		np **int64
	)
	switch key {
	case "entity":
		sp = &r.Entity
	case "bucket":
		sp = &r.Bucket
	case "fast_ix":
		sp = &r.FastIx
	case "late_ix":
		sp = &r.LateIx
	case "job_gen":
		np = &r.JobGen
	case "fast_valid":
		np = &r.FastValid
	case "fast_spend_micros":
		np = &r.FastSpend
	case "fast_ckpt":
		np = &r.FastCkpt
	case "late_valid":
		np = &r.LateValid
	case "late_spend_micros":
		np = &r.LateSpend
	case "late_ckpt":
		np = &r.LateCkpt
	case "wf":
		np = &r.Fence
	}
	switch {
	case sp != nil && num != nil, np != nil && isStr:
		return false
	case sp != nil && isStr:
		*sp = str
	case np != nil:
		*np = num // null sets nil, as encoding/json sets a pointer
	}
	return true // a null string leaves the field alone, as encoding/json does
}

func skipSpace(l []byte, i int) int {
	for i < len(l) && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r' || l[i] == '\n') {
		i++
	}
	return i
}

// scanString reads a JSON string without escapes starting at l[i] == '"'.
func scanString(l []byte, i int) (string, int, bool) {
	if i >= len(l) || l[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(l); j++ {
		switch c := l[j]; {
		case c == '"':
			return string(l[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", j, false // escapes and non-ASCII: encoding/json's
		}
	}
	return "", len(l), false
}

type sums struct{ n, spend int64 }

// reference counts the trace independently of the job's code: each valid
// click id once (its first valid copy), by ad and the hour / minute of its
// clamped event time.
type reference struct {
	hour   map[[2]string]sums // (ad, "H…") → count
	minute map[[2]string]sums // (ad, "M…") → count
	valid  int
}

func buildReference(t *testing.T, path string) reference {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref := reference{hour: map[[2]string]sums{}, minute: map[[2]string]sums{}}
	seen := map[string]bool{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var c struct {
			ClickID, AdID, CampaignID, DeviceID, Shard *string
			Imp                                        *int64 `json:"impression_ms"`
			Dev                                        *int64 `json:"device_ms"`
			Spend                                      *int64 `json:"spend_micros"`
			Arr                                        *int64 `json:"arrival_ms"`
		}
		c2 := map[string]any{}
		if json.Unmarshal(l, &c2) != nil {
			continue // malformed
		}
		if err := json.Unmarshal(l, &struct {
			ClickID    **string `json:"click_id"`
			AdID       **string `json:"ad_id"`
			CampaignID **string `json:"campaign_id"`
			DeviceID   **string `json:"device_id"`
			Shard      **string `json:"shard"`
			Imp        **int64  `json:"impression_ms"`
			Dev        **int64  `json:"device_ms"`
			Spend      **int64  `json:"spend_micros"`
			Arr        **int64  `json:"arrival_ms"`
		}{&c.ClickID, &c.AdID, &c.CampaignID, &c.DeviceID, &c.Shard, &c.Imp, &c.Dev, &c.Spend, &c.Arr}); err != nil {
			continue
		}
		if c.ClickID == nil || *c.ClickID == "" || c.AdID == nil || *c.AdID == "" || c.CampaignID == nil || *c.CampaignID == "" ||
			c.DeviceID == nil || *c.DeviceID == "" || c.Shard == nil || *c.Shard == "" || c.Imp == nil || c.Dev == nil ||
			c.Spend == nil || c.Arr == nil || *c.Spend < 0 || *c.Imp <= 0 || *c.Arr <= 0 || *c.Imp > *c.Arr {
			continue
		}
		if seen[*c.ClickID] {
			continue
		}
		seen[*c.ClickID] = true
		ev := min(max(*c.Dev, *c.Imp), *c.Arr)
		tm := time.UnixMilli(ev).UTC()
		h := [2]string{*c.AdID, tm.Format("H2006-01-02T15Z")}
		m := [2]string{*c.AdID, tm.Format("M2006-01-02T15:04Z")}
		ref.hour[h] = sums{ref.hour[h].n + 1, ref.hour[h].spend + *c.Spend}
		ref.minute[m] = sums{ref.minute[m].n + 1, ref.minute[m].spend + *c.Spend}
		ref.valid++
	}
	return ref
}

func val(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// check verifies the rows against the reference; forbidden holds epochs
// that only a crashed run used.
func check(t *testing.T, rs []row, ref reference, forbidden map[int64]bool) {
	t.Helper()
	minuteSum := map[[2]string]sums{}
	hourRows := map[[2]string]row{}
	for _, r := range rs {
		for _, tag := range []*int64{r.FastCkpt, r.LateCkpt} {
			if tag != nil && forbidden[*tag] {
				t.Errorf("%s/%s carries tag %d, an epoch only a crashed run wrote", r.Entity, r.Bucket, *tag)
			}
		}
		switch r.Bucket[0] {
		case 'M':
			k := [2]string{r.Entity, r.Bucket}
			if r.LateValid != nil {
				t.Errorf("minute row %s/%s carries late_*", r.Entity, r.Bucket)
			}
			want := ref.minute[k]
			if val(r.FastValid) > want.n {
				t.Errorf("minute %s/%s: fast_valid %d exceeds the true count %d", r.Entity, r.Bucket, val(r.FastValid), want.n)
			}
			hb := "H" + r.Bucket[1:14] + "Z"
			hk := [2]string{r.Entity, hb}
			minuteSum[hk] = sums{minuteSum[hk].n + val(r.FastValid), minuteSum[hk].spend + val(r.FastSpend)}
		case 'H':
			hourRows[[2]string{r.Entity, r.Bucket}] = r
		}
	}
	for k, r := range hourRows {
		if got, want := (sums{val(r.FastValid), val(r.FastSpend)}), minuteSum[k]; got != want {
			t.Errorf("hour %s/%s: fast %+v, want the sum of its minute rows %+v", k[0], k[1], got, want)
		}
	}
	for k := range minuteSum {
		if _, ok := hourRows[k]; !ok && minuteSum[k].n > 0 {
			t.Errorf("hour %s/%s: minute rows sum to %+v but there is no hour row", k[0], k[1], minuteSum[k])
		}
	}
	keys := map[[2]string]bool{}
	for k := range ref.hour {
		keys[k] = true
	}
	for k := range hourRows {
		keys[k] = true
	}
	for k := range keys {
		r := hourRows[k]
		got := sums{val(r.FastValid) + val(r.LateValid), val(r.FastSpend) + val(r.LateSpend)}
		if want := ref.hour[k]; got != want {
			t.Errorf("hour %s/%s: fast+late = %+v, want %+v (valid, de-duplicated clicks in the file)", k[0], k[1], got, want)
		}
	}
}

func readHigh(t *testing.T, data string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "epoch-high"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func latestCkpt(t *testing.T, data string) int64 {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(data, "checkpoints"))
	var best int64
	for _, e := range ents {
		if s, ok := strings.CutPrefix(e.Name(), "ckpt-"); ok {
			if _, err := os.Stat(filepath.Join(data, "checkpoints", e.Name(), "meta.json")); err != nil {
				continue
			}
			if v, err := strconv.ParseInt(s, 10, 64); err == nil {
				best = max(best, v)
			}
		}
	}
	return best
}

func TestReplayIsDeterministicAndExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTrace(t, trace, 8000, 7)
	ref := buildReference(t, trace)
	if ref.valid < 7000 {
		t.Fatalf("reference has %d valid clicks, want most of 8000", ref.valid)
	}
	replay(t, trace, filepath.Join(dir, "a"))
	replay(t, trace, filepath.Join(dir, "b"))
	ra, a := rows(t, filepath.Join(dir, "a"))
	_, b := rows(t, filepath.Join(dir, "b"))
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs without crashes gave different rows (%d vs %d bytes)", len(a), len(b))
	}
	check(t, ra, ref, nil)
	var late int64
	for _, r := range ra {
		late += val(r.LateValid)
	}
	if late == 0 {
		t.Errorf("the trace produced no late totals; the test would not exercise the late path")
	}
	// A second run on the same data dir restores the final checkpoint, finds
	// nothing to read and leaves the rows unchanged.
	replay(t, trace, filepath.Join(dir, "a"))
	if _, a2 := rows(t, filepath.Join(dir, "a")); !bytes.Equal(a, a2) {
		t.Fatalf("re-running a finished replay changed the rows")
	}
}

// TestSparseReplayIsExact replays a trace of a few clicks per second, so
// that pre-aggregation flushes, watermarks and ticks meet in every order
// (a subtask often has no clicks between two ticks).
func TestSparseReplayIsExact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTraceRate(t, trace, 3000, 5, 3)
	ref := buildReference(t, trace)
	replay(t, trace, filepath.Join(dir, "a"), "--preagg-flush-ms", "300")
	rs, _ := rows(t, filepath.Join(dir, "a"))
	check(t, rs, ref, nil)
}

func TestCrashAnywhere(t *testing.T) {
	t.Parallel() // its own temp dir
	points := 50
	if testing.Short() {
		points = 8
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	const clicks = 6000
	genTrace(t, trace, clicks, 11)
	ref := buildReference(t, trace)
	rng := rand.New(rand.NewPCG(42, 43))
	for i := 0; i < points; i++ {
		data := filepath.Join(dir, fmt.Sprintf("run%02d", i))
		forbidden := map[int64]bool{}
		// One or two crashes at random records, then a run to the end.
		crashes := 1 + rng.IntN(2)
		var at []int
		for k := 0; k < crashes; k++ {
			n := 1 + rng.IntN(clicks)
			at = append(at, n)
			args := append([]string{"run", "--source", "file:" + trace, "--data", data, "--fail-after-records", strconv.Itoa(n)}, runFlags...)
			cmd := exec.Command(binPath, args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if err == nil {
				continue // the restored run had fewer than n records left
			}
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Fatalf("point %d: crash run: %v\n%s", i, err, errb.String())
			}
			c, h := latestCkpt(t, data), readHigh(t, data)
			for e := c + 1; e <= h; e++ {
				forbidden[e] = true
			}
		}
		replay(t, trace, data)
		rs, _ := rows(t, data)
		t.Run(fmt.Sprintf("point%02d_crash_at_%v", i, at), func(t *testing.T) { check(t, rs, ref, forbidden) })
		os.RemoveAll(data)
	}
}

// TestScanRowMatchesEncodingJSON holds scanRow to encoding/json: on every
// line it reads, the same row; and it declines what it does not read. The
// lines are `adclick rows` of a crashed and restored job (every attribute a
// row can carry but the finals) and hand-written edge cases.
func TestScanRowMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	writeClicks(t, trace, smallTrace(5, 4))
	data := filepath.Join(dir, "d")
	flags := withFlags("--parallelism", "2", "--checkpoint-interval-ms", "17000")
	ch := newCrashChain(t, trace, data)
	if !ch.crashAt(len(ch.tl.ends)/2, flags) {
		t.Fatal("the run reached the end of the trace before its crash")
	}
	_, crashed := rows(t, data)
	ch.finish(flags)
	_, out := rows(t, data)
	lines := bytes.Split(bytes.TrimSpace(append(crashed, out...)), []byte("\n"))
	for _, attr := range []string{`"job_gen":`, `"fast_ckpt":`, `"fast_ix":`, `"late_valid":`, `"late_ckpt":`, `"late_ix":`} {
		if !bytes.Contains(out, []byte(attr)) && !bytes.Contains(crashed, []byte(attr)) {
			t.Fatalf("no line of adclick rows carries %s: the lines do not exercise scanRow", attr)
		}
	}
	for _, l := range []string{
		`{}`,
		` { "entity" : "ad_1" , "bucket":"H2026-11-29T10Z", "fast_valid": -3, "late_ckpt": null, "wf": 0 } `,
		`{"entity":"ad_1","other":"x","fast_valid":7,"fast_valid":8}`,
		`{"entity":"ad_1","job_gen":9223372036854775807}`,
		`{"entity":"ad_1","entity":null,"fast_ckpt":4,"fast_ckpt":null}`,
	} {
		lines = append(lines, []byte(l))
	}
	for _, l := range lines {
		got, ok := scanRow(l)
		if !ok {
			t.Errorf("scanRow declined %s", l)
			continue
		}
		var want row
		if err := json.Unmarshal(l, &want); err != nil {
			t.Fatalf("encoding/json: %s: %v", l, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("scanRow(%s) = %s, encoding/json: %s", l, showRow(got), showRow(want))
		}
	}
	for _, l := range []string{
		`{"entity":"ad\u00e9"}`,            // an escape
		`{"entity":"adé"}`,                 // non-ASCII
		`{"fast_valid":1.5}`,               // a fraction
		`{"fast_valid":"1"}`,               // a string in an integer's place
		`{"entity":1}`,                     // the reverse
		`{"final":{"valid":1}}`,            // a nested value
		`{"entity":"a",}`,                  // not JSON
		`{"entity":"a"} x`,                 // trailing bytes
		`{"job_gen":99999999999999999999}`, // out of range
	} {
		if r, ok := scanRow([]byte(l)); ok {
			t.Errorf("scanRow(%s) = %s, want declined", l, showRow(r))
		}
	}
}

func showRow(r row) string {
	b, _ := json.Marshal(r)
	return string(b)
}
