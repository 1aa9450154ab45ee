package runtime

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/sink"
)

// sweepLease is a commitLease that carries fence sweeps, as a range's
// lease item does.
type sweepLease struct {
	*commitLease
	smu    sync.Mutex
	sweeps []Sweep
	done   [][]Sweep
}

func (l *sweepLease) SweepsDue() []Sweep {
	l.smu.Lock()
	defer l.smu.Unlock()
	return append([]Sweep(nil), l.sweeps...)
}

func (l *sweepLease) SweepsDone(_ context.Context, left []Sweep) error {
	l.smu.Lock()
	defer l.smu.Unlock()
	l.done = append(l.done, left)
	l.sweeps = append([]Sweep(nil), left...)
	return nil
}

// A holder taken over may land writes after the new holder's restore flush
// looked (signed before the takeover, delivered late): on an item the
// flush deleted, nothing fences them. The new holder writes no epoch of
// its own at or below the high its take read, so at its first checkpoint
// past the sweep's time it finds them by their tags and removes them;
// sweeps not yet due stay owed. Fails without the sweep (the stale minute
// row and the inflated late total stay) and without the epoch skip (the
// new holder's own rows tagged there would be swept too).
func TestFenceSweepRemovesAPredecessorsLateWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(6_000, 7))
	ref := fileReference(t, path)
	cfg := replayConfig(dir+"/data", path)
	cfg.CheckpointIntervalMs = 2_000
	cfg.CheckpointsKept = 100
	first := &commitLease{testLease: newTestLease()}
	withCommitLease(&cfg, first)
	j := runToEnd(t, cfg)
	ids, err := j.ckpts.store.List(ctx, ckpt.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if len(ids) < 4 {
		t.Fatalf("%d checkpoints: the trace is too short for the test", len(ids))
	}

	// The second holder took over at an early checkpoint; the first had
	// opened epochs up to high.
	kept, high := ids[1], ids[len(ids)-1]+2
	later := time.Now().Add(time.Hour)
	second := &sweepLease{commitLease: &commitLease{testLease: newTestLease(), committed: kept, high: high},
		sweeps: []Sweep{{Fence: 1, From: kept, To: high}, {Fence: 2, From: high + 100, To: high + 101, NotBefore: later}}}
	cfg.Lease = &LeaseConfig{Acquire: func(context.Context, *slog.Logger, prometheus.Registerer) (Lease, error) { return second, nil }}
	j2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if second.opened[0] != high+1 {
		t.Errorf("epochs opened %v: want the first above the high %d the take read", second.opened, high)
	}

	// The first holder's late writes, after the restore flush: a minute
	// row of an ad that has no clicks, and an hour's late total.
	var hour sink.Key
	for k, it := range scanRows(t, j2.Rows()) {
		if _, isHour, _ := sink.ParseBucket(k.Bucket); isHour && (!it.Late.Present || it.Late.Ckpt < kept) {
			hour = k
			break
		}
	}
	if hour.Entity == "" {
		t.Fatal("no hour row the restore flush left alone")
	}
	stale := []sink.Put{
		{Key: sink.Key{Entity: "ad-stale", Bucket: sink.MinuteBucket(minuteOf(hour))}, Writer: sink.Fast, Valid: 7, SpendMicros: 700,
			Epoch: kept + 1, Gen: j2.Status().JobGen, ClosedRow: true, RestoredCkpt: kept},
		{Key: hour, Writer: sink.Late, Valid: 1_000, SpendMicros: 1_000, Epoch: kept, Gen: j2.Status().JobGen},
	}
	for _, p := range stale {
		if refused, err := j2.Rows().Put(ctx, []sink.Put{p}); err != nil || refused != 0 {
			t.Fatalf("the late write %+v: refused %d, err %v", p, refused, err)
		}
	}

	if err := j2.Run(ctx); err != nil {
		t.Fatal(err)
	}
	items := scanRows(t, j2.Rows())
	checkRows(t, items, ref)
	for k, it := range items {
		for _, w := range sink.TaggedWriters {
			if a := it.Attrs(w); a.Present && a.Ckpt >= kept && a.Ckpt <= high {
				t.Errorf("%s/%s: %s tagged %d, in the swept epochs %d-%d", k.Entity, k.Bucket, w, a.Ckpt, kept, high)
			}
		}
	}
	second.smu.Lock()
	defer second.smu.Unlock()
	if len(second.done) != 1 || len(second.done[0]) != 1 || second.done[0][0].From != high+100 {
		t.Errorf("sweeps recorded done: %+v; want one record leaving only the sweep not yet due", second.done)
	}
}

// minuteOf returns the start of the first minute of an hour row's hour.
func minuteOf(hour sink.Key) int64 {
	ms, _, err := sink.ParseBucket(hour.Bucket)
	if err != nil {
		panic(err)
	}
	return ms
}
