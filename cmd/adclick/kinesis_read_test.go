package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// A --kinesis-read and --kinesis-consumer pair the source would refuse is
// a usage error before anything runs (no data dir, no AWS call).
func TestKinesisReadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--kinesis-read", "efo"}, "needs --kinesis-consumer"},
		{[]string{"--kinesis-consumer", "job1-w0"}, "only used with --kinesis-read efo"},
		{[]string{"--kinesis-read", "efo", "--kinesis-consumer", "job/1"}, "want 1 to 128"},
		{[]string{"--kinesis-read", "efo", "--kinesis-consumer", strings.Repeat("c", 129)}, "want 1 to 128"},
		{[]string{"--kinesis-read", "pull"}, `--kinesis-read "pull"`},
	} {
		args := append([]string{"--source", "kinesis:clicks", "--data", t.TempDir(), "--listen", ""}, tc.args...)
		err := cmdRun(context.Background(), args, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: got %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
