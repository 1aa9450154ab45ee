package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/ingest/source"
)

// TestLatestStartSurvivesACrashBeforeTheFirstCheckpoint: a job started at
// "latest" that fails before its first checkpoint must not skip, on its
// restart, the clicks that arrived between the two starts. Clicks put a
// minute before the first start are not counted (that is "latest"); clicks
// put after it are, once each, even though the restart comes after them.
// Before the start was pinned in the checkpoint store, the restart opened
// at "latest" again and lost every one of them.
func TestLatestStartSurvivesACrashBeforeTheFirstCheckpoint(t *testing.T) {
	const stream = "late-start"
	api := kinesistest.NewFake()
	var offset atomic.Int64 // the fake's arrival clock, relative to now
	api.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ctx := context.Background()
	if _, err := api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	put := func(prefix string, n int, at time.Duration) {
		t.Helper()
		offset.Store(int64(at))
		now := api.Now().UnixMilli()
		var recs []types.PutRecordsRequestEntry
		for i := range n {
			body := fmt.Sprintf(`{"click_id":"%s%d","ad_id":"%s","campaign_id":"c","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":100}`,
				prefix, i, prefix, now-2_000, now-1_000)
			recs = append(recs, types.PutRecordsRequestEntry{Data: []byte(body), PartitionKey: aws.String(fmt.Sprint(i))})
		}
		if _, err := api.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String(stream), Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	put("before", 30, -time.Minute)
	dir := t.TempDir()
	errCrash := errors.New("crash right after the source opened")
	cfgFor := func(open source.Open) Config {
		cfg := Config{
			DataDir: dir, Source: "kinesis:" + stream, Parallelism: 2,
			AllowanceMs: new(int64(200)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 60_000},
			CheckpointIntervalMs: 300, ExitWhenIdle: time.Second, Drain: true, FlushWritesPerSec: 1e6, OpenSource: open,
		}
		useLocalStores(&cfg)
		return cfg
	}
	opener := kinesis.Opener(api, kinesis.Options{Stream: stream, StartAt: kinesis.StartLatest,
		MinCallInterval: 5 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	// The first run opens the source at "latest" and fails before any
	// checkpoint: nothing of it is kept.
	crashing := func(ctx context.Context, at source.Start) (source.Source, error) {
		src, err := opener(ctx, at)
		if err != nil {
			return nil, err
		}
		src.Close()
		return nil, errCrash
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := Open(rctx, cfgFor(crashing))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := j.Run(rctx); !errors.Is(err, errCrash) {
		t.Fatalf("first run: %v, want the crash", err)
	}
	j.Close()
	// Clicks arrive after the first start and before the restart.
	put("between", 40, 20*time.Second)
	offset.Store(int64(40 * time.Second))
	j = runToEnd(t, cfgFor(opener))
	defer j.Close()
	counted := map[string]int64{}
	for k, it := range scanRows(t, j.Rows()) {
		if k.Bucket[0] == 'H' {
			counted[k.Entity] += it.Fast.Valid + it.Late.Valid
		}
	}
	if counted["between"] != 40 || counted["before"] != 0 {
		t.Errorf("counted %v, want the 40 clicks that arrived between the starts and none of the 30 from before the first", counted)
	}
}
