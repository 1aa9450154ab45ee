package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/sink"
)

// A worker whose lease writes hang (a paused process, as far as the lease
// table can tell) is taken over. The new holder records the fence sweep it
// owes in the range's item before it restores (epochs from the committed
// checkpoint to the epoch high its take read), and a write the old holder
// signed before and that lands after the new holder's restore flush (here
// a minute row of an ad nobody clicked, written straight to the store with
// the old holder's fence and one of its epochs) is removed by the sweep
// once the sweep delay has passed; the obligation is then cleared and the
// rows equal the independent count. Fails without the sweep: nothing is
// recorded in the item, and the late row stays.
func TestTakeoverSweepsTheOldHoldersLateWrites(t *testing.T) {
	w := newWorld(t, 1, 1, kinesis.ReadPoll)
	w.sweepDelay = 1500 * time.Millisecond
	ctx := context.Background()
	p := &putter{w: w, base: time.Now().Add(-9 * time.Minute).UnixMilli(), seen: map[string]bool{}, hour: map[sink.Key]sums{}}
	a, stall := stallable(t, w, "a")
	item := wholeRangeItem(t, w)
	waitFor(t, "a to run the range", 20*time.Second, func() bool { return len(a.f.Status()) == 1 })
	for range 10 {
		p.put(40)
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "a to commit a checkpoint", 20*time.Second, func() bool { return item().Checkpoint.ID > 1 })

	// a stops renewing; b takes the range over.
	stall.stalled.Store(true)
	before := item()
	b := w.start("b")
	waitFor(t, "b to run the range", 20*time.Second, func() bool { return len(b.f.Status()) == 1 })
	taken := item()
	if len(taken.SweepsDue) != 1 {
		t.Fatalf("after the takeover the item owes sweeps %+v; want one", taken.SweepsDue)
	}
	sw := taken.SweepsDue[0]
	if sw.Fence != before.Fence || sw.From != taken.Checkpoint.ID || sw.To < before.EpochHigh || !sw.NotBefore.After(time.Now()) {
		t.Errorf("sweep owed %+v; want a's fence %d, from the committed checkpoint %d to at least a's epoch high %d, not yet due",
			sw, before.Fence, taken.Checkpoint.ID, before.EpochHigh)
	}

	// a's late write, after b's restore flush looked.
	late := writeLate(t, w, p, b, sw)

	waitFor(t, "b to sweep and clear the obligation", 20*time.Second, func() bool { return len(item().SweepsDue) == 0 })
	if _, found, err := w.store.Get(ctx, late); err != nil || found {
		t.Errorf("a's late row after the sweep: found %v, err %v; want it removed", found, err)
	}
	for range 5 {
		p.put(40)
		time.Sleep(20 * time.Millisecond)
	}
	mark := p.mark()
	waitFor(t, "b to read what was put", 30*time.Second, func() bool { return caughtUp(1, mark, b) })
	b.stop(t)
	checkRows(t, w.store, p.hour)
}

// The obligation survives its holder: b takes the range over from a and
// owes a's sweep, then is itself taken over by c before the sweep is due.
// c owes both (a's, read at its take, and b's), and once the delay has
// passed it sweeps a's late write away and clears both. Fails if a take
// replaced the sweeps it read instead of adding to them.
func TestSweepOwedPassesToTheNextHolder(t *testing.T) {
	w := newWorld(t, 1, 1, kinesis.ReadPoll)
	w.sweepDelay = 3 * time.Second
	ctx := context.Background()
	p := &putter{w: w, base: time.Now().Add(-9 * time.Minute).UnixMilli(), seen: map[string]bool{}, hour: map[sink.Key]sums{}}
	a, stallA := stallable(t, w, "a")
	item := wholeRangeItem(t, w)
	waitFor(t, "a to run the range", 20*time.Second, func() bool { return len(a.f.Status()) == 1 })
	p.put(200)
	waitFor(t, "a to commit a checkpoint", 20*time.Second, func() bool { return item().Checkpoint.ID > 1 })
	stallA.stalled.Store(true)
	b, stallB := stallable(t, w, "b")
	waitFor(t, "b to run the range", 20*time.Second, func() bool { return len(b.f.Status()) == 1 })
	owedA := item().SweepsDue
	if len(owedA) != 1 {
		t.Fatalf("after b's takeover the item owes %+v; want a's sweep", owedA)
	}
	stallB.stalled.Store(true)
	c := w.start("c")
	waitFor(t, "c to run the range", 20*time.Second, func() bool { return len(c.f.Status()) == 1 })
	owed := item().SweepsDue
	if len(owed) != 2 || !owed[0].NotBefore.Equal(owedA[0].NotBefore) || owed[0].From != owedA[0].From {
		t.Fatalf("after c's takeover the item owes %+v; want a's sweep %+v, then b's", owed, owedA[0])
	}
	late := writeLate(t, w, p, c, owedA[0])
	waitFor(t, "c to do both sweeps", 30*time.Second, func() bool { return len(item().SweepsDue) == 0 })
	if _, found, err := w.store.Get(ctx, late); err != nil || found {
		t.Errorf("a's late row after c's sweeps: found %v, err %v; want it removed", found, err)
	}
	mark := p.mark()
	waitFor(t, "c to read what was put", 30*time.Second, func() bool { return caughtUp(1, mark, c) })
	c.stop(t)
	checkRows(t, w.store, p.hour)
}

// stallable starts worker id with a lease table of its own whose writes
// hang once stalled (a paused process, as far as the lease table can
// tell); the stall ends and the worker stops when the test does.
func stallable(t *testing.T, w *world, id string) (*worker, *stallingLeases) {
	t.Helper()
	stall := &stallingLeases{Mem: w.leases}
	w.leaseAPI = stall
	wk := w.start(id)
	w.leaseAPI = nil
	t.Cleanup(func() { stall.stalled.Store(false); wk.cancel(); <-wk.done })
	return wk, stall
}

// wholeRangeItem returns a reader of the lease item of a one-range job.
func wholeRangeItem(t *testing.T, w *world) func() lease.Item {
	lw, err := lease.NewWorker(w.leases, lease.WorkerOptions{Table: "leases", Job: testJob})
	if err != nil {
		t.Fatal(err)
	}
	key := lease.RangeKey(testJob, lease.AllKeyGroups)
	return func() lease.Item {
		t.Helper()
		it, _, err := lw.Read(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
}

// writeLate writes what a holder taken over (sw's) may still land after
// the new holder's restore flush: a minute row of an ad nobody clicked,
// with that holder's fence and one of its epochs, under the job's
// generation as wk's ranges report it. It returns the row's key.
func writeLate(t *testing.T, w *world, p *putter, wk *worker, sw lease.SweepDue) sink.Key {
	t.Helper()
	var gen int64
	for _, st := range wk.f.Status() {
		gen = st.JobGen
	}
	late := sink.Put{Key: sink.Key{Entity: "ad_stale", Bucket: sink.MinuteBucket(p.base - p.base%60_000)}, Writer: sink.Fast,
		Valid: 5, SpendMicros: 500, Epoch: sw.To, Gen: gen, Fence: sw.Fence, ClosedRow: true, RestoredCkpt: sw.From}
	if refused, err := w.store.Put(context.Background(), []sink.Put{late}); err != nil || refused != 0 {
		t.Fatalf("the old holder's late write: refused %d, err %v", refused, err)
	}
	return late.Key
}
