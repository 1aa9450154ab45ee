package windowing

import (
	"github.com/adclick/adclick/eventtime"
	"slices"
	"testing"
)

// TestMinutesDrain: the end-of-time watermark of a drained stop or a finished
// replay fires every open window but leaves state as a real watermark would
// have: the fired minutes stay closed (a later partial is refused, so the
// caller counts it late instead of writing over the minute row), and the
// hour keeps its roll-up, so a minute of that hour that closes later rolls
// up to the sum of all its closed minutes. Before Drain existed, the
// runtime advanced the window to math.MaxInt64, which forgot every hour: a
// restart after more input wrote an hour row of the new minutes alone.
func TestMinutesDrain(t *testing.T) {
	m := newMinutes(t)
	m.Add("ad", h0, 2, 20)
	m.Add("ad", h0+mn, 3, 30)
	m.Advance(h0+mn-1, func(Row) {}) // minute 0 closes normally
	var rows []Row
	m.Drain(func(r Row) { rows = append(rows, r) })
	want := []Row{
		{Ad: "ad", StartMs: h0 + mn, Valid: 3, SpendMicros: 30, RunValid: 3, RunSpend: 30},
		{Ad: "ad", StartMs: h0, Hour: true, Valid: 5, SpendMicros: 50, RunValid: 5, RunSpend: 50},
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("Drain rows = %+v, want %+v", rows, want)
	}
	if m.OpenWindows() != 0 {
		t.Fatalf("open windows after Drain = %d, want 0", m.OpenWindows())
	}

	// A restart: the state goes through a snapshot.
	r := newMinutes(t)
	for _, b := range snapshot(t, m) {
		if err := r.Restore(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		m     *Minutes
		start int64
		want  bool
	}{
		{"drained minute, same run", m, h0 + mn, false},
		{"drained minute, restored", r, h0 + mn, false},
		{"a minute that never opened, restored", r, h0 + 2*mn, true},
		{"another ad's drained minute", r, h0 + 3*mn, true},
	} {
		ad := "ad"
		if tc.name == "another ad's drained minute" {
			ad = "other"
		}
		if got := tc.m.Add(ad, tc.start, 1, 10); got != tc.want {
			t.Errorf("%s: Add = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Minute 2 of the hour closes: the roll-up covers every closed minute.
	rows = collect(r, h0+3*mn-1)
	if i := slices.IndexFunc(rows, func(x Row) bool { return x.Hour && x.Ad == "ad" }); i < 0 || rows[i].Valid != 6 || rows[i].SpendMicros != 60 {
		t.Fatalf("hour roll-up after restart = %+v, want 6 clicks and 60 spend (2 + 3 + 1)", rows)
	}
	if v, s, ok := r.HourClosed("ad", h0); !ok || v != 6 || s != 60 {
		t.Fatalf("HourClosed = %d, %d, %v; want 6, 60, true", v, s, ok)
	}
	// Once the watermark passes a drained minute it is forgotten, and once
	// it passes the hour, the ad is gone.
	collect(r, h0+eventtime.HourMs-1)
	if r.nDrained != 0 || len(r.ads) != 0 {
		t.Fatalf("after the hour: %d drained, %d ads; want none", r.nDrained, len(r.ads))
	}
}
