//go:build integration

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/adclick/adclick/internal/testenv"
)

// TestCrashAnywhereAWS is the crash-anywhere test with the DynamoDB and
// Valkey sinks (dynalite and redis-server started by the test command):
// the same invariants, plus Valkey's totals agree with the rows.
func TestCrashAnywhereAWS(t *testing.T) {
	t.Parallel() // its own temp dir, stream, table and prefix
	awsSlot(t)
	testenv.DynamoDB(t)
	vaddr := testenv.Valkey(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	const clicks = 3000
	genTrace(t, trace, clicks, 13)
	ref := buildReference(t, trace)
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{vaddr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	points := 10
	for i := 0; i < points; i++ {
		table := fmt.Sprintf("e2e_%d_%d", time.Now().UnixNano(), i)
		prefix := "e2e" + strconv.Itoa(i) + "x" + strconv.FormatInt(time.Now().UnixNano(), 36)
		// --verify-flush: after every restore's flush, Valkey's totals must
		// equal the restored state's running totals (the process fails if
		// not).
		sinkArgs := []string{"--sink", "dynamodb:" + table, "--valkey", vaddr, "--valkey-prefix", prefix, "--verify-flush"}
		run(t, 0, "setup", "--sink", "dynamodb:"+table)
		data := filepath.Join(dir, fmt.Sprintf("run%02d", i))
		forbidden := map[int64]bool{}
		var at []int
		for k := 0; k < 1+rng.IntN(2); k++ {
			n := 1 + rng.IntN(clicks)
			at = append(at, n)
			args := append([]string{"run", "--source", "file:" + trace, "--data", data, "--fail-after-records", strconv.Itoa(n)}, runFlags...)
			code := runCode(t, append(args, sinkArgs...)...)
			if code == 0 {
				continue
			}
			if code != 137 {
				t.Fatalf("point %d: crash run exited %d", i, code)
			}
			c, h := latestCkpt(t, data), readHigh(t, data)
			for e := c + 1; e <= h; e++ {
				forbidden[e] = true
			}
		}
		replay(t, trace, data, sinkArgs...)
		out := run(t, 0, "rows", "--sink", "dynamodb:"+table)
		rs := parseRows(t, out)
		t.Run(fmt.Sprintf("point%02d_crash_at_%v", i, at), func(t *testing.T) {
			check(t, rs, ref, forbidden)
			checkValkey(t, vc, prefix, rs)
		})
		os.RemoveAll(data)
	}
}

// checkValkey checks that every minute and hour row has a running total with
// the same values (all windows are closed at the end of a replay).
func checkValkey(t *testing.T, vc valkey.Client, prefix string, rs []row) {
	t.Helper()
	ctx := context.Background()
	for _, r := range rs {
		if r.FastValid == nil {
			continue
		}
		var key string
		if r.Bucket[0] == 'M' {
			key = prefix + ":m:{" + r.Entity + "}:" + r.Bucket[1:]
		} else {
			key = prefix + ":h:{" + r.Entity + "}:" + r.Bucket[1:]
		}
		m, err := vc.Do(ctx, vc.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", key, err)
		}
		if m["valid"] != strconv.FormatInt(*r.FastValid, 10) || m["spend_micros"] != strconv.FormatInt(val(r.FastSpend), 10) {
			t.Errorf("valkey %s = %v, want valid=%d spend_micros=%d (the row)", key, m, *r.FastValid, val(r.FastSpend))
		}
	}
}
