package windowing

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
)

// Defaults of the device-burst rule of seed 001 Part 3: "more than 5 clicks
// from one device in a minute", checked over sliding windows of 60 s every
// 10 s so that a burst straddling a minute boundary is not missed.
const (
	DefaultBurstSize      int64 = 60_000 // ms
	DefaultBurstSlide     int64 = 10_000 // ms
	DefaultBurstThreshold       = 5      // clicks; a window must exceed it
)

// Burst detects devices with more than threshold clicks inside any sliding
// window of length size every slide (ms, windows aligned to the Unix epoch).
// It keeps one count per (device, window) until the window closes; Fire
// reports each window over the threshold exactly once, when the watermark
// passes its end.
//
// A click that arrives after some of its windows have closed (their
// MaxTimestamp is at or before a watermark already given to Fire) is not
// counted in those windows, so no window is ever reported twice; Dropped
// counts such (click, window) pairs.
//
// A Burst is not safe for concurrent use; it belongs to one subtask.
type Burst struct {
	size, slide int64
	threshold   int
	counts      map[burstKey]int
	timers      burstHeap // one entry per open window; never stale
	fired       int64     // highest watermark given to Fire
	dropped     int64
	scratch     []Window
}

type burstKey struct {
	device string
	start  int64
}

// NewBurst returns a burst detector over sliding windows of size and slide
// (ms) reporting windows with more than threshold clicks. It returns an error
// when the window configuration is invalid (see ValidateSliding) or the
// threshold is negative.
func NewBurst(size, slide int64, threshold int) (*Burst, error) {
	if err := ValidateSliding(size, slide); err != nil {
		return nil, err
	}
	if threshold < 0 {
		return nil, fmt.Errorf("windowing: burst: threshold must be >= 0, got %d", threshold)
	}
	return &Burst{
		size:      size,
		slide:     slide,
		threshold: threshold,
		counts:    make(map[burstKey]int),
		fired:     math.MinInt64,
	}, nil
}

// Add counts one click of device at event time t (Unix ms) in every window
// that contains t and has not yet closed.
func (b *Burst) Add(device string, t int64) {
	b.scratch = Sliding(t, b.size, b.slide, 0, b.scratch[:0])
	for _, w := range b.scratch {
		if w.MaxTimestamp() <= b.fired {
			b.dropped++
			continue
		}
		k := burstKey{device: device, start: w.Start}
		n := b.counts[k]
		if n == 0 {
			heap.Push(&b.timers, burstTimer{end: w.End, key: k})
		}
		b.counts[k] = n + 1
	}
}

// Fire closes every window whose MaxTimestamp (End − 1) is at or before the
// watermark wm (Unix ms), calls fn in (device, Start) order for each closed
// window whose count exceeds the threshold, and forgets all closed windows.
// A watermark lower than one already seen closes nothing new.
func (b *Burst) Fire(wm int64, fn func(device string, w Window, count int)) {
	b.fired = max(b.fired, wm)
	type hit struct {
		device string
		w      Window
		n      int
	}
	var out []hit
	for len(b.timers) > 0 && b.timers[0].end-1 <= wm {
		tm := heap.Pop(&b.timers).(burstTimer)
		n := b.counts[tm.key]
		delete(b.counts, tm.key)
		if n > b.threshold {
			out = append(out, hit{device: tm.key.device, w: Window{Start: tm.key.start, End: tm.end}, n: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].device != out[j].device {
			return out[i].device < out[j].device
		}
		return out[i].w.Start < out[j].w.Start
	})
	for _, h := range out {
		fn(h.device, h.w, h.n)
	}
}

// Open returns the number of (device, window) counts currently held.
func (b *Burst) Open() int { return len(b.counts) }

// Dropped returns how many (click, window) contributions were ignored
// because the window had already closed.
func (b *Burst) Dropped() int64 { return b.dropped }

type burstTimer struct {
	end int64
	key burstKey
}

type burstHeap []burstTimer

func (h burstHeap) Len() int           { return len(h) }
func (h burstHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h burstHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *burstHeap) Push(x any)        { *h = append(*h, x.(burstTimer)) }
func (h *burstHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}
