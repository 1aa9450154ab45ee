//go:build integration

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/recount/s3lake"
)

// TestRecountS3Lake keeps the lake in S3 (--lake s3://BUCKET/PREFIX, the
// local S3 server): a replay without crashes and one with two crashes
// (restarted until done) each leave every line of the trace once in the
// lake, no object of an epoch only a crashed run used, and finals equal to
// the count from the file, which balance in the reconciliation; the finals
// of both runs are the same. The crash-free run keeps its checkpoints in S3
// as well, and the recount reads the watermark from there.
func TestRecountS3Lake(t *testing.T) {
	t.Parallel()
	awsSlot(t)
	testenv.S3(t)
	ctx := context.Background()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	genTraceBeyond(t, trace, 6000, 17)
	ref := buildFinalReference(t, trace)
	checkRef(t, ref)
	bucket := "rc" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run(t, 0, "setup", "--checkpoints", "s3://"+bucket+"/unused")
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cli := s3lake.NewClient(cfg)

	var want finals
	for _, crashes := range [][]int{nil, {2500, 1200}} {
		prefix := fmt.Sprintf("lake-%d", len(crashes))
		url := "s3://" + bucket + "/" + prefix
		store := s3lake.New(cli, bucket, prefix)
		data := filepath.Join(dir, prefix)
		args := append([]string{"run", "--source", "file:" + trace, "--data", data, "--lake", url}, runFlags...)
		rc := []string{"--lake", url}
		if crashes == nil {
			// Checkpoints in S3 too: none under --data, so the recount
			// takes the watermark from --checkpoints.
			ck := "s3://" + bucket + "/checkpoints-" + prefix
			args = append(args, "--checkpoints", ck)
			rc = append(rc, "--checkpoints", ck)
		}
		forbidden := map[int64]bool{}
		for _, n := range crashes {
			if code := runCode(t, append(args, "--fail-after-records", strconv.Itoa(n))...); code != 137 {
				t.Fatalf("crash run at %d: exit %d, want 137", n, code)
			}
			c, h := latestCkpt(t, data), readHigh(t, data)
			if c == 0 {
				t.Fatalf("no checkpoint before the crash at %d: the restart would not restore", n)
			}
			for e := c + 1; e <= h; e++ {
				forbidden[e] = true
			}
		}
		run(t, 0, args...)
		objs := lakeObjects(t, store)
		if len(objs) == 0 {
			t.Fatalf("no lake object under %s", url)
		}
		for _, o := range objs {
			if forbidden[o.epoch] {
				t.Errorf("%s: epoch %d was only a crashed run's", o.key, o.epoch)
			}
		}
		checkLakeHoldsEachLineOnce(t, store, ref)
		if crashes == nil {
			if c := latestCkpt(t, data); c != 0 {
				t.Fatalf("checkpoint %d under --data with --checkpoints s3://: the recount would not need --checkpoints", c)
			}
		}
		got := recountAndCheck(t, data, ref, rc...)
		if want == nil {
			want = got
		} else {
			compareFinals(t, got, want)
		}
	}
}
