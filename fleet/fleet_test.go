package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/ingest/source"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/embedded"
	"github.com/adclick/adclick/windowing"
)

// world is what the workers of one test share: the stream, the lease
// table, the row and totals store, the checkpoint folders and the lake.
type world struct {
	t      *testing.T
	api    *kinesistest.Fake
	leases *leasetest.Mem
	store  *embedded.Store
	lake   recount.Store
	dir    string
	stream string
	read   string // kinesis.ReadPoll or ReadEFO

	mu     sync.Mutex
	starts map[string][]string // worker → ranges it started, in order
	// poison, if set, makes the pipeline of range poison ("*": of every
	// range) fail to start on worker poisonOn.
	poison, poisonOn string
	// leaseAPI, if set, is the workers' way to the lease table (leases
	// otherwise); openSource, if set, replaces the Kinesis source.
	leaseAPI   lease.RangeAPI
	openSource source.Open
	// sweepDelay, if set, is the workers' Options.SweepDelay.
	sweepDelay time.Duration
}

const testJob = "job"

func newWorld(t *testing.T, shards, ranges int, read string) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{t: t, api: kinesistest.NewFake(), leases: leasetest.NewMem(), dir: t.TempDir(), stream: "clicks", read: read,
		starts: map[string][]string{}}
	// A new owner's subscription within this of the old one's is refused
	// (ResourceInUse) and retried: short, for a quick handoff.
	w.api.InUseWindow = 200 * time.Millisecond
	w.api.SubscribeInterval = 10 * time.Millisecond
	if _, err := w.api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(w.stream), ShardCount: aws.Int32(int32(shards))}); err != nil {
		t.Fatal(err)
	}
	if err := lease.CreateTable(ctx, w.leases, "leases"); err != nil {
		t.Fatal(err)
	}
	lw, err := lease.NewWorker(w.leases, lease.WorkerOptions{Table: "leases", Job: testJob})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := lease.EvenRanges(ranges)
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Setup(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if w.store, err = embedded.Open(filepath.Join(w.dir, "store"), embedded.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.store.Close() })
	if w.lake, err = recount.NewFolder(filepath.Join(w.dir, "lake")); err != nil {
		t.Fatal(err)
	}
	return w
}

func consumerOf(read string, r windowing.KeyGroups) string {
	if read != kinesis.ReadEFO {
		return ""
	}
	return testJob + "-" + r.String()
}

// worker is one running Fleet.
type worker struct {
	id     string
	f      *Fleet
	cancel context.CancelFunc
	done   chan error
}

func (w *world) start(id string) *worker {
	w.t.Helper()
	f := w.fleet(id)
	ctx, cancel := context.WithCancel(context.Background())
	wk := &worker{id: id, f: f, cancel: cancel, done: make(chan error, 1)}
	go func() { wk.done <- f.Run(ctx) }()
	return wk
}

// fleet returns worker id's Fleet, not running.
func (w *world) fleet(id string) *Fleet {
	w.t.Helper()
	var api lease.RangeAPI = w.leases
	if w.leaseAPI != nil {
		api = w.leaseAPI
	}
	lw, err := lease.NewWorker(api, lease.WorkerOptions{Table: "leases", Job: testJob, ID: id, Duration: 600 * time.Millisecond})
	if err != nil {
		w.t.Fatal(err)
	}
	var logger *slog.Logger
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	f, err := New(Options{Worker: lw, ScanEvery: 100 * time.Millisecond, Logger: logger, SweepDelay: w.sweepDelay,
		Config: func(r windowing.KeyGroups) (runtime.Config, error) {
			w.mu.Lock()
			w.starts[id] = append(w.starts[id], r.String())
			poisoned := (w.poison == r.String() || w.poison == "*") && w.poisonOn == id
			w.mu.Unlock()
			if poisoned {
				return runtime.Config{}, fmt.Errorf("test: range %s cannot start on %s", r, id)
			}
			rows, err := w.store.Scoped(r.Scope())
			if err != nil {
				return runtime.Config{}, err
			}
			open := w.openSource
			if open == nil {
				open = kinesis.Opener(w.api, kinesis.Options{Stream: w.stream, MinCallInterval: 5 * time.Millisecond,
					PollInterval: 10 * time.Millisecond, Rediscover: 100 * time.Millisecond, Limit: 50,
					// With enhanced fan-out, each range reads through a
					// consumer of its own, as run --fleet names them.
					Read: w.read, Consumer: consumerOf(w.read, r), SubscribeInterval: 10 * time.Millisecond})
			}
			return runtime.Config{
				DataDir: filepath.Join(w.dir, "workers", id, r.String()), Source: "kinesis:" + w.stream, Parallelism: 2,
				AllowanceMs: new(int64(200)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 500},
				CheckpointIntervalMs: 200, Drain: true, FlushWritesPerSec: 1e6,
				OpenSource: open,
				Rows:       rows, Totals: rows,
				OpenCheckpoints: ckptstore.LocalOpener(filepath.Join(w.dir, "checkpoints", r.String()), ckptstore.Options{}),
				Lake:            w.lake,
			}, nil
		}})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}

func (wk *worker) stop(t *testing.T) {
	t.Helper()
	wk.cancel()
	select {
	case err := <-wk.done:
		if err != nil {
			t.Errorf("worker %s: %v", wk.id, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop", wk.id)
	}
}

// held returns every range the workers run now, and by whom.
func held(ws ...*worker) map[string]string {
	out := map[string]string{}
	for _, w := range ws {
		for _, r := range w.f.Held() {
			out[r.String()] = w.id
		}
	}
	return out
}

// counter returns a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type sums struct{ n, spend int64 }

// putter writes clicks spread over every shard and keeps an independent
// count: each (ad, click id) once, by ad and hour of event time.
type putter struct {
	w    *world
	base int64 // event time of click 0: nine minutes before the test
	seq  int
	seen map[string]bool
	hour map[sink.Key]sums
}

func (p *putter) put(n int) {
	p.w.t.Helper()
	p.putAt(n, time.Now().UnixMilli(), false)
}

// mark puts one last click on each shard of a 3-shard stream, later in
// event time than anything before: a range whose every shard has read its
// mark has read everything (a shard is read in order).
func (p *putter) mark() int64 {
	p.w.t.Helper()
	time.Sleep(5 * time.Millisecond) // after every earlier click's event time
	now := time.Now().UnixMilli()
	p.putAt(3, now, true)
	return now
}

func (p *putter) putAt(n int, now int64, marks bool) {
	var recs []types.PutRecordsRequestEntry
	for k := range n {
		p.seq++
		id := p.seq
		if p.seq%17 == 0 && !marks {
			id = p.seq - 3 // a resend of an earlier click, with its ad
		}
		ad := fmt.Sprintf("ad_%d", id%23)
		// Event time runs 400 ms per click, so minutes close (and rows
		// are written, tagged) all through the test; every 13th click is
		// three minutes late.
		ev := min(p.base+int64(id)*400, now)
		if id%13 == 0 {
			ev -= 180_000
		}
		hk := int64((p.seq * 7919) % 256)
		if marks {
			ev, hk = now, []int64{0, 128, 255}[k] // one per third of the hash space
		}
		body := fmt.Sprintf(`{"click_id":"c%d","ad_id":"%s","campaign_id":"k","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":%d}`,
			id, ad, ev-1000, ev, 100+id%1000)
		h := new(big.Int).Mul(new(big.Int).Lsh(big.NewInt(1), 120), big.NewInt(hk))
		recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String("p"), ExplicitHashKey: aws.String(h.String())})
		k := ad + "\x00" + fmt.Sprint(id)
		if !p.seen[k] {
			p.seen[k] = true
			hk := sink.Key{Entity: ad, Bucket: sink.HourBucket(ev - ev%3_600_000)}
			p.hour[hk] = sums{p.hour[hk].n + 1, p.hour[hk].spend + int64(100+id%1000)}
		}
	}
	if _, err := p.w.api.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(p.w.stream), Records: recs}); err != nil {
		p.w.t.Fatal(err)
	}
}

// caughtUp reports whether every range runs and has read the marks (every
// shard's newest event time is theirs).
func caughtUp(ranges int, mark int64, ws ...*worker) bool {
	n := 0
	for _, w := range ws {
		for _, st := range w.f.Status() {
			if len(st.Shards) == 0 {
				return false
			}
			for _, sh := range st.Shards {
				if sh.MaxEventMs < mark {
					return false
				}
			}
			n++
		}
	}
	return n == ranges
}

// Three workers share a 3-shard stream cut into 4 ranges, read by polling
// and through enhanced fan-out (a consumer per range): a second and a
// third join while the first reads (ranges move to them by handoff), then
// the first leaves (its ranges are taken by the others). Every range runs
// on exactly one worker at a time, and the rows equal an independent count
// per (ad, hour): fast + late = truth, and the hour equals the sum of its
// minutes.
func TestWorkersShareTheStream(t *testing.T) {
	for _, read := range []string{kinesis.ReadPoll, kinesis.ReadEFO} {
		t.Run(read, func(t *testing.T) { testWorkersShareTheStream(t, read) })
	}
}

func testWorkersShareTheStream(t *testing.T, read string) {
	const ranges = 4
	w := newWorld(t, 3, ranges, read)
	p := &putter{w: w, base: time.Now().Add(-9 * time.Minute).UnixMilli(), seen: map[string]bool{}, hour: map[sink.Key]sums{}}
	a := w.start("a")
	waitFor(t, "worker a to hold every range", 20*time.Second, func() bool { return len(held(a)) == ranges })
	for range 10 {
		p.put(40)
		time.Sleep(20 * time.Millisecond)
	}
	b := w.start("b")
	c := w.start("c")
	waitFor(t, "the ranges to spread over three workers", 30*time.Second, func() bool {
		h := held(a, b, c)
		count := map[string]int{}
		for _, id := range h {
			count[id]++
		}
		return len(h) == ranges && count["a"] >= 1 && count["b"] >= 1 && count["c"] >= 1
	})
	for range 10 {
		p.put(40)
		time.Sleep(20 * time.Millisecond)
	}
	before := held(a, b, c)
	moves := func(wk *worker) float64 { return counter(t, wk.f.m.handoffs) + counter(t, wk.f.m.lost) }
	movesBefore := map[string]float64{"b": moves(b), "c": moves(c)}
	a.stop(t)
	waitFor(t, "b and c to take a's ranges", 30*time.Second, func() bool { return len(held(b, c)) == ranges })
	// Only a's ranges moved: b and c kept what they held, unless one
	// handed a range over (a range free for the handoff timeout is taken
	// whatever the taker's share, so a slow round can leave one worker
	// too many, which the balancer then evens out) or lost one.
	for r, id := range before {
		if id == "a" {
			continue
		}
		wk := map[string]*worker{"b": b, "c": c}[id]
		if now := held(b, c)[r]; now != id {
			if moves(wk) > movesBefore[id] {
				t.Logf("range %s moved from %s to %s, which handed a range over or lost one", r, id, now)
			} else {
				t.Errorf("range %s moved from %s to %s, though %s kept running and neither handed a range over nor lost one", r, id, now, id)
			}
		}
	}
	for range 10 {
		p.put(40)
		time.Sleep(20 * time.Millisecond)
	}
	mark := p.mark()
	waitFor(t, "every range to read what was put", 30*time.Second, func() bool { return caughtUp(ranges, mark, b, c) })
	b.stop(t)
	c.stop(t)

	checkRows(t, w.store, p.hour)
	// Each range's progress is in its lease item: the last checkpoint its
	// last holder committed, the one the next holder would restore.
	lw, err := lease.NewWorker(w.leases, lease.WorkerOptions{Table: "leases", Job: testJob})
	if err != nil {
		t.Fatal(err)
	}
	scan, err := lw.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range scan.Items {
		if it.Kind == lease.KindRange && (it.Checkpoint.ID == 0 || it.Checkpoint.Key == "" || it.EpochHigh < it.Checkpoint.ID) {
			t.Errorf("range %s: committed checkpoint %+v, epoch high %d; want a checkpoint committed", it.Range, it.Checkpoint, it.EpochHigh)
		}
	}
	w.mu.Lock()
	t.Logf("range starts by worker: %v", w.starts)
	w.mu.Unlock()
	if read == kinesis.ReadEFO {
		if n := w.api.Calls("SubscribeToShard"); n < 3*ranges {
			t.Errorf("%d SubscribeToShard calls: the ranges did not read through enhanced fan-out", n)
		}
		if n := w.api.Calls("GetRecords"); n > 0 {
			t.Errorf("%d GetRecords calls with enhanced fan-out", n)
		}
	}
}

// checkRows compares the hour rows with the count: fast + late equals it
// per (ad, hour), no row is counted that was not put, and each hour's fast
// roll-up equals the sum of its minutes.
func checkRows(t *testing.T, rows sink.Rows, want map[sink.Key]sums) {
	t.Helper()
	got := map[sink.Key]sums{}
	hourFast := map[sink.Key]sums{}
	minutes := map[sink.Key]sums{}
	err := rows.Scan(context.Background(), func(it sink.Item) error {
		if it.Bucket[0] == 'H' {
			got[it.Key] = sums{it.Fast.Valid + it.Late.Valid, it.Fast.SpendMicros + it.Late.SpendMicros}
			hourFast[it.Key] = sums{it.Fast.Valid, it.Fast.SpendMicros}
		} else {
			// "M2026-11-29T10:14Z" belongs to "H2026-11-29T10Z".
			hk := sink.Key{Entity: it.Entity, Bucket: "H" + it.Bucket[1:14] + "Z"}
			minutes[hk] = sums{minutes[hk].n + it.Fast.Valid, minutes[hk].spend + it.Fast.SpendMicros}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("nothing counted: the test put no clicks")
	}
	for k, s := range want {
		if got[k] != s {
			t.Errorf("%s %s: fast+late %+v, want %+v", k.Entity, k.Bucket, got[k], s)
		}
	}
	for k, s := range got {
		if _, ok := want[k]; !ok && s.n != 0 {
			t.Errorf("%s %s: %+v counted, nothing put", k.Entity, k.Bucket, s)
		}
	}
	for k, s := range hourFast {
		if minutes[k] != s {
			t.Errorf("%s %s: hour fast %+v, its minutes sum to %+v", k.Entity, k.Bucket, s, minutes[k])
		}
	}
}

// A range whose pipeline fails on a worker is released and left to the
// others for a while: the worker does not spin on it, and another worker
// takes it.
func TestFailingRangeRestsOnItsWorker(t *testing.T) {
	w := newWorld(t, 1, 2, kinesis.ReadPoll)
	w.poison, w.poisonOn = "kg0-64", "a"
	a := w.start("a")
	waitFor(t, "worker a to run the healthy range", 20*time.Second, func() bool { return held(a)["kg64-128"] == "a" })
	time.Sleep(2000 * time.Millisecond) // 20 rounds of a
	w.mu.Lock()
	tries := 0
	for _, r := range w.starts["a"] {
		if r == "kg0-64" {
			tries++
		}
	}
	w.mu.Unlock()
	if tries == 0 || tries > 2 {
		t.Errorf("worker a started the failing range %d times in 2 s; want it left alone between tries (rest 1.8 s)", tries)
	}
	b := w.start("b")
	waitFor(t, "worker b to take the range that fails on a", 20*time.Second, func() bool { return held(a, b)["kg0-64"] == "b" })
	a.stop(t)
	b.stop(t)
}
