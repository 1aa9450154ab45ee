package runtime

import (
	"context"
	"github.com/adclick/adclick/ingest/source"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/ingest"
)

// slowStore is a checkpoint store whose uploads take a while (a slow S3),
// recording when each began and ended.
type slowStore struct {
	ckpt.Store
	delay time.Duration

	mu         sync.Mutex
	began, end []time.Time
}

func (s *slowStore) Upload(ctx context.Context, dir string, id int64, kind ckpt.Kind) (ckpt.UploadStats, error) {
	s.mu.Lock()
	s.began = append(s.began, time.Now())
	s.mu.Unlock()
	time.Sleep(s.delay)
	st, err := s.Store.Upload(ctx, dir, id, kind)
	s.mu.Lock()
	s.end = append(s.end, time.Now())
	s.mu.Unlock()
	return st, err
}

// Checkpoints slower than their interval do not run back to back: the next
// begins at least CheckpointPauseMs after the last completed (the DESIGN's
// minimum pause; the setting used to be defaulted and never read).
func TestCheckpointMinimumPause(t *testing.T) {
	dir := t.TempDir()
	local, err := ckptstore.NewLocal(dir, ckptstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &slowStore{Store: local, delay: 300 * time.Millisecond}
	const pause = 700 * time.Millisecond
	cfg := Config{
		DataDir: dir, Source: "gen", Parallelism: 2,
		OpenSource:           source.Gen(ingest.GenOptions{Ads: 20, Shards: 2, Rate: 500, Seed: 3}),
		CheckpointIntervalMs: 200, CheckpointPauseMs: pause.Milliseconds(),
		ExitWhenIdle: time.Hour, Checkpoints: store,
	}
	useLocalStores(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	_ = j.Run(ctx) // stopped by the context: a final checkpoint, then nil or the cause
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.end) < 3 {
		t.Fatalf("%d checkpoints in 4 s, want at least 3", len(store.end))
	}
	// The last upload may be the stop's final checkpoint, which does not
	// wait for the pause.
	for i := 1; i < len(store.end)-1; i++ {
		// The upload begins after the barrier's alignment, so the pause
		// measured between uploads is at least the configured one minus a
		// little of the previous alignment.
		if gap := store.began[i].Sub(store.end[i-1]); gap < pause-100*time.Millisecond {
			t.Errorf("checkpoint %d began %s after the previous one completed, want at least %s", i+1, gap.Round(time.Millisecond), pause)
		}
	}
}
