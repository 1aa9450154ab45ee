package runtime

import (
	"context"
	"fmt"
	"github.com/adclick/adclick/ingest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// A restart that reads nothing new must not record a checkpoint without a
// watermark: the restored one still says how far the hours are complete,
// and the recount's readiness (and a sweep's rebuild bound) must not go
// back to "none yet" until records arrive.
func TestRestartWithoutRecordsKeepsTheWatermark(t *testing.T) {
	const stream = "quiet"
	api := kinesistest.NewFake()
	ctx := context.Background()
	if _, err := api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	var recs []types.PutRecordsRequestEntry
	for i := range 50 {
		body := fmt.Sprintf(`{"click_id":"q%d","ad_id":"ad_%d","campaign_id":"c","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":100}`,
			i, i%3, now-60_000, now-30_000+int64(i))
		recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String("p")})
	}
	if _, err := api.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: recs}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func() Meta {
		t.Helper()
		cfg := Config{
			DataDir: dir, Source: "kinesis:" + stream, Parallelism: 2,
			AllowanceMs: new(int64(200)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 60_000}, CheckpointIntervalMs: 300,
			ExitWhenIdle: time.Second, FlushWritesPerSec: 1e6,
			OpenSource: kinesis.Opener(api, kinesis.Options{Stream: stream, MinCallInterval: 5 * time.Millisecond,
				PollInterval: 10 * time.Millisecond}),
		}
		useLocalStores(&cfg)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		j, err := Open(rctx, cfg)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer j.Close()
		if err := j.Run(rctx); err != nil {
			t.Fatalf("run: %v", err)
		}
		last := j.Status().LastCheckpoint
		if last == nil {
			t.Fatal("no checkpoint")
		}
		return *last
	}
	first := run()
	if first.Watermark == eventtime.NoWatermark || first.Watermark == eventtime.EndOfTime {
		t.Fatalf("first run's last checkpoint watermark %d, want a real one", first.Watermark)
	}
	second := run()
	if second.Watermark < first.Watermark {
		t.Fatalf("restart without records recorded watermark %d in checkpoint %d, below the restored %d (checkpoint %d)",
			second.Watermark, second.ID, first.Watermark, first.ID)
	}
}
