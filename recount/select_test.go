package recount

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/adclick/adclick/eventtime"
)

func TestSelectHours(t *testing.T) {
	const h10 int64 = 1_795_946_400_000 // 2026-11-29T10Z
	const hour, horizon, margin = eventtime.HourMs, int64(7_200_000), int64(600_000)
	ctx := context.Background()
	store := newMemStore()
	lake := []int64{h10, h10 + hour, h10 + 3*hour} // 10, 11, 13; no 12
	for _, h := range lake {
		if err := store.Put(ctx, HourPrefix(h)+"part-p-e000000000001.parquet", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	wmAt := func(ms int64) func(context.Context) (int64, error) {
		return func(context.Context) (int64, error) { return ms, nil }
	}
	ready := func(h int64) int64 { return ReadyAt(h, horizon, margin) }
	var year []int64 // the longest range: 366 days and an hour
	for h := h10; h <= h10+24*366*hour; h += hour {
		year = append(year, h)
	}
	boom := errors.New("boom")
	allReady := Selection{AllReady: true, HorizonMs: horizon, MarginMs: margin}
	force := allReady
	force.Force = true
	for _, tc := range []struct {
		name      string
		sel       Selection
		watermark func(context.Context) (int64, error)
		want      []int64
		wantRange bool  // a *RangeError
		wantErr   error // errors.Is
	}{
		{name: "one_hour", sel: Selection{FromMs: h10, ToMs: h10}, want: []int64{h10}},
		{name: "range_not_in_the_lake", sel: Selection{FromMs: h10 + hour, ToMs: h10 + 2*hour}, want: []int64{h10 + hour, h10 + 2*hour}},
		{name: "range_ignores_the_watermark", sel: Selection{FromMs: h10, ToMs: h10 + hour}, watermark: wmAt(0), want: []int64{h10, h10 + hour}},
		{name: "a_year", sel: Selection{FromMs: h10, ToMs: h10 + 24*366*hour}, want: year},
		{name: "more_than_a_year", sel: Selection{FromMs: h10, ToMs: h10 + (24*366+1)*hour}, wantRange: true},
		{name: "from_after_to", sel: Selection{FromMs: h10 + hour, ToMs: h10}, wantRange: true},
		{name: "not_an_hour_start", sel: Selection{FromMs: h10 + 1, ToMs: h10 + hour}, wantRange: true},
		{name: "all_ready_none", sel: allReady, watermark: wmAt(ready(h10) - 1), want: nil},
		{name: "all_ready_first", sel: allReady, watermark: wmAt(ready(h10)), want: []int64{h10}},
		{name: "all_ready_up_to_the_first_not_ready", sel: allReady, watermark: wmAt(ready(h10 + 2*hour)), want: []int64{h10, h10 + hour}},
		{name: "all_ready_every_hour", sel: allReady, watermark: wmAt(ready(h10 + 3*hour)), want: lake},
		{name: "all_ready_no_watermark", sel: allReady, want: lake},
		{name: "all_ready_forced", sel: force, watermark: wmAt(0), want: lake},
		{name: "all_ready_forced_watermark_unread", sel: force, watermark: func(context.Context) (int64, error) { return 0, boom }, want: lake},
		{name: "all_ready_watermark_fails", sel: allReady, watermark: func(context.Context) (int64, error) { return 0, boom }, wantErr: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SelectHours(ctx, store, tc.sel, tc.watermark)
			var re *RangeError
			switch {
			case tc.wantRange:
				if !errors.As(err, &re) || re.FromMs != tc.sel.FromMs || re.ToMs != tc.sel.ToMs {
					t.Fatalf("got %v, %v; want a *RangeError of the selection", got, err)
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %.300v (%d hours), want %.300v (%d)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

func TestRangeErrorText(t *testing.T) {
	const h10 int64 = 1_795_946_400_000
	err := &RangeError{FromMs: h10 + eventtime.HourMs, ToMs: h10}
	if got, want := err.Error(), "recount: hours 2026-11-29T11Z to 2026-11-29T10Z: want hour starts, from <= to, at most a year apart"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
