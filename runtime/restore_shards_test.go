package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRestoreRegistersShards: a restore registers every shard the
// checkpoint's watermark tracked, before any record is read. A file replay
// registers a shard only at its first record, so without this a shard that
// held the watermark at the checkpoint and has no record after it was
// invisible to the replay: the replay's watermark ran ahead of the first
// run's, judged late the clicks that had closed a minute, and the hour's
// roll-up was lost (the exactly-once audit's first hole). Before the fix
// the restored driver knew no shard.
func TestRestoreRegistersShards(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	const base = int64(1_795_687_200_000) // 2026-11-29T10:00Z
	var lines []string
	for i := range 40 {
		shard := "busy"
		if i < 5 {
			shard = "quiet" // the quiet shard's traffic stops early
		}
		at := base + int64(i)*1_000
		lines = append(lines, fmt.Sprintf(`{"click_id":"c%d","ad_id":"ad","campaign_id":"k","device_id":"d","impression_ms":%d,"device_ms":%d,"spend_micros":1,"shard":%q,"arrival_ms":%d}`,
			i, at, at, shard, at))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := runToEnd(t, replayConfig(dir, path))
	last := j.Status().LastCheckpoint
	j.Close()
	if last == nil || !slices.Equal(last.Shards, []string{"busy", "quiet"}) {
		t.Fatalf("final checkpoint lists shards %v, want [busy quiet]", last)
	}
	j, err := Open(context.Background(), replayConfig(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	d, err := newDriver(j, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range d.sm.Watermarks().Shards() {
		got = append(got, s.ID)
	}
	if !slices.Equal(got, []string{"busy", "quiet"}) {
		t.Fatalf("restored driver tracks shards %v before reading, want [busy quiet]", got)
	}
}
