package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/windowing"
)

// run --fleet refuses, as usage errors before anything is opened, what a
// worker sharing a job with others cannot run with.
func TestFleetFlags(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	aws := []string{"--sink", "dynamodb:rows", "--checkpoints", "s3://b/ckpt", "--lake", "s3://b/lake"}
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--fleet", "--source", "gen"}, "--fleet reads a Kinesis stream"},
		{[]string{"--fleet", "--source", "kinesis:s", "--checkpoints", "s3://b/c", "--lake", "s3://b/l"}, "--fleet needs --sink dynamodb:TABLE"},
		{[]string{"--fleet", "--source", "kinesis:s", "--sink", "dynamodb:rows", "--lake", "s3://b/l"}, "--fleet needs --checkpoints s3://"},
		{[]string{"--fleet", "--source", "kinesis:s", "--sink", "dynamodb:rows", "--checkpoints", "s3://b/c"}, "--fleet needs --lake s3://"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--exit-when-idle", "2s"}, aws...), "does not take --exit-when-idle"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--from-savepoint", "3"}, aws...), "does not take --from-savepoint"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--key-groups", "kg0-64"}, aws...), "--key-groups is for embedded mode"},
		{[]string{"--key-groups", "kg0-64", "--sink", "dynamodb:rows"}, "--key-groups is for embedded mode"},
		{[]string{"--key-groups", "kg0-64", "--checkpoints", "s3://b/c"}, "--key-groups is for embedded mode"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--max-workers", "-1"}, aws...), "--max-workers -1"},
		{append([]string{"--fleet", "--source", "kinesis:s", "--recount"}, aws...), "does not take --recount"},
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
