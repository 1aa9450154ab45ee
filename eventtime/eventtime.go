// Package eventtime is the event-time vocabulary every stage shares: the
// value of "no watermark yet", the minute and the hour, division that
// rounds down for times before 1970, and the rule that closes a window.
// Times are Unix milliseconds. It imports nothing but math and does no
// I/O.
package eventtime

import "math"

// NoWatermark is the watermark before there is one: below every real
// event time, so no window is closed by it.
const NoWatermark int64 = math.MinInt64

// EndOfTime is the largest time: the watermark of the end of bounded input
// or of a drained stop, which closes every window.
const EndOfTime int64 = math.MaxInt64

// The units of event time.
const (
	MinuteMs = 60_000
	HourMs   = 60 * MinuteMs
)

// FloorDiv divides a by b (b > 0) rounding towards minus infinity, so that
// times before 1970 fall in the interval that holds them.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Start returns the start of the interval of width b (b > 0) that holds t.
func Start(t, b int64) int64 { return FloorDiv(t, b) * b }

// Closed reports whether the window [start, start+width) is closed by
// watermark wm: once the watermark reaches its last millisecond, start +
// width − 1, no event of the window can still be on time. NoWatermark
// closes nothing.
func Closed(start, width, wm int64) bool {
	return wm != NoWatermark && start+width-1 <= wm
}

// SatAdd returns a + b (b ≥ 0), or math.MaxInt64 where that overflows.
func SatAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
