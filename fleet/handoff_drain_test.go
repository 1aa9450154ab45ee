package fleet

import (
	"context"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// blockingList holds the first SetHigh (the last step of runtime.Open)
// until release is closed.
type blockingList struct {
	ckpt.Store
	once    *sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s blockingList) SetHigh(ctx context.Context, e int64) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	return s.Store.SetHigh(ctx, e)
}

// A handed-over range does not drain at the old owner (its open windows go
// on at the new one), whether the handoff came once its pipeline ran or
// while it was still opening (restoring, flushing: before, the pipeline
// had no job yet, the handoff did not reach it, and the range drained).
func TestHandedOverRangeDoesNotDrain(t *testing.T) {
	for _, mode := range []string{"after-open", "during-open"} {
		duringOpen := mode == "during-open"
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, 1, 1, kinesis.ReadPoll)
			p := &putter{w: w, base: time.Now().Add(-2 * time.Minute).UnixMilli(), seen: map[string]bool{}, hour: map[sink.Key]sums{}}
			p.put(20)
			ctx := context.Background()
			lw, err := lease.NewWorker(w.leases, lease.WorkerOptions{Table: "leases", Job: testJob, ID: "a", Duration: 600 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			bl := blockingList{once: &sync.Once{}, entered: make(chan struct{}), release: make(chan struct{})}
			if !duringOpen {
				bl.once.Do(func() {})
			}
			jobs := make(chan *runtime.Job, 2)
			f, err := New(Options{Worker: lw, OnRange: func(_ windowing.KeyGroups, j *runtime.Job, _ error) {
				if j != nil {
					jobs <- j
				}
			}, Config: func(r windowing.KeyGroups) (runtime.Config, error) {
				rows, _ := w.store.Scoped(r.Scope())
				open := ckptstore.LocalOpener(filepath.Join(w.dir, "checkpoints", r.String()), ckptstore.Options{})
				return runtime.Config{
					DataDir: filepath.Join(w.dir, "a", r.String()), Source: "kinesis:" + w.stream, Parallelism: 2,
					AllowanceMs: new(int64(200)), Watermarks: ingest.WatermarkOptions{IntervalMs: 50, IdleMs: 500},
					CheckpointIntervalMs: 200, Drain: true, FlushWritesPerSec: 1e6,
					OpenSource: kinesis.Opener(w.api, kinesis.Options{Stream: w.stream, MinCallInterval: 5 * time.Millisecond,
						PollInterval: 10 * time.Millisecond, Limit: 50}),
					Rows: rows, Totals: rows,
					OpenCheckpoints: func() (ckpt.Store, error) {
						s, err := open()
						if err != nil {
							return nil, err
						}
						bl.Store = s
						return bl, nil
					},
					Lake: w.lake,
				}, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			c := takeTheRange(t, lw)
			f.start(ctx, c)
			var j *runtime.Job
			if duringOpen {
				<-bl.entered
			} else {
				j = <-jobs
				time.Sleep(300 * time.Millisecond)
			}
			f.round(ctx, lease.Plan{HandOff: []lease.Item{{Key: c.Key(), HandoffTo: "b"}}})
			if duringOpen {
				close(bl.release)
			}
			pl := <-f.done
			f.ended(pl)
			if j == nil {
				select {
				case j = <-jobs:
				default:
					t.Fatalf("the pipeline did not open (%v): the test did not reach a handoff during Open", pl.err)
				}
			}
			wm := j.Status().WatermarkMs
			t.Logf("pipeline err %v; watermark at stop %d", pl.err, wm)
			if wm == math.MaxInt64 {
				t.Errorf("the handed-over range drained at the old owner (watermark at the end of time)")
			}
		})
	}
}
