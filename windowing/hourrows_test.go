package windowing

import (
	"slices"
	"testing"
)

func TestHourRowsRewritesHeldHoursWithClosedMinutes(t *testing.T) {
	m := newMinutes(t)
	m.Add("b", h0, 2, 20)      // closes below
	m.Add("b", h0+5*mn, 3, 30) // stays open
	m.Add("a", h0, 4, 40)      // closes below
	m.Add("c", h0+9*mn, 1, 1)  // open only: no row was ever written
	collect(m, h0+mn-1)
	var got []Row
	m.HourRows(func(r Row) { got = append(got, r) })
	want := []Row{
		{Ad: "a", StartMs: h0, Hour: true, Valid: 4, SpendMicros: 40, RunValid: 4, RunSpend: 40},
		{Ad: "b", StartMs: h0, Hour: true, Valid: 2, SpendMicros: 20, RunValid: 5, RunSpend: 50},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
