package runtime

import (
	"context"
	"fmt"
	"github.com/adclick/adclick/ingest"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// shardHashKey returns an explicit hash key inside shard i of a stream
// created with n evenly split shards.
func shardHashKey(i, n int) string {
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	size := new(big.Int).Div(space, big.NewInt(int64(n)))
	return new(big.Int).Add(new(big.Int).Mul(size, big.NewInt(int64(i))), big.NewInt(1)).String()
}

// putNow puts one click into each of the given shards, with device time
// now.
func putNow(t *testing.T, api *kinesistest.Fake, stream string, shards []int, total int, seq *int) {
	t.Helper()
	now := time.Now().UnixMilli()
	var recs []types.PutRecordsRequestEntry
	for _, s := range shards {
		*seq++
		body := fmt.Sprintf(`{"click_id":"k%d","ad_id":"ad_%d","campaign_id":"camp_1","device_id":"d_1","impression_ms":%d,"device_ms":%d,"spend_micros":1000}`,
			*seq, *seq%7, now-1000, now)
		recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String("p" + strconv.Itoa(s)),
			ExplicitHashKey: aws.String(shardHashKey(s, total))})
	}
	if _, err := api.PutRecords(context.Background(), &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: recs}); err != nil {
		t.Errorf("put records: %v", err)
	}
}

// drill runs a real-time job on a 3-shard stream (the in-process Kinesis
// fake) for warm of traffic on every shard, then stall with no record on
// the last shard, sampling adclick_watermark_lag_seconds every 100 ms
// during the stall. It returns the samples and the job's final status.
func drill(t *testing.T, idleMs int64, warm, stall time.Duration) ([]float64, Status) {
	t.Helper()
	const stream, shards = "clicks", 3
	api := kinesistest.NewFake()
	if _, err := api.CreateStream(context.Background(), &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		DataDir: t.TempDir(), Source: "kinesis:" + stream, Parallelism: 2, Registerer: reg,
		AllowanceMs: new(int64(100)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: idleMs}, CheckpointIntervalMs: 600_000,
		OpenSource: kinesis.Opener(api, kinesis.Options{Stream: stream, MinCallInterval: 5 * time.Millisecond, PollInterval: 10 * time.Millisecond}),
	}
	useLocalStores(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer j.Close()
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = j.Run(ctx) })

	seq := 0
	all, live := []int{0, 1, 2}, []int{0, 1}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(warm); time.Now().Before(end); <-tick.C {
		putNow(t, api, stream, all, shards, &seq)
	}
	var samples []float64
	next := time.Now().Add(100 * time.Millisecond)
	for end := time.Now().Add(stall); time.Now().Before(end); <-tick.C {
		putNow(t, api, stream, live, shards, &seq)
		if time.Now().After(next) {
			next = next.Add(100 * time.Millisecond)
			v, ok := metricValue(t, reg, "adclick_watermark_lag_seconds")
			if !ok {
				t.Fatal("adclick_watermark_lag_seconds is not registered")
			}
			samples = append(samples, v)
		}
	}
	st := j.Status()
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	if st.Records == 0 {
		t.Fatal("the job read no record")
	}
	return samples, st
}

func fmtSamples(v []float64) string {
	s := ""
	for _, x := range v {
		s += strconv.FormatFloat(x, 'f', 2, 64) + " "
	}
	return s
}

// TestWatermarkLagDrill is seed 002's first two failure drills (issue 6):
// a shard that stops receiving records holds the job watermark back when
// idleness is effectively off, so the watermark lag rises steadily; with
// idleness on, the shard is marked idle after the timeout and the lag falls
// back to its usual level.
func TestWatermarkLagDrill(t *testing.T) {
	const warm, stall = time.Second, 3 * time.Second
	t.Run("stalled shard without idleness holds the watermark", func(t *testing.T) {
		samples, st := drill(t, 1_000_000_000, warm, stall)
		t.Logf("lag samples (s): %s", fmtSamples(samples))
		if len(samples) < 20 {
			t.Fatalf("got %d samples, want at least 20", len(samples))
		}
		for i := 1; i < len(samples); i++ {
			if samples[i] < samples[i-1] {
				t.Errorf("lag fell from %.2f s to %.2f s at sample %d while the shard was stalled", samples[i-1], samples[i], i)
			}
		}
		first, last := samples[0], samples[len(samples)-1]
		if last-first < 2 {
			t.Errorf("lag rose from %.2f s to %.2f s over the stall, want a rise of at least 2 s (about 1 s per second)", first, last)
		}
		if last < 2.5 {
			t.Errorf("lag at the end of a %v stall is %.2f s, want at least 2.5 s", stall, last)
		}
		for _, sh := range st.Shards {
			if sh.Idle {
				t.Errorf("shard %s is idle with idleness off", sh.ID)
			}
		}
	})
	t.Run("idleness releases the watermark", func(t *testing.T) {
		samples, st := drill(t, 1_000, warm, stall)
		t.Logf("lag samples (s): %s", fmtSamples(samples))
		if len(samples) < 20 {
			t.Fatalf("got %d samples, want at least 20", len(samples))
		}
		peak := slices.Max(samples)
		if peak < 0.8 {
			t.Errorf("peak lag %.2f s during the stall, want at least 0.8 s (the watermark held until the 1 s idle timeout)", peak)
		}
		tail := samples[len(samples)-5:]
		if m := slices.Max(tail); m > 0.6 {
			t.Errorf("lag %.2f s at the end of the stall, want below 0.6 s once the shard is idle (samples %s)", m, fmtSamples(tail))
		}
		idle := 0
		for _, sh := range st.Shards {
			if sh.Idle {
				idle++
			}
		}
		if idle != 1 {
			t.Errorf("%d idle shards in %+v, want 1 (the stalled one)", idle, st.Shards)
		}
	})
}
