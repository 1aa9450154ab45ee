package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
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
