//go:build integration

package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/adclick/adclick/internal/testenv"
)

// TestKinesisEndToEnd puts a generated trace into a 3-shard stream
// (kinesalite), runs the job in AWS mode (Kinesis in, DynamoDB + Valkey out)
// to a drained stop, and checks the invariants of the embedded end-to-end
// test; then the same with crashes mid-stream, each restart resuming from
// the checkpointed sequence numbers.
func TestKinesisEndToEnd(t *testing.T) {
	t.Parallel() // its own temp dir, stream, table and prefix
	awsSlot(t)
	testenv.Kinesis(t)
	testenv.DynamoDB(t)
	vaddr := testenv.Valkey(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name      string
		aggregate bool
		crashes   int
	}{
		{"plain", false, 0},
		{"aggregated", true, 0},
		{"crash1", false, 1},
		{"crash2", true, 1},
		{"crash3", false, 2},
		{"crash4", false, 1},
		{"crash5", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const clicks = 2000
			suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
			stream, table := "s"+suffix, "t"+suffix
			run(t, 0, "setup", "--stream", stream, "--shards", "3", "--sink", "dynamodb:"+table)
			// The trace ends now, so Kinesis' arrival times come after every
			// click's device time and the clamp changes nothing the
			// reference does not know (no skewed clocks here).
			start := time.Now().Add(-clicks * 10 * time.Millisecond).UnixMilli()
			genArgs := []string{"--clicks", strconv.Itoa(clicks), "--rate", "100", "--ads", "30", "--shards", "3",
				"--tail-fraction", "0.05", "--tail-max-ms", "5400000", "--dup-fraction", "0.03", "--invalid-fraction", "0.01",
				"--skew-fraction", "0", "--seed", strconv.Itoa(rng.IntN(1000) + 1), "--start-ms", strconv.FormatInt(start, 10)}
			trace := filepath.Join(dir, "trace.jsonl")
			run(t, 0, append([]string{"gen", "--out", trace}, genArgs...)...)
			putArgs := []string{"put", "--from", trace, "--to", "kinesis:" + stream}
			if tc.aggregate {
				putArgs = append(putArgs, "--aggregate")
			}
			run(t, 0, putArgs...)
			ref := buildReference(t, trace)
			data := filepath.Join(dir, "data")
			jobArgs := []string{"run", "--source", "kinesis:" + stream, "--data", data, "--sink", "dynamodb:" + table,
				"--valkey", vaddr, "--valkey-prefix", "k" + suffix, "--listen", "", "--progress", "0", "--parallelism", "2",
				"--flush-writes-per-sec", "1000000", "--log-level", "warn",
				"--exit-when-idle", "2s", "--drain", "--checkpoint-interval-ms", "100"}
			// Small reads, so that checkpoints complete mid-stream and a crash
			// resumes from checkpointed sequence numbers (an aggregated
			// record carries a few hundred clicks).
			if tc.aggregate {
				jobArgs = append(jobArgs, "--kinesis-limit", "1")
			} else {
				jobArgs = append(jobArgs, "--kinesis-limit", "40")
			}
			forbidden := map[int64]bool{}
			resumed := 0
			for k := 0; k < tc.crashes; k++ {
				n := 300 + rng.IntN(clicks-300)
				code := runCode(t, append(jobArgs, "--fail-after-records", strconv.Itoa(n))...)
				if code == 0 {
					continue
				}
				if code != 137 {
					t.Fatalf("crash run at %d exited %d", n, code)
				}
				c, h := latestCkpt(t, data), readHigh(t, data)
				for e := c + 1; e <= h; e++ {
					forbidden[e] = true
				}
				if c > 0 {
					resumed++
				}
				t.Logf("crashed after %d records; restored checkpoint will be %d, epochs %d..%d forbidden", n, c, c+1, h)
			}
			// On a loaded machine both crashes can land before the first
			// checkpoint completes; crash again, later in the stream, until
			// one restart resumes from checkpointed sequence numbers.
			for k := 0; tc.crashes > 0 && resumed == 0 && k < 3; k++ {
				n := clicks/2 + rng.IntN(clicks/3)
				if code := runCode(t, append(jobArgs, "--fail-after-records", strconv.Itoa(n))...); code == 137 {
					c, h := latestCkpt(t, data), readHigh(t, data)
					for e := c + 1; e <= h; e++ {
						forbidden[e] = true
					}
					if c > 0 {
						resumed++
					}
					t.Logf("extra crash after %d records; restored checkpoint will be %d", n, c)
				} else if code != 0 {
					t.Fatalf("crash run at %d exited %d", n, code)
				}
			}
			if tc.crashes > 0 && resumed == 0 {
				t.Errorf("no crash happened after a completed checkpoint: the test did not exercise resuming from sequence numbers")
			}
			run(t, 0, jobArgs...)
			rs := parseRows(t, run(t, 0, "rows", "--sink", "dynamodb:"+table))
			if len(rs) == 0 {
				t.Fatal("no rows written")
			}
			check(t, rs, ref, forbidden)
			os.RemoveAll(data)
		})
	}
}
