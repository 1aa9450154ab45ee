package eventtime

import (
	"math"
	"testing"
)

func TestFloorDivAndStart(t *testing.T) {
	for _, tc := range []struct{ a, b, q, start int64 }{
		{0, 60_000, 0, 0},
		{59_999, 60_000, 0, 0},
		{60_000, 60_000, 1, 60_000},
		{-1, 60_000, -1, -60_000},
		{-60_000, 60_000, -1, -60_000},
		{-60_001, 60_000, -2, -120_000},
		{7_199_999, HourMs, 1, HourMs},
	} {
		if got := FloorDiv(tc.a, tc.b); got != tc.q {
			t.Errorf("FloorDiv(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.q)
		}
		if got := Start(tc.a, tc.b); got != tc.start {
			t.Errorf("Start(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.start)
		}
	}
}

func TestClosed(t *testing.T) {
	for _, tc := range []struct {
		start, width, wm int64
		want             bool
	}{
		{0, MinuteMs, MinuteMs - 2, false},
		{0, MinuteMs, MinuteMs - 1, true}, // the window's last millisecond
		{0, MinuteMs, MinuteMs, true},
		{-MinuteMs, MinuteMs, -1, true},
		{math.MinInt64 + 1, MinuteMs, NoWatermark, false}, // no watermark closes nothing
		{0, HourMs, EndOfTime, true},
	} {
		if got := Closed(tc.start, tc.width, tc.wm); got != tc.want {
			t.Errorf("Closed(%d, %d, %d) = %v, want %v", tc.start, tc.width, tc.wm, got, tc.want)
		}
	}
}

func TestSatAdd(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{NoWatermark, 5, NoWatermark + 5},
	} {
		if got := SatAdd(tc.a, tc.b); got != tc.want {
			t.Errorf("SatAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
