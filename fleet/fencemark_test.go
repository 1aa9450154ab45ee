package fleet

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/lease/leasetest"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
	"github.com/adclick/adclick/windowing"
)

func TestFenceBehind(t *testing.T) {
	item := func(from, to int, counter int64) lease.Item {
		return lease.Item{Kind: lease.KindRange, Exists: true, Range: lease.Range{From: from, To: to}, Counter: counter}
	}
	marks := func(from, to int, f int64) map[int]int64 {
		out := map[int]int64{}
		for kg := from; kg < to; kg++ {
			out[kg] = f
		}
		return out
	}
	for _, c := range []struct {
		name  string
		marks map[int]int64
		items []lease.Item
		want  behind
		ok    bool
	}{
		{name: "no marks", items: []lease.Item{item(0, 128, 0)}},
		{name: "marks at the counters", marks: marks(0, 128, 7), items: []lease.Item{item(0, 64, 7), item(64, 128, 12)}},
		{name: "a recreated lease table", marks: marks(0, 128, 7), items: []lease.Item{item(0, 64, 0), item(64, 128, 0)},
			want: behind{kg: 0, mark: 7, counter: 0, r: lease.Range{From: 0, To: 64}}, ok: true},
		{name: "the lowest key group behind", marks: merge(marks(0, 64, 3), marks(64, 128, 9)), items: []lease.Item{item(0, 64, 5), item(64, 128, 8)},
			want: behind{kg: 64, mark: 9, counter: 8, r: lease.Range{From: 64, To: 128}}, ok: true},
		{name: "the highest counter covering a key group counts", marks: marks(0, 16, 9),
			items: []lease.Item{item(0, 16, 2), item(0, 128, 9)}},
		{name: "a key group no item covers is not judged", marks: marks(0, 128, 9), items: []lease.Item{item(0, 64, 9)}},
		{name: "slots and items never written are no ranges", marks: marks(0, 128, 9),
			items: []lease.Item{{Kind: lease.KindSlot, Exists: true, Counter: 50}, {Kind: lease.KindRange, Range: lease.Range{From: 0, To: 128}}}},
	} {
		got, ok := fenceBehind(c.marks, c.items)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: fenceBehind = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func merge(a, b map[int]int64) map[int]int64 {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// startMarked starts worker id with fence marks (job_gen 1) and onRange.
func (w *world) startMarked(id string, marks FenceMarks, onRange func(windowing.KeyGroups, *runtime.Job, error)) *worker {
	w.t.Helper()
	f := w.fleet(id)
	f.o.FenceMarks, f.o.JobGen, f.o.OnRange = marks, 1, onRange
	ctx, cancel := context.WithCancel(context.Background())
	wk := &worker{id: id, f: f, cancel: cancel, done: make(chan error, 1)}
	go func() { wk.done <- f.Run(ctx) }()
	return wk
}

// wantFix checks that a refusal names the tables, the numbers and the fix.
func wantFix(t *testing.T, err error, parts ...string) {
	t.Helper()
	t.Logf("refusal: %v", err)
	if !errors.Is(err, ErrFencesBehind) {
		t.Fatalf("error %v does not wrap ErrFencesBehind", err)
	}
	parts = append(parts, "rows table ad_metrics", "lease table leases", "job_gen 1", "lease table was recreated",
		"another job writes this rows table under the same --job-gen", "start with a higher --job-gen")
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// A worker whose lease table was recreated (fences start again at 1)
// while the rows table keeps the marks of the fences the old one handed
// out refuses to start, and says why and what to do; it takes no range.
func TestStartRefusedAfterTheLeaseTableIsRecreated(t *testing.T) {
	w := newWorld(t, 1, 2, kinesis.ReadPoll)
	marks := sinktest.NewMemFenceMarks("ad_metrics")
	a := w.startMarked("a", marks, nil)
	// Each range raises its key groups' marks to its fence before it
	// writes: the first takes of the set-up table, fence 1.
	waitFor(t, "worker a's ranges to mark their fences", 20*time.Second, func() bool {
		m, err := marks.FenceMarks(context.Background(), 1)
		return err == nil && len(m) == windowing.MaxParallelism
	})
	a.stop(t)
	if m, _ := marks.FenceMarks(context.Background(), 1); m[0] != 1 || m[127] != 1 {
		t.Fatalf("marks after worker a = %v, want fence 1 for every key group", m)
	}

	fresh := leasetest.NewMem()
	if err := lease.CreateTable(context.Background(), fresh, "leases"); err != nil {
		t.Fatal(err)
	}
	lw, err := lease.NewWorker(fresh, lease.WorkerOptions{Table: "leases", Job: testJob})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := lease.EvenRanges(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Setup(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	w.leaseAPI = fresh
	b := w.startMarked("b", marks, nil)
	select {
	case err := <-b.done:
		if err == nil {
			t.Fatal("worker b returned without an error")
		}
		wantFix(t, err, "refusing to start", "fence mark 1 for key group 0", "above counter 0 of range kg0-64")
	case <-time.After(5 * time.Second):
		b.cancel()
		<-b.done
		t.Fatal("worker b started on a recreated lease table behind the rows' fence marks")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.starts["b"]) > 0 {
		t.Errorf("worker b started ranges %v", w.starts["b"])
	}
}

// oneRaceMarks is FenceMarks on which another job, on the same rows table
// under the same job_gen, raises key groups 0-64 to fence 9 while the
// worker's first take of range kg0-64 (fence 1) is on its way to its
// pipeline: the worker's start check found no marks.
type oneRaceMarks struct {
	*sinktest.MemFenceMarks
	once sync.Once
}

func (m *oneRaceMarks) RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error {
	var err error
	if from == 0 {
		m.once.Do(func() { err = m.MemFenceMarks.RaiseFenceMark(ctx, 1, 0, 64, 9) })
	}
	if err != nil {
		return err
	}
	return m.MemFenceMarks.RaiseFenceMark(ctx, gen, from, to, fence)
}

// A range taken with a fence below the rows' mark for one of its key
// groups is refused before its pipeline opens (it writes nothing), with
// the numbers and the fix; the other range runs.
func TestTakeBelowTheFenceMarkIsRefused(t *testing.T) {
	w := newWorld(t, 1, 2, kinesis.ReadPoll)
	marks := &oneRaceMarks{MemFenceMarks: sinktest.NewMemFenceMarks("ad_metrics")}
	var (
		mu      sync.Mutex
		refused error
		opened  = map[string]bool{}
	)
	a := w.startMarked("a", marks, func(r windowing.KeyGroups, job *runtime.Job, err error) {
		mu.Lock()
		defer mu.Unlock()
		if job != nil {
			opened[r.String()] = true
		}
		if r.String() == "kg0-64" && err != nil && refused == nil {
			refused = err
		}
	})
	defer a.stop(t)
	waitFor(t, "range kg0-64 to be refused and kg64-128 to open", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if opened["kg0-64"] {
			t.Fatal("range kg0-64 opened under fence 1, below the rows' mark 9")
		}
		return refused != nil && opened["kg64-128"]
	})
	mu.Lock()
	err := refused
	mu.Unlock()
	wantFix(t, err, "range kg0-64 taken with fence 1", "fence mark 9", "key group 0")
	var ahead *sink.FenceAheadError
	if !errors.As(err, &ahead) || *ahead != (sink.FenceAheadError{Gen: 1, KeyGroup: 0, Mark: 9, Fence: 1}) {
		t.Errorf("error %v, want it to wrap the marks' refusal of fence 1 under mark 9 at key group 0", err)
	}
	if m, _ := marks.MemFenceMarks.FenceMarks(context.Background(), 1); m[0] != 9 || m[64] != 1 {
		t.Errorf("marks = %v, want 9 for key groups 0-63 (the other job's) and 1 for 64-127", m)
	}
}
