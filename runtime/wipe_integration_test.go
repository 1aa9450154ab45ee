//go:build integration

package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/valkey"
)

// TestValkeyWipedAndRebuilt is TestValkeyKilledAndRestarted with a server
// that comes back empty (its append-only file is gone), as a Valkey without
// persistence does: the totals of the windows that closed before the wipe
// are rebuilt from the rows, the open ones from state, so at the end every
// total equals its row again.
func TestValkeyWipedAndRebuilt(t *testing.T) {
	const (
		stream  = "clicks"
		factor  = 60
		wipeAt  = 4 * time.Second
		downFor = 2 * time.Second
		runFor  = 12 * time.Second
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

	time.Sleep(wipeAt)
	redis.kill()
	if err := os.RemoveAll(filepath.Join(redis.dir, "appendonlydir")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(downFor)
	redis.start()
	time.Sleep(runFor - wipeAt - downFor)
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

	items := scanRows(t, j.Rows())
	keys := make([]sink.Key, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sink.Key) int { return strings.Compare(a.Entity+a.Bucket, b.Entity+b.Bucket) })
	var bad []string
	n := 0
	for _, k := range keys {
		it := items[k]
		if !it.Fast.Present {
			continue
		}
		n++
		start, hour, err := sink.ParseBucket(k.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := totals.GetTotal(ctx, sink.TotalKey{Ad: k.Entity, StartMs: start, Hour: hour})
		if err != nil {
			t.Fatalf("get total %s/%s: %v", k.Entity, k.Bucket, err)
		}
		if !ok || got.Valid != it.Fast.Valid || got.SpendMicros != it.Fast.SpendMicros {
			bad = append(bad, fmt.Sprintf("%s/%s: total %+v (present %v), row fast_valid %d fast_spend %d",
				k.Entity, k.Bucket, got, ok, it.Fast.Valid, it.Fast.SpendMicros))
		}
	}
	if n < 100 {
		t.Fatalf("only %d rows with fast values; the test needs traffic", n)
	}
	if len(bad) > 0 {
		for _, b := range bad[:min(len(bad), 15)] {
			t.Error(b)
		}
		t.Errorf("%d of %d totals differ from their rows after Valkey came back empty", len(bad), n)
	}
	if wiped, err := totals.Wiped(ctx); err != nil || wiped {
		t.Errorf("Wiped at the end = %v, %v; want false (rebuilt and armed)", wiped, err)
	}
}
