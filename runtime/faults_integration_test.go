//go:build integration

package runtime

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/valkey"
)

// redisServer is a redis-server process of the test's own, on a loopback
// port, that the test can kill and start again on the same port and data
// folder.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server, or run scripts/test.sh): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{t: t, port: port, dir: t.TempDir()}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start runs the server with an append-only file synced on every write, so
// that a kill loses nothing it acknowledged: what the test then sees
// missing after the restart is what the job did not write again.
func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", r.addr(), 200*time.Millisecond); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprint(c, "PING\r\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s did not answer PING within 10 s", r.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the server abruptly (SIGKILL) and waits for it.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// scaledClock runs factor times faster than the wall clock from base, so
// that minutes of event and processing time pass in seconds.
type scaledClock struct {
	start  time.Time
	baseMs int64
	factor int64
}

func (c *scaledClock) NowMs() int64 {
	return c.baseMs + time.Since(c.start).Milliseconds()*c.factor
}

// produce puts the generator's clicks into the stream as the scaled clock
// reaches their arrival time, until stop is closed.
func produce(t *testing.T, api *kinesistest.Fake, stream string, clk *scaledClock, o ingest.GenOptions, stop <-chan struct{}) {
	g := ingest.NewGen(o)
	var pending []byte
	var pendingArr int64
	n := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := clk.NowMs()
		var recs []types.PutRecordsRequestEntry
		for {
			if pending == nil {
				line, arr, ok := g.Next(nil)
				if !ok {
					break
				}
				pending, pendingArr = line, arr
			}
			if pendingArr > now || len(recs) == kinesis.MaxPutEntries {
				break
			}
			n++
			recs = append(recs, types.PutRecordsRequestEntry{Data: pending, PartitionKey: aws.String("p" + strconv.Itoa(n))})
			pending = nil
		}
		if len(recs) == 0 {
			continue
		}
		if _, err := api.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: recs}); err != nil {
			t.Errorf("put records: %v", err)
			return
		}
	}
}

// TestValkeyKilledAndRestarted runs a real-time job (Kinesis fake, a clock
// 60 times faster than the wall clock, so a second is a minute) with
// running totals in a real redis-server, kills the server mid-run, keeps
// running for a few minutes of event time, starts it again, and then lets
// the job drain. Billing is unaffected: the rows are exact (fast + late per
// (ad, hour) equals the independent count). The outage is counted
// (adclick_totals_errors_total > 0). And once the server is back, the
// totals are rewritten: every minute total equals its minute row's fast
// values, every hour total its hour row's.
func TestValkeyKilledAndRestarted(t *testing.T) {
	const (
		stream  = "clicks"
		factor  = 60
		killAt  = 3 * time.Second
		downFor = 4 * time.Second
		runFor  = 11 * time.Second
	)
	redis := startRedis(t)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	totals, err := valkey.New(ctx, valkey.Options{Addr: redis.addr(), Prefix: fmt.Sprintf("t%08x", rand.Uint32()),
		Timeout: 500 * time.Millisecond, DialTimeout: 200 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer totals.Close()

	clk := &scaledClock{start: time.Now(), baseMs: time.Now().UnixMilli(), factor: factor}
	api := kinesistest.NewFake()
	api.Now = func() time.Time { return time.UnixMilli(clk.NowMs()) }
	api.IteratorTTL = 1000 * time.Hour
	if _, err := api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(3)}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		DataDir: t.TempDir(), Source: "kinesis:" + stream, Parallelism: 2, Registerer: reg, Clock: clk,
		Totals: totals, CheckpointIntervalMs: 60_000, Watermarks: ingest.WatermarkOptions{IntervalMs: 1_000}, FlushWritesPerSec: 1e6,
		ExitWhenIdle: 2 * time.Minute, Drain: true,
		OpenSource: kinesis.Opener(api, kinesis.Options{Stream: stream, MinCallInterval: 5 * time.Millisecond, PollInterval: 10 * time.Millisecond}),
	}
	useLocalStores(&cfg)
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer j.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		produce(t, api, stream, clk, ingest.GenOptions{Ads: 20, Shards: 3, Rate: 10, StartMs: clk.baseMs,
			TailFraction: 0.05, TailMinMs: 70_000, TailMaxMs: 600_000, DupFraction: 0.03, InvalidFraction: 0.01, Seed: 9}, stop)
	})
	runDone := make(chan error, 1)
	go func() { runDone <- j.Run(ctx) }()

	time.Sleep(killAt)
	redis.kill()
	killedMs := clk.NowMs()
	time.Sleep(downFor)
	restartedMs := clk.NowMs()
	redis.start()
	time.Sleep(runFor - killAt - downFor)
	close(stop)
	wg.Wait()
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the job did not stop after its source went idle")
	}

	// Billing: the rows are exact.
	ref := newReference()
	seen := map[string]bool{}
	recs := api.Records(stream)
	slices.SortStableFunc(recs, func(a, b kinesistest.Record) int { return int(a.ArrivalMs - b.ArrivalMs) })
	for _, r := range recs {
		ref.add(r.Data, r.ArrivalMs, seen)
	}
	if ref.valid < 1000 {
		t.Fatalf("only %d valid clicks were produced; the test needs traffic", ref.valid)
	}
	items := scanRows(t, j.Rows())
	checkRows(t, items, ref)

	// The outage was seen and counted.
	if got, _ := metricValue(t, reg, "adclick_totals_errors_total"); got < 1 {
		t.Errorf("adclick_totals_errors_total = %v after a %v outage, want > 0", got, downFor)
	}

	// Dashboards: every total equals its row once the server is back.
	var bad []string
	during := 0
	keys := make([]sink.Key, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sink.Key) int { return strings.Compare(a.Entity+a.Bucket, b.Entity+b.Bucket) })
	for _, k := range keys {
		it := items[k]
		if !it.Fast.Present {
			// An hour row with late totals only: no minute of the hour was
			// on time, so it never had a running total.
			continue
		}
		start, hour, err := sink.ParseBucket(k.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := totals.GetTotal(ctx, sink.TotalKey{Ad: k.Entity, StartMs: start, Hour: hour})
		if err != nil {
			t.Fatalf("get total %s/%s: %v", k.Entity, k.Bucket, err)
		}
		if ok && got.Valid == it.Fast.Valid && got.SpendMicros == it.Fast.SpendMicros {
			continue
		}
		when := ""
		if !hour && start+60_000 > killedMs && start+60_000 <= restartedMs+60_000 {
			during++
			when = " (minute ended during the outage)"
		}
		bad = append(bad, fmt.Sprintf("%s/%s: total %+v (present %v), row fast_valid %d fast_spend %d%s",
			k.Entity, k.Bucket, got, ok, it.Fast.Valid, it.Fast.SpendMicros, when))
	}
	if len(bad) > 0 {
		for _, b := range bad[:min(len(bad), 15)] {
			t.Error(b)
		}
		t.Errorf("%d of %d totals differ from their rows after Valkey came back (%d of them minutes that ended during the outage, %s to %s)",
			len(bad), len(items), during, time.UnixMilli(killedMs).UTC().Format(time.TimeOnly), time.UnixMilli(restartedMs).UTC().Format(time.TimeOnly))
	}
}
