package windowing

import (
	"fmt"
	"math"
	"strings"
)

// Window is the half-open event-time interval [Start, End), both in Unix
// milliseconds. A timestamp t belongs to the window when Start <= t < End.
// The zero Window is empty.
type Window struct {
	Start int64 // first millisecond inside the window (inclusive)
	End   int64 // first millisecond after the window (exclusive)
}

// MaxTimestamp returns the window's last millisecond, End − 1. An event-time
// window fires when the watermark reaches this value (watermark >=
// MaxTimestamp), the convention of DESIGN.md §4 and seed 000.
func (w Window) MaxTimestamp() int64 {
	if w.End == math.MinInt64 {
		return math.MinInt64
	}
	return w.End - 1
}

// Contains reports whether the Unix-millisecond timestamp t lies in
// [Start, End).
func (w Window) Contains(t int64) bool { return w.Start <= t && t < w.End }

// String formats the window as "[Start,End)" in Unix milliseconds.
func (w Window) String() string { return fmt.Sprintf("[%d,%d)", w.Start, w.End) }

// MaxSlidingWindows is the largest number of windows one timestamp may belong
// to, ceil(size/slide). Sliding assigns nothing beyond it and ValidateSliding
// reports it: a one-hour window sliding every second is 3,600 windows per
// element, and a configuration far past that is a mistake, not a workload.
const MaxSlidingWindows = 1 << 16

// ValidateSliding checks a sliding-window configuration (size and slide in
// ms) and reports every problem it finds, or nil. Tumbling windows are the
// case size == slide.
func ValidateSliding(size, slide int64) error {
	var probs []string
	if size <= 0 {
		probs = append(probs, fmt.Sprintf("size must be > 0 ms, got %d", size))
	}
	if slide <= 0 {
		probs = append(probs, fmt.Sprintf("slide must be > 0 ms, got %d", slide))
	}
	if size > 0 && slide > 0 && ceilDiv(size, slide) > MaxSlidingWindows {
		probs = append(probs, fmt.Sprintf("size/slide = %d/%d puts each element in more than %d windows",
			size, slide, MaxSlidingWindows))
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("windowing: invalid sliding window: %s", strings.Join(probs, "; "))
}

// Tumbling returns the window of length size (ms) that contains t (Unix ms),
// with window starts aligned to offset + k·size for integer k (offset 0 aligns
// to the Unix epoch, as Flink does). The rounding is a floor, so negative t
// and negative offset are exact: Tumbling(-1, 60, 0) is [-60, 0).
//
// If size <= 0 it returns the empty window [t, t), which contains nothing;
// configurations should be checked with ValidateSliding(size, size). Bounds
// that fall outside int64 saturate at math.MinInt64 / math.MaxInt64 (so a
// window ending past the int64 range ends at math.MaxInt64 and, being
// half-open, does not contain math.MaxInt64 itself).
func Tumbling(t, size, offset int64) Window {
	if size <= 0 {
		return Window{Start: t, End: t}
	}
	r := sinceStart(t, size, offset)
	return Window{Start: satSub(t, r), End: satAdd(t, size-r)}
}

// Sliding appends to dst every window of length size (ms) whose start is
// aligned to offset + k·slide (k any integer) and which contains t (Unix ms),
// ordered by Start, and returns the extended slice. Negative t and negative
// offset are handled with floor rounding.
//
// When size is a multiple of slide, every timestamp belongs to exactly
// size/slide windows. When it is not, a timestamp belongs to
// floor(size/slide) or ceil(size/slide) windows depending on where it falls
// within its slide; when size < slide the windows leave gaps and a timestamp
// in a gap belongs to no window (nothing is appended).
//
// Invalid configurations (size <= 0, slide <= 0, or more than
// MaxSlidingWindows windows per element; see ValidateSliding) append nothing
// and return dst unchanged. Bounds outside int64 saturate.
func Sliding(t, size, slide, offset int64, dst []Window) []Window {
	if size <= 0 || slide <= 0 || ceilDiv(size, slide) > MaxSlidingWindows {
		return dst
	}
	r := sinceStart(t, slide, offset) // t minus the latest aligned start <= t
	if r >= size {
		return dst // t lies in a gap between windows (size < slide)
	}
	// The starts t − r − k·slide contain t while r + k·slide < size; both
	// bounds are computed from t so that saturation stays local to the bound
	// that overflows.
	n := ceilDiv(size-r, slide)
	for k := n - 1; k >= 0; k-- {
		d := r + k*slide // < size, no overflow
		dst = append(dst, Window{Start: satSub(t, d), End: satAdd(t, size-d)})
	}
	return dst
}

// sinceStart returns t − s for the greatest s <= t with s ≡ offset
// (mod step), step > 0; the result is in [0, step) and never overflows.
func sinceStart(t, step, offset int64) int64 {
	r := floorMod(t, step) - floorMod(offset, step)
	if r < 0 {
		r += step
	}
	return r
}

// floorMod returns a mod m in [0, m) for m > 0.
func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// satAdd returns a + b for b >= 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satSub returns a − b for b >= 0, saturating at math.MinInt64.
func satSub(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
