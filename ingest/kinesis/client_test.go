package kinesis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// TestSetupCallsRetryThemselves: with the SDK's retries off (NewClient),
// the calls that had no retry loop of their own — ShardHashKeys' listing,
// EnsureStream's describe and create — retry throttling and server errors
// themselves, and give up at once on a fatal error.
func TestSetupCallsRetryThemselves(t *testing.T) {
	ctx := context.Background()
	f := kinesistest.NewFake()
	if err := kinesis.EnsureStream(ctx, f, "s", 2); err != nil {
		t.Fatal(err)
	}
	serverError := kinesistest.ServerError()

	ft := kinesistest.NewFaulty(f)
	ft.Fail("ListShards", 1, kinesistest.Throttled())
	ft.Fail("ListShards", 1, serverError)
	if keys, err := kinesis.ShardHashKeys(ctx, ft, "s"); err != nil || len(keys) != 2 {
		t.Errorf("ShardHashKeys after a throttle and a server error: got %v, %v; want 2 keys", keys, err)
	}

	ft = kinesistest.NewFaulty(f)
	ft.Fail("DescribeStreamSummary", 1, serverError)
	ft.Fail("DescribeStreamSummary", 1, &types.ResourceNotFoundException{Message: aws.String("no stream")})
	ft.Fail("CreateStream", 2, kinesistest.Throttled())
	before := f.Calls("CreateStream")
	if err := kinesis.EnsureStream(ctx, ft, "t", 3); err != nil {
		t.Fatalf("EnsureStream after a server error and throttles: %v", err)
	}
	if got := f.Calls("CreateStream") - before; got != 1 {
		t.Errorf("CreateStream reached the fake %d times, want 1", got)
	}

	ft = kinesistest.NewFaulty(f)
	ft.Fail("ListShards", 1, &types.AccessDeniedException{Message: aws.String("no")})
	var ade *types.AccessDeniedException
	if _, err := kinesis.ShardHashKeys(ctx, ft, "s"); !errors.As(err, &ade) {
		t.Errorf("ShardHashKeys on access denied: got %v, want it at once", err)
	}
	if n := ft.Injected("ListShards"); n != 1 {
		t.Errorf("access denied was retried: %d failures injected, want 1", n)
	}
}
