package windowing

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

type burstHit struct {
	device string
	w      Window
	count  int
}

func fireBurst(b *Burst, wm int64) []burstHit {
	var out []burstHit
	b.Fire(wm, func(d string, w Window, n int) { out = append(out, burstHit{d, w, n}) })
	return out
}

// d5Clicks are device d_5's clicks from seed 001 Part 3: six in 35 s.
func d5Clicks() []int64 {
	return []int64{
		at(10, 14, 40, 0), at(10, 14, 48, 0), at(10, 14, 55, 0),
		at(10, 15, 2, 0), at(10, 15, 9, 0), at(10, 15, 15, 0),
	}
}

func TestBurstSeed001D5(t *testing.T) {
	clicks := d5Clicks()

	// Independent expectation: walk every 10 s-aligned start from a minute
	// before the first click to the last click and count the clicks inside
	// [start, start+60 s) directly.
	var want []burstHit
	for s := at(10, 13, 40, 0); s <= at(10, 15, 15, 0); s += 10_000 {
		n := 0
		for _, c := range clicks {
			if s <= c && c < s+60_000 {
				n++
			}
		}
		if n > DefaultBurstThreshold {
			want = append(want, burstHit{"d_5", Window{s, s + 60_000}, n})
		}
	}
	// Which is, spelled out: the windows starting 10:14:20, :30 and :40 see
	// all six clicks.
	spelled := []burstHit{
		{"d_5", Window{at(10, 14, 20, 0), at(10, 15, 20, 0)}, 6},
		{"d_5", Window{at(10, 14, 30, 0), at(10, 15, 30, 0)}, 6},
		{"d_5", Window{at(10, 14, 40, 0), at(10, 15, 40, 0)}, 6},
	}
	if !slices.Equal(want, spelled) {
		t.Fatalf("independent enumeration = %v, want %v", want, spelled)
	}

	b, err := NewBurst(DefaultBurstSize, DefaultBurstSlide, DefaultBurstThreshold)
	if err != nil {
		t.Fatalf("NewBurst(defaults): %v", err)
	}
	for _, c := range clicks {
		b.Add("d_5", c)
	}
	b.Add("d_6", at(10, 14, 41, 0)) // a quiet device: never reported
	var got []burstHit
	// Drive the watermark one second at a time; each window fires once, at
	// the first watermark at or past its last millisecond.
	for wm := at(10, 14, 0, 0); wm <= at(10, 17, 0, 0); wm += 1000 {
		for _, h := range fireBurst(b, wm-1) {
			if h.w.MaxTimestamp() > wm-1 || h.w.MaxTimestamp() <= wm-1001 {
				t.Errorf("window %v fired at watermark %d, not when the watermark passed its end", h.w, wm-1)
			}
			got = append(got, h)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("burst windows = %v, want %v", got, want)
	}
	if b.Open() != 0 {
		t.Fatalf("Open after all windows closed = %d, want 0", b.Open())
	}

	// Tumbling minutes miss the burst: 10:14 and 10:15 hold 3 clicks each.
	perMinute := map[Window]int{}
	for _, c := range clicks {
		perMinute[Tumbling(c, 60_000, 0)]++
	}
	for w, n := range perMinute {
		if n != 3 {
			t.Errorf("tumbling minute %v holds %d clicks, want 3", w, n)
		}
		if n > DefaultBurstThreshold {
			t.Errorf("tumbling minute %v would flag the burst (%d clicks)", w, n)
		}
	}
	if len(perMinute) != 2 {
		t.Errorf("clicks span %d tumbling minutes, want 2", len(perMinute))
	}
}

func TestBurstReportsOnceAndDropsLateContributions(t *testing.T) {
	b, err := NewBurst(60, 20, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int64{45, 46, 47} { // windows [0,60), [20,80), [40,100)
		b.Add("d", c)
	}
	if got, want := fireBurst(b, 59), []burstHit{{"d", Window{0, 60}, 3}}; !slices.Equal(got, want) {
		t.Fatalf("Fire(59) = %v, want %v", got, want)
	}
	if got := fireBurst(b, 59); got != nil {
		t.Fatalf("second Fire(59) = %v, want nothing", got)
	}
	// A late click at 50: [0,60) has closed, so it counts only in [20,80)
	// and [40,100).
	b.Add("d", 50)
	if b.Dropped() != 1 {
		t.Fatalf("Dropped = %d, want 1", b.Dropped())
	}
	// A lower watermark closes nothing new and does not re-open [0,60).
	if got := fireBurst(b, 10); got != nil {
		t.Fatalf("Fire(10) after Fire(59) = %v, want nothing", got)
	}
	// A click at 5 belongs to [-40,20), [-20,40) and [0,60), all closed.
	b.Add("d", 5)
	if b.Dropped() != 4 {
		t.Fatalf("Dropped = %d, want 4", b.Dropped())
	}
	want := []burstHit{{"d", Window{20, 80}, 4}, {"d", Window{40, 100}, 4}}
	if got := fireBurst(b, math.MaxInt64); !slices.Equal(got, want) {
		t.Fatalf("final Fire = %v, want %v", got, want)
	}
}

func TestNewBurstRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		size, slide int64
		threshold   int
		want        string
	}{
		{0, 10, 5, "size must be > 0"},
		{60, -1, 5, "slide must be > 0"},
		{60, 10, -1, "threshold must be >= 0"},
	} {
		b, err := NewBurst(tc.size, tc.slide, tc.threshold)
		if err == nil || b != nil {
			t.Errorf("NewBurst(%d, %d, %d) = %v, %v; want an error", tc.size, tc.slide, tc.threshold, b, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "windowing: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBurst(%d, %d, %d) error = %q, want prefix %q and %q", tc.size, tc.slide, tc.threshold, err, "windowing: ", tc.want)
		}
	}
}

func TestBurstMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.Int64Range(1, 50).Draw(rt, "size")
		slide := rapid.Int64Range(1, 50).Draw(rt, "slide")
		threshold := rapid.IntRange(0, 4).Draw(rt, "threshold")
		type click struct {
			dev string
			t   int64
		}
		clicks := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) click {
			return click{rapid.SampledFrom([]string{"p", "q"}).Draw(rt, "dev"), rapid.Int64Range(-100, 100).Draw(rt, "t")}
		}), 0, 40).Draw(rt, "clicks")

		b, err := NewBurst(size, slide, threshold)
		if err != nil {
			rt.Fatal(err)
		}
		for _, c := range clicks {
			b.Add(c.dev, c.t)
		}
		// Brute force: every aligned start s in [-200, 100], every device.
		var want []burstHit
		for _, dev := range []string{"p", "q"} {
			for s := int64(-200); s <= 100; s++ {
				if s%slide != 0 {
					continue
				}
				n := 0
				for _, c := range clicks {
					if c.dev == dev && s <= c.t && c.t < s+size {
						n++
					}
				}
				if n > threshold {
					want = append(want, burstHit{dev, Window{s, s + size}, n})
				}
			}
		}
		wms := rapid.SliceOfN(rapid.Int64Range(-150, 150), 0, 4).Draw(rt, "wms")
		slices.Sort(wms)
		var got []burstHit
		for _, wm := range append(wms, math.MaxInt64) {
			batch := fireBurst(b, wm)
			if !slices.IsSortedFunc(batch, func(x, y burstHit) int {
				return cmp.Or(cmp.Compare(x.device, y.device), cmp.Compare(x.w.Start, y.w.Start))
			}) {
				rt.Fatalf("Fire(%d) not in (device, start) order: %v", wm, batch)
			}
			got = append(got, batch...)
		}
		slices.SortFunc(got, func(x, y burstHit) int {
			return cmp.Or(cmp.Compare(x.device, y.device), cmp.Compare(x.w.Start, y.w.Start))
		})
		if !slices.Equal(got, want) {
			rt.Fatalf("burst windows = %v, want %v", got, want)
		}
	})
}

func BenchmarkBurstAdd(b *testing.B) {
	br, err := NewBurst(DefaultBurstSize, DefaultBurstSlide, DefaultBurstThreshold)
	if err != nil {
		b.Fatal(err)
	}
	devs := []string{"d_1", "d_2", "d_3", "d_4", "d_5", "d_6", "d_7", "d_8"}
	t0 := at(10, 0, 0, 0)
	for i := 0; b.Loop(); i++ {
		br.Add(devs[i%len(devs)], t0+int64(i))
		if i%1000 == 0 {
			br.Fire(t0+int64(i)-5_000, func(string, Window, int) {})
		}
	}
}
