package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/windowing"
)

// run --fleet refuses, as usage errors before anything is opened, what a
// worker sharing a job with others cannot run with.
func TestFleetFlags(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	awsFlags := []string{"--sink", "dynamodb:rows", "--checkpoints", "s3://b/ckpt", "--lake", "s3://b/lake"}
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--fleet", "--source", "gen"}, "--fleet reads a Kinesis stream"},
		{[]string{"--fleet", "--source", "kinesis:s", "--checkpoints", "s3://b/c", "--lake", "s3://b/l"}, "--fleet needs --sink dynamodb:TABLE"},
		{[]string{"--fleet", "--source", "kinesis:s", "--sink", "dynamodb:rows", "--lake", "s3://b/l"}, "--fleet needs --checkpoints s3://"},
		{[]string{"--fleet", "--source", "kinesis:s", "--sink", "dynamodb:rows", "--checkpoints", "s3://b/c"}, "--fleet needs --lake s3://"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--exit-when-idle", "2s"}, awsFlags...), "does not take --exit-when-idle"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--from-savepoint", "3"}, awsFlags...), "does not take --from-savepoint"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--key-groups", "kg0-64"}, awsFlags...), "--key-groups is for embedded mode"},
		{[]string{"--key-groups", "kg0-64", "--sink", "dynamodb:rows"}, "--key-groups is for embedded mode"},
		{[]string{"--key-groups", "kg0-64", "--checkpoints", "s3://b/c"}, "--key-groups is for embedded mode"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--max-workers", "-1"}, awsFlags...), "--max-workers -1"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--recount"}, awsFlags...), "does not take --recount"},
		{[]string{"--worker-id", "w1"}, "go with --fleet"},
		{[]string{"--max-workers", "4"}, "go with --fleet"},
		{[]string{"--key-groups", "kg8-4"}, "--key-groups"},
		{[]string{"--key-groups", "kg0-200"}, "--key-groups"},
	} {
		args := append([]string{"--data", t.TempDir(), "--listen", ""}, tc.args...)
		err := cmdRun(context.Background(), args, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: got %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

func TestSetupRangesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ranges", "4"}, "go together"},
		{[]string{"--job-name", "j"}, "go together"},
		{[]string{"--ranges", "0", "--job-name", "j"}, "go together"},
		{[]string{"--ranges", "200", "--job-name", "j", "--lease-table", "l"}, "--ranges 200"},
		{[]string{"--ranges", "4", "--job-name", "j"}, "needs a lease table"},
	} {
		err := cmdSetup(context.Background(), tc.args, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("setup %v: got %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestRangePollSpacing: a fleet's ranges each poll every shard, so by
// default each range spaces its GetRecords calls on a shard by the number
// of ranges × the base interval (5 calls per second per shard for the
// whole fleet); an interval the operator gave is kept as given.
func TestRangePollSpacing(t *testing.T) {
	base := kinesis.Options{Stream: "s", Read: kinesis.ReadPoll, MinCallInterval: 200 * time.Millisecond}
	efo := base
	efo.Read, efo.Consumer = kinesis.ReadEFO, "adclick"
	half := windowing.KeyGroups{From: 0, To: 64}
	for _, tc := range []struct {
		name     string
		o        kinesis.Options
		r        windowing.KeyGroups
		ranges   int
		given    bool
		interval time.Duration
		consumer string
	}{
		{"one range", base, windowing.AllKeyGroups, 1, false, 200 * time.Millisecond, ""},
		{"sixteen ranges", base, half, 16, false, 3200 * time.Millisecond, ""},
		{"three ranges", base, half, 3, false, 600 * time.Millisecond, ""},
		{"given by the operator", base, half, 16, true, 200 * time.Millisecond, ""},
		{"efo: a consumer per range", efo, half, 2, false, 400 * time.Millisecond, "adclick-kg0-64"},
		{"efo: the whole job keeps its consumer", efo, windowing.AllKeyGroups, 1, false, 200 * time.Millisecond, "adclick"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rangeReadOptions(tc.o, tc.r, tc.ranges, tc.given)
			if got.MinCallInterval != tc.interval || got.Consumer != tc.consumer {
				t.Errorf("interval %s consumer %q, want %s %q", got.MinCallInterval, got.Consumer, tc.interval, tc.consumer)
			}
			if got.Stream != tc.o.Stream || got.Read != tc.o.Read {
				t.Errorf("stream/read changed: %+v", got)
			}
		})
	}
}

// TestFleetConsumerRoom: a fleet reading with enhanced fan-out registers a
// consumer per range; run --fleet counts the stream's consumers first and
// refuses, with the numbers, ranges that leave no room for a blue/green
// copy under the stream's 20. Before the check, a fleet past the limit
// started, and its ranges' registrations failed on every worker in turn.
func TestFleetConsumerRoom(t *testing.T) {
	ctx := context.Background()
	f := kinesistest.NewFake()
	if _, err := f.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String("s"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	arn := aws.String(kinesistest.StreamARN("s"))
	register := func(name string) {
		t.Helper()
		if _, err := f.RegisterStreamConsumer(ctx, &awskinesis.RegisterStreamConsumerInput{StreamARN: arn, ConsumerName: aws.String(name)}); err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
	}
	for i := range 12 {
		register(fmt.Sprintf("other-%d", i))
	}
	cut := func(n int) []windowing.KeyGroups {
		var rs []windowing.KeyGroups
		for i := range n {
			rs = append(rs, windowing.KeyGroups{From: i * windowing.MaxParallelism / n, To: (i + 1) * windowing.MaxParallelism / n})
		}
		return rs
	}
	efo := kinesis.Options{Stream: "s", Read: kinesis.ReadEFO, Consumer: "adclick", MinCallInterval: 200 * time.Millisecond}
	poll := kinesis.Options{Stream: "s", Read: kinesis.ReadPoll, MinCallInterval: 200 * time.Millisecond}

	// 12 others + 4 ranges + 4 for a copy = 20: fits.
	if err := fleetConsumerRoom(ctx, f, efo, cut(4)); err != nil {
		t.Errorf("4 ranges beside 12 consumers: %v, want no error", err)
	}
	// 12 + 5 + 5 = 22: refused, with the numbers.
	err := fleetConsumerRoom(ctx, f, efo, cut(5))
	for _, want := range []string{"run --fleet: 5 ranges", "stream s:", "it has 12 registered", "make 22, more than the 20", "use at most 4 ranges"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("5 ranges beside 12 consumers: %v, want an error with %q", err, want)
		}
	}
	// The ranges' own consumers, once registered, count once: a restart
	// of the same fleet fits.
	for _, r := range cut(4) {
		register(rangeReadOptions(efo, r, 4, false).Consumer)
	}
	if err := fleetConsumerRoom(ctx, f, efo, cut(4)); err != nil {
		t.Errorf("4 registered ranges beside 12 consumers: %v, want no error", err)
	}
	// Polling registers nothing and is not checked.
	before := f.Calls("ListStreamConsumers")
	if err := fleetConsumerRoom(ctx, f, poll, cut(16)); err != nil || f.Calls("ListStreamConsumers") != before {
		t.Errorf("polling with 16 ranges: %v, %d list calls; want no error and no call", err, f.Calls("ListStreamConsumers")-before)
	}
}
