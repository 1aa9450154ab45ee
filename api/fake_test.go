package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// ms parses an RFC 3339 time for test data.
func ms(t testing.TB, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v.UnixMilli()
}

// fakeJob is a Job over in-memory stores that records operator calls.
type fakeJob struct {
	rows   *sinktest.MemRows
	totals sink.Totals

	mu        sync.Mutex
	st        runtime.Status
	spErr     error
	stopErr   error
	sweepErr  error
	sweeps    [][3]int64
	stops     []bool
	spTaken   int
	consumerL map[string]int64
}

func (f *fakeJob) Status() runtime.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeJob) meta() runtime.Meta {
	return runtime.Meta{ID: 42, JobGen: f.st.JobGen, Watermark: f.st.WatermarkMs, Parallelism: f.st.Parallelism,
		Restored: f.st.Restored, TakenAtMs: f.st.ProcessingMs, DurationMs: 35, SizeBytes: 123456}
}

func (f *fakeJob) Savepoint(ctx context.Context) (runtime.Meta, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.spErr != nil {
		return runtime.Meta{}, "", f.spErr
	}
	f.spTaken++
	return f.meta(), "savepoints/sp-42", nil
}

func (f *fakeJob) Stop(ctx context.Context, savepoint bool) (runtime.Meta, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopErr != nil {
		return runtime.Meta{}, "", f.stopErr
	}
	f.stops = append(f.stops, savepoint)
	m := f.meta()
	m.Final = true
	if savepoint {
		return m, "savepoints/sp-42", nil
	}
	return m, "", nil
}

func (f *fakeJob) Sweep(ctx context.Context, gen, since, high int64) (flush.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sweepErr != nil {
		return flush.Report{}, f.sweepErr
	}
	f.sweeps = append(f.sweeps, [3]int64{gen, since, high})
	return flush.Report{Epochs: 3, ItemsScanned: 12, ItemsDeleted: 2, AttrsRemoved: 5, TotalsDeleted: 1, Fenced: 1,
		Duration: 1500 * time.Millisecond}, nil
}

func (f *fakeJob) Rows() sink.Rows     { return f.rows }
func (f *fakeJob) Totals() sink.Totals { return f.totals }

type lagJob struct{ *fakeJob }

func (l lagJob) ConsumerLagMs() map[string]int64 { return l.consumerL }

// newFakeJob returns the job of seed 001's snapshot W2 (10:15:07.2: S1 and
// S2 active, S3 idle, watermark 10:15:00.999, checkpoint 41), with rows and
// running totals around it:
//
//	hour 09: ad_7 final; ad_9 fast+late, provisional; ad_1..ad_5 fast only.
//	hour 10: ad_7 fast (open).
//	minutes: ad_7 09:58, 09:59 (hour final), 10:14 (closed), 10:15 (open);
//	         ad_9 10:14, 10:15; ad_2 10:15; all written in epoch 41.
func newFakeJob(t testing.TB) *fakeJob {
	t.Helper()
	proc := ms(t, "2026-11-29T10:15:07.2Z")
	wm := ms(t, "2026-11-29T10:15:00.999Z")
	f := &fakeJob{rows: sinktest.NewMemRows(), totals: sinktest.NewMemTotals()}
	f.st = runtime.Status{JobGen: 7, Parallelism: 2, Source: "gen", Restored: 38, Ready: true,
		ProcessingMs: proc, WatermarkMs: wm, WatermarkLagMs: proc - wm, Records: 16, Invalid: 1,
		Shards: []ingest.ShardWatermark{
			{ID: "S1", Watermark: wm, MaxEventMs: ms(t, "2026-11-29T10:15:06Z"), LastRecordMs: ms(t, "2026-11-29T10:15:06.5Z")},
			{ID: "S2", Watermark: ms(t, "2026-11-29T10:15:01.999Z"), MaxEventMs: ms(t, "2026-11-29T10:15:07Z"), LastRecordMs: ms(t, "2026-11-29T10:15:07.1Z")},
			{ID: "S3", Watermark: ms(t, "2026-11-29T10:14:14.999Z"), MaxEventMs: ms(t, "2026-11-29T10:14:20Z"), Idle: true, LastRecordMs: ms(t, "2026-11-29T10:14:20.8Z")},
		},
		LastCheckpoint: &runtime.Meta{ID: 41, JobGen: 7, TakenAtMs: ms(t, "2026-11-29T10:15:01Z"), DurationMs: 120, SizeBytes: 2 << 20, Parallelism: 2,
			Watermark: ms(t, "2026-11-29T10:14:59.999Z"), Settings: "format=3 window_ms=60000 horizon_ms=7200000 max_parallelism=128 dedup=true"},
		Flush: &flush.Report{Epochs: 4, ItemsScanned: 9, AttrsRemoved: 3, Duration: 250 * time.Millisecond},
	}
	ctx := context.Background()
	h09, h10 := sink.HourBucket(ms(t, "2026-11-29T09:00:00Z")), sink.HourBucket(ms(t, "2026-11-29T10:00:00Z"))
	puts := []sink.Put{
		{Key: sink.Key{Entity: "ad_7", Bucket: h09}, Writer: sink.Fast, Valid: 40, SpendMicros: 4_000_000, Epoch: 30, Gen: 7},
		{Key: sink.Key{Entity: "ad_7", Bucket: h09}, Writer: sink.Late, Valid: 2, SpendMicros: 200_000, Epoch: 35, Gen: 7},
		{Key: sink.Key{Entity: "ad_9", Bucket: h09}, Writer: sink.Fast, Valid: 12, SpendMicros: 600_000, Epoch: 31, Gen: 7},
		{Key: sink.Key{Entity: "ad_9", Bucket: h09}, Writer: sink.Late, Valid: 1, SpendMicros: 50_000, Epoch: 36, Gen: 7},
		{Key: sink.Key{Entity: "ad_7", Bucket: h10}, Writer: sink.Fast, Valid: 5, SpendMicros: 500_000, Epoch: 41, Gen: 7},
	}
	for i := 1; i <= 5; i++ {
		puts = append(puts, sink.Put{Key: sink.Key{Entity: "ad_" + string(rune('0'+i)), Bucket: h09}, Writer: sink.Fast,
			Valid: int64(i), SpendMicros: int64(i) * 1000, Epoch: 30, Gen: 6})
	}
	if _, err := f.rows.Put(ctx, puts); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rows.PutFinal(ctx, []sink.FinalPut{{Key: sink.Key{Entity: "ad_7", Bucket: h09}, Valid: 43, SpendMicros: 4_300_000, Gen: 7,
		AtMs: ms(t, "2026-11-29T12:05:00Z")}}); err != nil {
		t.Fatal(err)
	}
	tot := func(ad, at string, valid int64) sink.Total {
		return sink.Total{Ad: ad, StartMs: ms(t, at), Valid: valid, SpendMicros: valid * 100_000, Epoch: 41}
	}
	if err := f.totals.SetTotals(ctx, []sink.Total{
		tot("ad_7", "2026-11-29T09:58:00Z", 3), tot("ad_7", "2026-11-29T09:59:00Z", 4),
		tot("ad_7", "2026-11-29T10:14:00Z", 5), tot("ad_7", "2026-11-29T10:15:00Z", 1),
		tot("ad_9", "2026-11-29T10:14:00Z", 2), tot("ad_9", "2026-11-29T10:15:00Z", 6),
		tot("ad_2", "2026-11-29T10:15:00Z", 1),
		{Ad: "ad_7", StartMs: ms(t, "2026-11-29T10:00:00Z"), Hour: true, Valid: 6, Epoch: 41},
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

func itemWithFinal(final bool) sink.Item {
	it := sink.Item{Key: sink.Key{Entity: "ad_1"}}
	it.Fast = sink.Tagged{Present: true, Valid: 1}
	if final {
		it.Final = sink.FinalAttrs{Present: true, Valid: 1}
	}
	return it
}
