//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/valkey-io/valkey-go"

	"github.com/adclick/adclick/internal/testenv"
)

// fleetWorker is one `adclick run --fleet` process.
type fleetWorker struct {
	id   string
	addr string
	log  string // its JSON log
	cmd  *exec.Cmd
	done chan error
}

// fleetLog is one line of a worker's JSON log.
type fleetLog struct {
	Time    time.Time `json:"time"`
	Msg     string    `json:"msg"`
	Range   string    `json:"range"`
	Found   *bool     `json:"found"`
	Handoff bool      `json:"handoff"`
	To      string    `json:"to"` // the worker a range is handed over to
	// CallMs is the poll spacing a range's reader was given.
	CallMs *int64 `json:"call_interval_ms"`
	// FromEpoch and ToEpoch are a fence sweep's epochs.
	FromEpoch *int64 `json:"from_epoch"`
	ToEpoch   *int64 `json:"to_epoch"`
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startWorker(t *testing.T, dir, id string, args []string) *fleetWorker {
	t.Helper()
	w := &fleetWorker{id: id, addr: freeAddr(t), log: filepath.Join(dir, id+".log"), done: make(chan error, 1)}
	f, err := os.Create(w.log)
	if err != nil {
		t.Fatal(err)
	}
	w.cmd = exec.Command(binPath, append(slices.Clone(args), "--worker-id", id, "--listen", w.addr,
		"--data", filepath.Join(dir, "data-"+id))...)
	w.cmd.Stderr = f
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait(); f.Close() }()
	t.Cleanup(func() { w.cmd.Process.Kill() })
	return w
}

// status returns the worker's ranges and their status, or nil if it does
// not answer.
func (w *fleetWorker) status() map[string]struct {
	Shards []struct {
		ID         string
		MaxEventMs int64
	} `json:"shards"`
} {
	resp, err := http.Get("http://" + w.addr + "/v1/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st struct {
		Ranges map[string]struct {
			Shards []struct {
				ID         string
				MaxEventMs int64
			} `json:"shards"`
		} `json:"ranges"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	return st.Ranges
}

// ranges returns the ranges the worker runs.
func (w *fleetWorker) ranges() []string {
	var out []string
	for r := range w.status() {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// logs returns the worker's log lines at or after since.
func (w *fleetWorker) logs(t *testing.T, since time.Time) []fleetLog {
	t.Helper()
	f, err := os.Open(w.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []fleetLog
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l fleetLog
		if json.Unmarshal(sc.Bytes(), &l) == nil && !l.Time.Before(since) {
			out = append(out, l)
		}
	}
	return out
}

// dumpLogs, on a failed test, writes each worker's decisions and troubles
// (its info lines about ranges and slots, its warnings and errors) to the
// test log: the workers' own log files go with the test's temp dir.
func dumpLogs(t *testing.T, ws []*fleetWorker) {
	t.Helper()
	if !t.Failed() {
		return
	}
	for _, w := range ws {
		b, err := os.ReadFile(w.log)
		if err != nil {
			t.Logf("worker %s: %v", w.id, err)
			continue
		}
		var keep []string
		for _, line := range strings.Split(string(b), "\n") {
			var l struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				if line != "" {
					keep = append(keep, line) // not JSON: a panic or the runtime's own words
				}
				continue
			}
			if l.Level != "INFO" || strings.Contains(l.Msg, "range") || strings.Contains(l.Msg, "slot") ||
				strings.Contains(l.Msg, "flush done") {
				keep = append(keep, line)
			}
		}
		if len(keep) > 400 {
			keep = append(keep[:200:200], append([]string{"…"}, keep[len(keep)-200:]...)...)
		}
		t.Logf("worker %s log (%d of its lines):\n%s", w.id, len(keep), strings.Join(keep, "\n"))
	}
}

// holders maps each range to the workers that run it.
func holders(ws []*fleetWorker) map[string][]string {
	out := map[string][]string{}
	for _, w := range ws {
		for _, r := range w.ranges() {
			out[r] = append(out[r], w.id)
		}
	}
	return out
}

// settled reports whether every range runs on exactly one of ws, and each
// of ws runs at least one.
func settled(ws []*fleetWorker, ranges int) bool {
	h := holders(ws)
	if len(h) != ranges {
		return false
	}
	for _, hs := range h {
		if len(hs) != 1 {
			return false
		}
	}
	for _, w := range ws {
		if len(w.ranges()) == 0 {
			return false
		}
	}
	return true
}

// midCheckpoint waits until one of worker id's ranges is in the middle of a
// checkpoint: its lease item has an epoch opened above the committed
// checkpoint (the barrier is out, the checkpoint not yet committed).
func midCheckpoint(t *testing.T, table, job, id string) {
	t.Helper()
	ddb := testenv.DynamoDBClient(t)
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		out, err := ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table + "-leases")})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			if strings.HasPrefix(testenv.AttrS(it, "lease_key"), job+"#kg") && strings.HasPrefix(testenv.AttrS(it, "owner"), id+"~") &&
				testenv.AttrN(it, "epoch_high") > testenv.AttrN(it, "checkpoint") {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("worker %s was never seen in the middle of a checkpoint in 20 s: killed anyway", id)
}

// owesSweep reports whether a range of the job owes a fence sweep.
func owesSweep(t *testing.T, table, job string) bool {
	t.Helper()
	out, err := testenv.DynamoDBClient(t).Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table + "-leases"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range out.Items {
		if _, owes := it["sweep_due"]; owes && strings.HasPrefix(testenv.AttrS(it, "lease_key"), job+"#kg") {
			return true
		}
	}
	return false
}

// sweptEpochs returns, per range, the epochs of every fence sweep the
// workers' logs say a takeover owed, and checks that each was done.
func sweptEpochs(t *testing.T, ws []*fleetWorker) map[string][][2]int64 {
	t.Helper()
	owed := map[string][][2]int64{}
	done := map[string]map[[2]int64]bool{}
	for _, w := range ws {
		for _, l := range w.logs(t, time.Time{}) {
			if l.FromEpoch == nil || l.ToEpoch == nil {
				continue
			}
			e := [2]int64{*l.FromEpoch, *l.ToEpoch}
			switch l.Msg {
			case "fence sweep owed":
				owed[l.Range] = append(owed[l.Range], e)
			case "fence sweep done":
				if done[l.Range] == nil {
					done[l.Range] = map[[2]int64]bool{}
				}
				done[l.Range][e] = true
			}
		}
	}
	for r, es := range owed {
		for _, e := range es {
			if !done[r][e] {
				t.Errorf("range %s: the fence sweep of epochs %d-%d was owed and never done", r, e[0], e[1])
			}
		}
	}
	return owed
}

// inSwept reports whether epoch e of range r is one a sweep removed.
func inSwept(swept map[string][][2]int64, r string, e int64) bool {
	for _, iv := range swept[r] {
		if e >= iv[0] && e <= iv[1] {
			return true
		}
	}
	return false
}

// lakeObjectName is a fenced lake object's name: its range, fence and epoch.
var lakeObjectName = regexp.MustCompile(`/part-(kg\d+-\d+)-f(\d+)-.*-e(\d{12})\.parquet$`)

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFleetEndToEnd runs one job on three `adclick run --fleet` processes
// against kinesalite (4 shards), dynalite, s3rver and redis-server, with
// the job's key groups cut into 6 ranges. While the trace is put in parts,
// a worker is paused with SIGSTOP for longer than its lease, while it reads
// (its un-checkpointed writes in flight), and resumed with SIGCONT once the
// others have taken its ranges over; another is killed with SIGKILL in the
// middle of a checkpoint (an epoch opened in a range's lease item, not yet
// committed); a fourth is added and one is stopped with SIGTERM. After the
// pause and the kill, the survivors restore and flush exactly the ranges
// the victim held (their logs say which), besides any range a handoff
// moved, and each takeover owes a fence sweep, done once --fence-sweep-delay
// has passed. At the end, a SIGTERM drains every range, and the rows equal
// an independent count: for every (ad, hour) fast + late = the valid,
// de-duplicated clicks, each hour the sum of its minutes, no minute above
// its truth; the running totals in Valkey equal the rows; no range owes a
// sweep, and no row or lake object carries a write of a swept epoch (an
// old holder's); and the recount's final_* equals the independent count.
func TestFleetEndToEnd(t *testing.T) {
	t.Parallel() // its own temp dir, stream, table and prefix
	awsSlot(t)
	testenv.Kinesis(t)
	testenv.DynamoDB(t)
	testenv.S3(t)
	vaddr := testenv.Valkey(t)
	rng := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	const ranges = 6
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, table, bucket, job := "fs"+suffix, "ft"+suffix, "s3://fb"+suffix, "fleet"+suffix
	run(t, 0, "setup", "--stream", stream, "--shards", "4", "--sink", "dynamodb:"+table, "--checkpoints", bucket+"/ckpt",
		"--ranges", strconv.Itoa(ranges), "--job-name", job)

	const clicks = 4000
	start := time.Now().Add(-clicks * 10 * time.Millisecond).UnixMilli()
	trace := filepath.Join(dir, "trace.jsonl")
	run(t, 0, "gen", "--out", trace, "--clicks", strconv.Itoa(clicks), "--rate", "100", "--ads", "40", "--shards", "4",
		"--tail-fraction", "0.05", "--tail-max-ms", "5400000", "--dup-fraction", "0.03", "--invalid-fraction", "0.01",
		"--skew-fraction", "0", "--seed", strconv.Itoa(rng.IntN(1000)+1), "--start-ms", strconv.FormatInt(start, 10))
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSpace(b), []byte("\n"))
	const parts = 5
	put := func(part int) {
		t.Helper()
		p := filepath.Join(dir, fmt.Sprintf("part%d.jsonl", part))
		if err := os.WriteFile(p, bytes.Join(lines[part*len(lines)/parts:(part+1)*len(lines)/parts], nil), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, 0, "put", "--from", p, "--to", "kinesis:"+stream)
	}

	prefix := "f" + suffix
	args := []string{"run", "--fleet", "--source", "kinesis:" + stream, "--sink", "dynamodb:" + table, "--valkey", vaddr,
		"--valkey-prefix", prefix, "--checkpoints", bucket + "/ckpt", "--lake", bucket + "/lake", "--job-name", job,
		"--lease-ms", "5000", "--log-format", "json", "--progress", "0", "--parallelism", "2", "--checkpoint-interval-ms", "1000",
		"--flush-writes-per-sec", "1000000", "--kinesis-limit", "100", "--drain",
		// kinesalite has no read limit: the survivors' catch-up after a
		// kill must not wait on the fleet's spacing (N ranges × 200 ms).
		"--kinesis-call-interval-ms", "200",
		// Long enough for the paused worker's writes in flight to land
		// before the sweep (in AWS the signature window sees to that).
		"--fence-sweep-delay", "5s"}
	workers := []*fleetWorker{startWorker(t, dir, "w1", args), startWorker(t, dir, "w2", args), startWorker(t, dir, "w3", args)}
	everyone := slices.Clone(workers)
	defer func() { dumpLogs(t, everyone) }()
	put(0)
	waitUntil(t, "three workers to share the ranges", 90*time.Second, func() bool { return settled(workers, ranges) })
	// A spacing given is used by every range as it is (without the flag
	// each range would space its calls by ranges × 200 ms:
	// TestRangePollSpacing).
	spaced := 0
	for _, w := range workers {
		for _, l := range w.logs(t, time.Time{}) {
			if l.Msg != "range reads kinesis" {
				continue
			}
			spaced++
			if l.CallMs == nil || *l.CallMs != 200 {
				t.Errorf("worker %s: range %s polls with call_interval_ms %v, want the 200 given", w.id, l.Range, l.CallMs)
			}
		}
	}
	if spaced < ranges {
		t.Errorf("%d ranges logged their poll spacing, want at least %d", spaced, ranges)
	}

	// Pause a worker past its lease (k = 0), then kill another in the
	// middle of a checkpoint (k = 1).
	for k := range 2 {
		victim := workers[rng.IntN(len(workers))]
		held := victim.ranges()
		if k == 0 {
			put(1) // so that it has writes in flight when it stops
			time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		} else {
			midCheckpoint(t, table, job, victim.id)
		}
		killedAt := time.Now()
		sig := map[int]syscall.Signal{0: syscall.SIGSTOP, 1: syscall.SIGKILL}[k]
		if err := victim.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			<-victim.done
			put(2)
		}
		rest := slices.DeleteFunc(slices.Clone(workers), func(w *fleetWorker) bool { return w == victim })
		waitUntil(t, "the survivors to take the killed worker's ranges", 90*time.Second, func() bool {
			h := holders(rest)
			if len(h) != ranges {
				return false
			}
			for _, hs := range h {
				if len(hs) != 1 {
					return false
				}
			}
			return true
		})
		// Which ranges the survivors started (each start restores the
		// range's latest checkpoint and runs its full flush) and flushed
		// since the kill, and which they handed over between them.
		taken, flushed, handed, lost := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, w := range rest {
			for _, l := range w.logs(t, time.Time{}) {
				switch {
				case l.Time.Before(killedAt):
					// A range handed over to the victim before the kill
					// was its own or on its way to it (free, waiting for
					// it to take it), whether or not it was in its list.
					if l.Msg == "handing a range over" && l.To == victim.id {
						handed[l.Range] = true
					}
				case l.Range == "":
				case l.Msg == "range taken":
					taken[l.Range] = true
				case l.Msg == "flush done":
					flushed[l.Range] = true
				case l.Msg == "handing a range over":
					handed[l.Range] = true
				case strings.HasPrefix(l.Msg, "range lost"):
					// A survivor too slow to renew (a loaded machine):
					// another restores the range, as it must.
					lost[l.Range] = true
				}
			}
		}
		for _, r := range held {
			if !taken[r] || !flushed[r] {
				t.Errorf("kill %d: range %s of the killed worker %s: taken %v, flushed %v by a survivor; want both", k, r, victim.id, taken[r], flushed[r])
			}
		}
		for r := range taken {
			if !slices.Contains(held, r) && !handed[r] && !lost[r] {
				t.Errorf("kill %d: range %s was restored, though its worker was not killed, did not hand it over and did not lose it", k, r)
			}
		}
		t.Logf("%s %d: %s held %v; taken since: %v; handed over: %v; lost by a survivor: %v", sig, k, victim.id, held, taken, handed, lost)
		if k == 0 {
			// The paused worker goes on: its ranges are lost (their late
			// writes refused or swept), and it takes its share again.
			if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			workers = append(rest, victim)
			waitUntil(t, "the resumed worker to take its share", 90*time.Second, func() bool { return settled(workers, ranges) })
			continue
		}
		// The killed worker comes back under a new name.
		back := startWorker(t, dir, fmt.Sprintf("%s-r%d", victim.id, k), args)
		everyone = append(everyone, back)
		workers = append(rest, back)
		waitUntil(t, "the restarted worker to take its share", 90*time.Second, func() bool { return settled(workers, ranges) })
	}

	// Add a fourth worker, then stop one with SIGTERM while they read.
	workers = append(workers, startWorker(t, dir, "w4", args))
	everyone = append(everyone, workers[len(workers)-1])
	put(3)
	waitUntil(t, "four workers to share the ranges", 90*time.Second, func() bool { return settled(workers, ranges) })
	leaving := workers[0]
	if err := leaving.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-leaving.done; err != nil {
		t.Fatalf("worker %s after SIGTERM: %v", leaving.id, err)
	}
	workers = workers[1:]
	put(4)
	waitUntil(t, "three workers to share the ranges again", 90*time.Second, func() bool { return settled(workers, ranges) })

	// One last click per shard, later than every other: a range whose every
	// shard has read its mark has read everything before it. (A range
	// restored after the marks starts its watermarks afresh, so a new round
	// of marks is put for each restore below.)
	var marks bytes.Buffer
	putMarks := func(round int) int64 {
		t.Helper()
		ms := time.Now().UnixMilli()
		var b bytes.Buffer
		for s := range 4 {
			fmt.Fprintf(&b, `{"click_id":"mark-%d-%d","ad_id":"ad_%d","campaign_id":"k","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":1,"arrival_ms":%d,"shard":"m%d"}`+"\n",
				round, s, s, ms-1000, ms, ms, s)
		}
		marks.Write(b.Bytes())
		f := filepath.Join(dir, fmt.Sprintf("marks%d.jsonl", round))
		if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, 0, "put", "--from", f, "--to", "kinesis:"+stream)
		return ms
	}
	markMs := putMarks(0)
	readMarks := func(ws []*fleetWorker) bool {
		n := 0
		for _, w := range ws {
			for _, st := range w.status() {
				if len(st.Shards) != 4 {
					return false
				}
				for _, sh := range st.Shards {
					if sh.MaxEventMs < markMs {
						return false
					}
				}
				n++
			}
		}
		return n == ranges
	}
	waitUntil(t, "every range to read the marks", 120*time.Second, func() bool { return readMarks(workers) })
	// The sweeps the takeovers owe run at the first checkpoint past their
	// delay (none runs at a final one).
	waitUntil(t, "every range to have done the fence sweeps it owes", 90*time.Second, func() bool { return !owesSweep(t, table, job) })
	// Stop every worker with SIGTERM: each range drains and ends with a
	// final checkpoint. On a loaded machine the drains' writes can slow the
	// lease store so much that a range misses its renewal and stops
	// undrained, as it must: it is then restored and drained by a fresh
	// worker, as after any crash, and the rows must still be exact.
	for attempt := 0; ; attempt++ {
		held := map[*fleetWorker][]string{}
		for _, w := range workers {
			held[w] = w.ranges()
		}
		stopAt := time.Now()
		for _, w := range workers {
			if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		exits := map[*fleetWorker]error{}
		for _, w := range workers {
			exits[w] = <-w.done
		}
		var undrained []string
		for _, w := range workers {
			clean := map[string]bool{}
			for _, l := range w.logs(t, stopAt) {
				if l.Msg == "range stopped" && !l.Handoff { // a handoff does not drain
					clean[l.Range] = true
				}
			}
			n := len(undrained)
			for _, r := range held[w] {
				if !clean[r] {
					undrained = append(undrained, w.id+":"+r)
				}
			}
			// A worker exits 0 if and only if every range it ran stopped
			// cleanly.
			if failed := len(undrained) > n; failed != (exits[w] != nil) {
				t.Errorf("worker %s after SIGTERM: exit %v, with ranges that did not stop cleanly: %v", w.id, exits[w], undrained[n:])
			}
		}
		if len(undrained) == 0 {
			break
		}
		if attempt == 2 {
			t.Fatalf("ranges %v did not stop cleanly, three times", undrained)
		}
		t.Logf("final stop %d: ranges %v did not stop cleanly; a fresh worker restores and drains every range", attempt, undrained)
		markMs = putMarks(attempt + 1)
		fresh := startWorker(t, dir, fmt.Sprintf("final%d", attempt), args)
		everyone = append(everyone, fresh)
		workers = []*fleetWorker{fresh}
		waitUntil(t, "the fresh worker to run every range and read the marks", 120*time.Second, func() bool {
			return settled(workers, ranges) && readMarks(workers)
		})
	}

	all := filepath.Join(dir, "all.jsonl")
	if err := os.WriteFile(all, append(slices.Clone(b), append([]byte("\n"), marks.Bytes()...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := buildReference(t, all)
	rs := parseRows(t, run(t, 0, "rows", "--sink", "dynamodb:"+table))
	if len(rs) == 0 {
		t.Fatal("no rows written")
	}
	check(t, rs, ref, nil)
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{vaddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	checkValkey(t, vc, prefix, rs)
	// Every range's rows were written under its own scope, and carry the
	// fence of a range lease's tenure.
	scopes := map[string]bool{}
	for _, r := range rs {
		if r.Fence == nil || *r.Fence < 1 {
			t.Errorf("%s/%s: no range fence (wf) on a fleet's row", r.Entity, r.Bucket)
		}
		for _, ix := range []string{r.FastIx, r.LateIx} {
			if s, _, ok := strings.Cut(ix, "/"); ok {
				scopes[s] = true
			} else if ix != "" {
				t.Errorf("%s/%s: tag index key %q has no range scope", r.Entity, r.Bucket, ix)
			}
		}
	}
	if len(scopes) != ranges {
		t.Errorf("rows carry the scopes %v, want %d ranges'", scopes, ranges)
	}

	// Every takeover's sweep is done: no range owes one, and no row or lake
	// object is left tagged with an epoch a sweep removed (the epochs an
	// old holder may have written after the range's committed checkpoint;
	// a new holder writes above them).
	swept := sweptEpochs(t, everyone)
	if len(swept) == 0 {
		t.Error("no takeover owed a fence sweep, though a worker was paused past its lease and another killed")
	}
	t.Logf("fence sweeps by range: %v", swept)
	for _, r := range rs {
		for _, ix := range []string{r.FastIx, r.LateIx} {
			scope, rest, _ := strings.Cut(ix, "/")
			epoch, _, _ := strings.Cut(rest, "#")
			if e, err := strconv.ParseInt(epoch, 10, 64); err == nil && inSwept(swept, scope, e) {
				t.Errorf("%s/%s: tag %s is in an epoch range %s's fence sweep removed", r.Entity, r.Bucket, ix, scope)
			}
		}
	}
	lakeStore, err := openLake(context.Background(), bucket+"/lake", "")
	if err != nil {
		t.Fatal(err)
	}
	objects := 0
	if err := lakeStore.List(context.Background(), "hour=", "", func(key string) error {
		objects++
		if m := lakeObjectName.FindStringSubmatch(key); m != nil {
			if e, _ := strconv.ParseInt(m[3], 10, 64); inSwept(swept, m[1], e) {
				t.Errorf("lake object %s (fence %s) is in an epoch range its range's fence sweep removed", key, m[2])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if objects == 0 {
		t.Error("the lake holds no objects")
	}

	// The recount of a fleet's job judges an hour by the lowest watermark
	// its ranges committed in the lease table (before, it found no
	// checkpoint at the --checkpoints root and knew no watermark), and
	// reads every range's lake. The marks' hour is final once the lowest
	// has passed its end + horizon (2 h) + margin, hours from now: the
	// refusal must name the lowest.
	out, err := testenv.DynamoDBClient(t).Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table + "-leases")})
	if err != nil {
		t.Fatal(err)
	}
	lowest, committed := int64(math.MaxInt64), 0
	for _, it := range out.Items {
		if strings.HasPrefix(testenv.AttrS(it, "lease_key"), job+"#kg") {
			committed++
			lowest = min(lowest, testenv.AttrN(it, "watermark"))
			if _, owes := it["sweep_due"]; owes {
				t.Errorf("range %s still owes a fence sweep at the end", testenv.AttrS(it, "lease_key"))
			}
		}
	}
	if committed != ranges {
		t.Fatalf("%d range items in the lease table, want %d", committed, ranges)
	}
	t.Logf("the lowest watermark the ranges committed: %d", lowest)
	hourMs := markMs - markMs%3_600_000
	hour := time.UnixMilli(hourMs).UTC().Format("2006-01-02T15Z")
	args = []string{"reconcile", "--hour", hour, "--json", "--sink", "dynamodb:" + table, "--checkpoints", bucket + "/ckpt",
		"--lake", bucket + "/lake", "--job-name", job}
	if readyAt := hourMs + 3_600_000 + 2*3_600_000 + 600_000; lowest >= readyAt {
		t.Fatalf("the lowest committed watermark %d is past the marks' hour's end + horizon + margin %d: the ranges committed more than they read", lowest, readyAt)
	}
	_, stderr := runBoth(t, 1, args...)
	want := "the job watermark (" + time.UnixMilli(lowest).UTC().Format(time.RFC3339) + ")"
	if !bytes.Contains(stderr, []byte(want)) || !bytes.Contains(stderr, []byte("not final yet")) {
		t.Errorf("reconcile of the fleet's hour %s: stderr %s\nwant a refusal naming %s", hour, stderr, want)
	}

	// Past that watermark (given, as an operator would once the hours are
	// complete), the recount of the fleet's lake makes every hour final, and
	// final_* equals the independent count.
	far := strconv.FormatInt(markMs+4*3_600_000, 10)
	run(t, 0, "recount", "--all-ready", "--watermark", far, "--sink", "dynamodb:"+table, "--checkpoints", bucket+"/ckpt",
		"--lake", bucket+"/lake", "--job-name", job, "--log-level", "warn")
	finals := map[[2]string]sums{}
	for _, l := range bytes.Split(bytes.TrimSpace(run(t, 0, "rows", "--sink", "dynamodb:"+table)), []byte("\n")) {
		var r finalRow
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("rows: %s: %v", l, err)
		}
		if r.FinalValid != nil {
			finals[[2]string{r.Entity, r.Bucket}] = sums{*r.FinalValid, *r.FinalSpend}
		}
	}
	for k, want := range ref.hour {
		if got, ok := finals[k]; !ok || got != want {
			t.Errorf("%s/%s: final_* %+v (written %v), want the independent count %+v", k[0], k[1], got, ok, want)
		}
	}
	for k, got := range finals {
		if _, ok := ref.hour[k]; !ok && got.n != 0 {
			t.Errorf("%s/%s: final_* %+v, nothing counted there", k[0], k[1], got)
		}
	}
}
