package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// A stop by context drains (fires every open window) only if the job's
// drain setting says so when it stops: a worker handing a range over turns
// it off with SetDrain, so the range's open minutes go on at the new owner.
func TestSetDrainDecidesAtTheStop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setDrain  *bool
		wantFired bool
	}{
		{"configured", nil, true},
		{"turned off", new(false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := kinesistest.NewFake()
			ctx := context.Background()
			if _, err := api.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String("d"), ShardCount: aws.Int32(1)}); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			var recs []types.PutRecordsRequestEntry
			for i := range 20 {
				recs = append(recs, types.PutRecordsRequestEntry{PartitionKey: aws.String("p"), Data: fmt.Appendf(nil,
					`{"click_id":"c%d","ad_id":"ad_%d","campaign_id":"k","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":5}`,
					i, i%3, now-1000, now)})
			}
			if _, err := api.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String("d"), Records: recs}); err != nil {
				t.Fatal(err)
			}
			cfg := Config{DataDir: t.TempDir(), Source: "kinesis:d", Parallelism: 1, Drain: true, FlushWritesPerSec: 1e6,
				Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 60_000}, CheckpointIntervalMs: 60_000,
				OpenSource: kinesis.Opener(api, kinesis.Options{Stream: "d", MinCallInterval: 5 * time.Millisecond, PollInterval: 10 * time.Millisecond})}
			useLocalStores(&cfg)
			j, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			rctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var runErr error
			wg.Go(func() { runErr = j.Run(rctx) })
			end := time.Now().Add(20 * time.Second)
			for j.Status().Records < 20 {
				if time.Now().After(end) {
					t.Fatal("the job did not read the 20 records")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if tc.setDrain != nil {
				j.SetDrain(*tc.setDrain)
			}
			cancel()
			wg.Wait()
			if runErr != nil {
				t.Fatal(runErr)
			}
			fired := 0
			for k := range scanRows(t, j.Rows()) {
				if k.Bucket[0] == 'M' {
					fired++
				}
			}
			if got := fired > 0; got != tc.wantFired {
				t.Errorf("%d minute rows after the stop; want fired=%v", fired, tc.wantFired)
			}
		})
	}
}
