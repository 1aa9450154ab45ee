package recount

import (
	"context"
	"github.com/adclick/adclick/eventtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

func TestFinalizerFinalisesReadyHoursInOrderRateLimited(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	for i := int64(0); i < 3; i++ {
		h := h10 + i*eventtime.HourMs
		writeLake(t, st, 1+i, rec("counted", "x"+FormatHour(h), "ad1", h+1000, h+1000, h+2000, 10+i))
		putFast(t, rows, "ad1", h, 1, 10+i) // the stream's row: the hour balances
	}
	var wm atomic.Int64
	wm.Store(ReadyAt(h10+eventtime.HourMs, 2*eventtime.HourMs, 600_000)) // hours 10 and 11 ready
	o := FinalizerOptions{Recount: Options{Store: st, Rows: rows, Gen: 2, NowMs: 9,
		Watermark: func(context.Context) (int64, error) { return wm.Load(), nil }}, HoursPerRound: 1}
	f, err := NewFinalizer(o)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]int64{{h10}, {h10 + eventtime.HourMs}, nil} {
		got, err := f.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("round %d: finalised %v, want %v", i, got, want)
		}
	}
	if got := finals(t, rows); len(got) != 2 {
		t.Errorf("finals %v, want hours 10 and 11", got)
	}
	// A new finaliser (a restarted job) goes on from the saved progress.
	wm.Store(ReadyAt(h10+2*eventtime.HourMs, 2*eventtime.HourMs, 600_000))
	f2, err := NewFinalizer(o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f2.Step(ctx)
	if err != nil || !slices.Equal(got, []int64{h10 + 2*eventtime.HourMs}) {
		t.Errorf("restarted: finalised %v, %v; want [hour 12]", got, err)
	}
	it, _, _ := rows.Get(ctx, sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10 + 2*eventtime.HourMs)})
	if it.Final.Valid != 1 || it.Final.SpendMicros != 12 || it.Final.Gen != 2 {
		t.Errorf("hour 12 final %+v, want 1 click, spend 12, gen 2", it.Final)
	}
}

func TestFinalizerRunStopsWithContext(t *testing.T) {
	st := newMemStore()
	f, err := NewFinalizer(FinalizerOptions{Recount: Options{Store: st, Rows: sinktest.NewMemRows(),
		Watermark: func(context.Context) (int64, error) { return 0, nil }}, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Run(ctx); err != nil {
		t.Errorf("Run: %v, want nil at the end of its context", err)
	}
	if _, err := NewFinalizer(FinalizerOptions{Recount: Options{Store: st, Rows: sinktest.NewMemRows()}}); err == nil {
		t.Error("NewFinalizer without a watermark: got nil error")
	}
}

// putFast writes the stream's fast total of (ad, hour).
func putFast(t *testing.T, rows sink.Rows, ad string, hourMs, valid, spend int64) {
	t.Helper()
	if _, err := rows.Put(context.Background(), []sink.Put{{Key: sink.Key{Entity: ad, Bucket: sink.HourBucket(hourMs)},
		Writer: sink.Fast, Valid: valid, SpendMicros: spend, Epoch: 1, Gen: 1}}); err != nil {
		t.Fatal(err)
	}
}
