package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

// commitLease is a testLease that keeps the job's progress, as a range
// lease does in its DynamoDB item.
type commitLease struct {
	*testLease
	mu        sync.Mutex
	committed int64 // as a take read it
	high      int64
	opened    []int64
	commits   []int64
}

func (l *commitLease) Committed() (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed, l.high
}

func (l *commitLease) OpenEpoch(_ context.Context, e int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opened = append(l.opened, e)
	return nil
}

func (l *commitLease) Commit(_ context.Context, id int64, key string, _ int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == "" {
		panic("commit without the manifest's key")
	}
	l.commits = append(l.commits, id)
	return nil
}

func withCommitLease(cfg *Config, l *commitLease) {
	cfg.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) { return l, nil }}
}

// With a CommitLease the job opens every epoch in the lease before its
// barrier and commits every checkpoint there once stored; a start restores
// exactly the committed checkpoint, drops the newer uploads nobody
// committed, and flushes from it to the higher of the store's and the
// lease's high-water marks. The rows stay exact throughout.
func TestCommitLeaseNamesTheCheckpointToRestore(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(6_000, 5))
	ref := fileReference(t, path)
	cfg := replayConfig(dir+"/data", path)
	cfg.CheckpointIntervalMs = 2_000
	first := &commitLease{testLease: newTestLease()}
	withCommitLease(&cfg, first)
	j := runToEnd(t, cfg)
	ids, err := j.ckpts.store.List(context.Background(), ckpt.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if len(first.commits) < 3 {
		t.Fatalf("%d checkpoints committed: the trace is too short for the test", len(first.commits))
	}
	if !slices.IsSorted(first.commits) || first.commits[len(first.commits)-1] != ids[len(ids)-1] {
		t.Errorf("commits %v, stored checkpoints %v: want every checkpoint committed in order", first.commits, ids)
	}
	for _, id := range first.commits {
		if !slices.Contains(first.opened, id) {
			t.Errorf("checkpoint %d committed without its epoch opened (opened %v)", id, first.opened)
		}
	}

	// The lease says an older checkpoint is the committed one: the newer
	// ones are a lost holder's uploads.
	kept := ids[len(ids)-2]
	second := &commitLease{testLease: newTestLease(), committed: kept, high: ids[len(ids)-1] + 5}
	withCommitLease(&cfg, second)
	j2, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := j2.Status().Restored; got != kept {
		t.Errorf("restored checkpoint %d, want the committed %d", got, kept)
	}
	left, err := j2.ckpts.store.List(context.Background(), ckpt.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(left, func(id int64) bool { return id > kept }) {
		t.Errorf("checkpoints %v left after restoring the committed %d", left, kept)
	}
	if f := j2.Status().Flush; f == nil || int64(f.Epochs) != ids[len(ids)-1]+5-kept+1 {
		t.Errorf("flush %+v, want epochs %d..%d (the lease's high-water mark)", f, kept, ids[len(ids)-1]+5)
	}
	if err := j2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkRows(t, scanRows(t, j2.Rows()), ref)
	j2.Close()

	// No committed checkpoint: an empty start, whatever the store holds.
	third := &commitLease{testLease: newTestLease()}
	withCommitLease(&cfg, third)
	j3, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j3.Close()
	if got := j3.Status().Restored; got != 0 {
		t.Errorf("restored checkpoint %d with none committed, want an empty start", got)
	}
	if err := j3.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkRows(t, scanRows(t, j3.Rows()), ref)
}
