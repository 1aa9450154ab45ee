package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/sink/embedded"
)

// commitLease is a testLease that keeps the job's progress, as a range
// lease does in its DynamoDB item.
type commitLease struct {
	*testLease
	mu        sync.Mutex
	committed int64 // as a take read it
	key       string
	high      int64
	opened    []int64
	commits   []int64
}

func (l *commitLease) Committed() (int64, string, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed, l.key, l.high
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

	// A lease that recorded less than the store holds (a new lease table
	// or job name over an old checkpoint store) is another lineage: the
	// start is refused and nothing is removed.
	for _, l := range []*commitLease{
		{testLease: newTestLease()},
		{testLease: newTestLease(), committed: kept, high: kept},
		{testLease: newTestLease(), committed: kept, key: "s3://elsewhere/kg0-64/manifests/000001.json", high: 1000},
	} {
		before, err := j2.ckpts.store.List(context.Background(), ckpt.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		withCommitLease(&cfg, l)
		if j, err := Open(context.Background(), cfg); err == nil {
			j.Close()
			t.Errorf("lease at checkpoint %d, epoch high %d, key %q: the start was not refused", l.committed, l.high, l.key)
		} else {
			t.Logf("refused: %v", err)
		}
		after, err := j2.ckpts.store.List(context.Background(), ckpt.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(before, after) {
			t.Errorf("a refused start changed the checkpoints %v to %v", before, after)
		}
	}

	// No checkpoint committed, but epochs opened (a first holder that
	// died before its first commit): an empty start, and its uploads go.
	all, err := j2.ckpts.store.List(context.Background(), ckpt.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := j2.ckpts.store.High(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	third := &commitLease{testLease: newTestLease(), high: max(h, all[len(all)-1])}
	withCommitLease(&cfg, third)
	j3, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j3.Close()
	if got := j3.Status().Restored; got != 0 {
		t.Errorf("restored checkpoint %d with none committed, want an empty start", got)
	}
	if left, _ := j3.ckpts.store.List(context.Background(), ckpt.Checkpoint); len(left) != 0 {
		t.Errorf("uncommitted checkpoints %v left", left)
	}
	if err := j3.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkRows(t, scanRows(t, j3.Rows()), ref)
}

// fenceLease is a testLease with a tenure fence, as a range lease has.
type fenceLease struct {
	*testLease
	fence int64
}

func (l fenceLease) Fence() int64 { return l.fence }

// With a FenceLease every row the job writes carries the lease's fence, so
// a newer holder's writes refuse this one's late ones; a later holder with
// a higher fence rewrites them, one with a lower fence (an old tenure come
// back) is refused by the rows themselves.
func TestFenceLeaseFencesTheRows(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(3_000, 6))
	cfg := replayConfig(dir+"/data", path)
	cfg.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) {
		return fenceLease{newTestLease(), 7}, nil
	}}
	j := runToEnd(t, cfg)
	rows := scanRows(t, j.Rows())
	j.Close()
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for k, it := range rows {
		if it.Fence != 7 {
			t.Fatalf("%s/%s: wf %d, want the lease's fence 7", k.Entity, k.Bucket, it.Fence)
		}
	}
	// An older tenure replaying the same input: every write it makes to a
	// row of the newer one is refused, and the rows keep fence 7.
	old := replayConfig(dir+"/old", path)
	st, err := embedded.Open(dir+"/data/store", embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old.Rows, old.Totals, old.OpenSinks = st, st, nil
	old.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) {
		return fenceLease{newTestLease(), 3}, nil
	}}
	old.SinkOutageMs = 1_000
	jo := runToEnd(t, old)
	jo.Close()
	n := 0
	for k, it := range scanRows(t, st) {
		if it.Fence != 7 {
			t.Errorf("%s/%s: wf %d after an older tenure's writes, want 7", k.Entity, k.Bucket, it.Fence)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no rows after the old tenure")
	}
}
