package windowing

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"pgregory.net/rapid"
)

// at returns 2026-11-29 hh:mm:ss.ms UTC in Unix ms, the day of seed 001's story.
func at(hh, mm, ss, ms int) int64 {
	return time.Date(2026, 11, 29, hh, mm, ss, ms*int(time.Millisecond), time.UTC).UnixMilli()
}

func TestWindowContainsAndMaxTimestamp(t *testing.T) {
	w := Window{Start: -60, End: 0}
	for _, tc := range []struct {
		t    int64
		want bool
	}{{-61, false}, {-60, true}, {-1, true}, {0, false}} {
		if got := w.Contains(tc.t); got != tc.want {
			t.Errorf("%v.Contains(%d) = %v, want %v", w, tc.t, got, tc.want)
		}
	}
	if got := w.MaxTimestamp(); got != -1 {
		t.Errorf("%v.MaxTimestamp() = %d, want -1", w, got)
	}
	minute := Window{Start: at(10, 14, 0, 0), End: at(10, 15, 0, 0)}
	if got, want := minute.MaxTimestamp(), at(10, 14, 59, 999); got != want {
		t.Errorf("minute 10:14 MaxTimestamp = %d, want %d (10:14:59.999)", got, want)
	}
	if got := (Window{Start: math.MinInt64, End: math.MinInt64}).MaxTimestamp(); got != math.MinInt64 {
		t.Errorf("MaxTimestamp of End=MinInt64 = %d, want MinInt64 (no wrap-around)", got)
	}
}

func TestTumbling(t *testing.T) {
	for _, tc := range []struct {
		name               string
		t, size, offset    int64
		wantStart, wantEnd int64
	}{
		// Seed 004: [0,60), [60,120); event 60 belongs to the second only.
		{"seed004 event 59", 59, 60, 0, 0, 60},
		{"seed004 event 60", 60, 60, 0, 60, 120},
		{"zero", 0, 60, 0, 0, 60},
		{"negative floors, not truncates", -1, 60, 0, -60, 0},
		{"negative on boundary", -60, 60, 0, -60, 0},
		{"negative past boundary", -61, 60, 0, -120, -60},
		{"offset", 14, 10, 5, 5, 15},
		{"offset below", 4, 10, 5, -5, 5},
		{"negative offset", 4, 10, -3, -3, 7},
		{"negative offset and t", -4, 10, -3, -13, -3},
		{"offset larger than size", 4, 10, 27, -3, 7},
		// Seed 001: c12 at 10:14:57 lands in minute 10:14.
		{"seed001 c12", at(10, 14, 57, 0), 60_000, 0, at(10, 14, 0, 0), at(10, 15, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Tumbling(tc.t, tc.size, tc.offset)
			want := Window{Start: tc.wantStart, End: tc.wantEnd}
			if got != want {
				t.Fatalf("Tumbling(%d, %d, %d) = %v, want %v", tc.t, tc.size, tc.offset, got, want)
			}
		})
	}
}

func TestTumblingInvalidSizeIsEmpty(t *testing.T) {
	for _, size := range []int64{0, -1, math.MinInt64} {
		w := Tumbling(42, size, 0)
		if w != (Window{Start: 42, End: 42}) || w.Contains(42) {
			t.Errorf("Tumbling(42, %d, 0) = %v, want the empty window [42,42)", size, w)
		}
	}
}

func ws(pairs ...int64) []Window {
	var out []Window
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Window{Start: pairs[i], End: pairs[i+1]})
	}
	return out
}

func TestSlidingSeed004(t *testing.T) {
	// The seed's two direct assertions.
	if got, want := Sliding(45, 60, 20, 0, nil), ws(0, 60, 20, 80, 40, 100); !slices.Equal(got, want) {
		t.Errorf("Sliding(45, 60, 20) = %v, want %v", got, want)
	}
	if got, want := Sliding(60, 60, 60, 0, nil), ws(60, 120); !slices.Equal(got, want) {
		t.Errorf("Sliding(60, 60, 60) = %v, want %v", got, want)
	}
	// The seed's oracle: for t in [-60, 120], the windows (s, s+60) with
	// s in range(-120, 181, 20) that contain t.
	for tt := int64(-60); tt <= 120; tt++ {
		var want []Window
		for s := int64(-120); s < 181; s += 20 {
			if s <= tt && tt < s+60 {
				want = append(want, Window{Start: s, End: s + 60})
			}
		}
		if got := Sliding(tt, 60, 20, 0, nil); !slices.Equal(got, want) {
			t.Errorf("Sliding(%d, 60, 20) = %v, want %v", tt, got, want)
		}
	}
}

func TestSlidingSeed003(t *testing.T) {
	// Ride r6 at 09:00:50, five-minute windows starting every minute, belongs
	// to the windows starting 08:56, 08:57, 08:58, 08:59 and 09:00.
	got := Sliding(at(9, 0, 50, 0), 5*60_000, 60_000, 0, nil)
	var want []Window
	for _, m := range []int{56, 57, 58, 59, 60} {
		s := at(8, m, 0, 0) // minute 60 of hour 8 normalises to 09:00
		want = append(want, Window{Start: s, End: s + 5*60_000})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Sliding(09:00:50, 5m, 1m) = %v, want %v", got, want)
	}
}

func TestSlidingShapes(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		t, size, slide, offset int64
		want                   []Window
	}{
		{"negative t", -45, 60, 20, 0, ws(-100, -40, -80, -20, -60, 0)},
		{"negative t on boundary", -40, 60, 20, 0, ws(-80, -20, -60, 0, -40, 20)},
		{"offset", 45, 60, 20, 5, ws(5, 65, 25, 85, 45, 105)},
		{"negative offset", 45, 60, 20, -5, ws(-5, 55, 15, 75, 35, 95)},
		// size % slide != 0: 50/20 puts a timestamp in 2 or 3 windows.
		{"non-multiple, 3 windows", 45, 50, 20, 0, ws(0, 50, 20, 70, 40, 90)},
		{"non-multiple, 2 windows", 55, 50, 20, 0, ws(20, 70, 40, 90)},
		// size < slide: windows [0,10), [30,40), ... leave gaps.
		{"gap, inside", 35, 10, 30, 0, ws(30, 40)},
		{"gap, outside", 45, 10, 30, 0, nil},
		{"tumbling as sliding", 60, 60, 60, 0, ws(60, 120)},
		{"size 1", -7, 1, 1, 0, ws(-7, -6)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Sliding(tc.t, tc.size, tc.slide, tc.offset, nil)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Sliding(%d, %d, %d, %d) = %v, want %v", tc.t, tc.size, tc.slide, tc.offset, got, tc.want)
			}
		})
	}
}

func TestSlidingInvalidAppendsNothing(t *testing.T) {
	dst := ws(1, 2)
	for _, tc := range []struct{ size, slide int64 }{
		{0, 10}, {-60, 10}, {60, 0}, {60, -10}, {math.MaxInt64, 1}, {MaxSlidingWindows + 1, 1},
	} {
		got := Sliding(5, tc.size, tc.slide, 0, dst)
		if !slices.Equal(got, dst) {
			t.Errorf("Sliding(5, %d, %d) = %v, want dst unchanged %v", tc.size, tc.slide, got, dst)
		}
		if err := ValidateSliding(tc.size, tc.slide); err == nil {
			t.Errorf("ValidateSliding(%d, %d) = nil, want an error", tc.size, tc.slide)
		}
	}
	if got := Sliding(5, MaxSlidingWindows, 1, 0, nil); len(got) != MaxSlidingWindows {
		t.Errorf("Sliding at the limit gave %d windows, want %d", len(got), MaxSlidingWindows)
	}
}

func TestValidateSlidingReportsEveryProblem(t *testing.T) {
	err := ValidateSliding(0, -1)
	if err == nil {
		t.Fatal("ValidateSliding(0, -1) = nil, want an error")
	}
	msg := err.Error()
	for _, want := range []string{"windowing: ", "size must be > 0", "slide must be > 0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ValidateSliding(0, -1) = %q, want it to mention %q", msg, want)
		}
	}
	if err := ValidateSliding(DefaultBurstSize, DefaultBurstSlide); err != nil {
		t.Errorf("ValidateSliding(60000, 10000) = %v, want nil", err)
	}
}

func TestSlidingSaturatesAtInt64Limits(t *testing.T) {
	got := Sliding(math.MinInt64+5, 60, 20, 0, nil)
	if len(got) == 0 {
		t.Fatalf("Sliding near MinInt64 gave no windows")
	}
	for _, w := range got {
		if !w.Contains(math.MinInt64+5) || w.Start > w.End {
			t.Errorf("Sliding near MinInt64: %v does not contain t", w)
		}
	}
	got = Sliding(math.MaxInt64-5, 60, 20, 0, nil)
	if len(got) != 3 {
		t.Fatalf("Sliding near MaxInt64 gave %v, want 3 windows", got)
	}
	for _, w := range got {
		if !w.Contains(math.MaxInt64 - 5) {
			t.Errorf("Sliding near MaxInt64: %v does not contain t", w)
		}
	}
	// MaxInt64 = 153722867280912930·60 + 7; the true End is past int64.
	want := Window{Start: math.MaxInt64 - 7, End: math.MaxInt64}
	if w := Tumbling(math.MaxInt64, 60, 0); w != want {
		t.Errorf("Tumbling(MaxInt64, 60, 0) = %v, want %v (End saturated)", w, want)
	}
	if w := Tumbling(math.MinInt64, 60, 7); w.Start != math.MinInt64 || !w.Contains(math.MinInt64) {
		t.Errorf("Tumbling(MinInt64, 60, 7) = %v, want Start saturated at MinInt64", w)
	}
}

// naiveSliding enumerates every candidate start s in (t−size, t] and keeps
// those aligned to offset modulo slide.
func naiveSliding(t, size, slide, offset int64) []Window {
	var out []Window
	for s := t - size + 1; s <= t; s++ {
		if (s-offset)%slide == 0 {
			out = append(out, Window{Start: s, End: s + size})
		}
	}
	return out
}

func TestSlidingMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.Int64Range(1, 600).Draw(rt, "size")
		slide := rapid.Int64Range(1, 700).Draw(rt, "slide")
		tt := rapid.OneOf(
			rapid.Int64Range(-5000, 5000),
			rapid.Int64Range(-1e15, 1e15),
		).Draw(rt, "t")
		offset := rapid.OneOf(
			rapid.Int64Range(-2000, 2000),
			rapid.Int64Range(-1e15, 1e15),
		).Draw(rt, "offset")
		prefix := ws(7, 8)
		got := Sliding(tt, size, slide, offset, slices.Clone(prefix))
		if !slices.Equal(got[:len(prefix)], prefix) {
			rt.Fatalf("Sliding overwrote dst: %v", got)
		}
		want := naiveSliding(tt, size, slide, offset)
		if !slices.Equal(got[len(prefix):], want) {
			rt.Fatalf("Sliding(%d, %d, %d, %d) = %v, want %v", tt, size, slide, offset, got[len(prefix):], want)
		}
		// Membership count: floor or ceil of size/slide (0 allowed only in gaps).
		if n := int64(len(want)); n != size/slide && n != ceilDiv(size, slide) {
			rt.Fatalf("t=%d in %d windows, want %d or %d", tt, n, size/slide, ceilDiv(size, slide))
		}
		// Tumbling is the single window of Sliding with slide == size.
		if tw, sw := Tumbling(tt, size, offset), naiveSliding(tt, size, size, offset); len(sw) != 1 || tw != sw[0] {
			rt.Fatalf("Tumbling(%d, %d, %d) = %v, want %v", tt, size, offset, tw, sw)
		}
	})
}

// TestDataDriven runs the scenario files in testdata/assign. Commands:
//
//	tumbling t=T size=N [offset=N] [clock]
//	sliding t=T size=N slide=N [offset=N] [clock]
//	sessions gap=N [clock]             start a fresh Sessions
//	add key=K t=T                      Sessions.Add
//	burst size=N slide=N threshold=N [clock]   start a fresh Burst
//	click device=D t=T                 Burst.Add
//	fire wm=T                          Fire on the last Sessions or Burst
//
// T is Unix ms, or hh:mm:ss[.mmm] on 2026-11-29 UTC; with "clock" windows
// print in that form too.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/assign", func(t *testing.T, path string) {
		var (
			sess  *Sessions
			burst *Burst
			clock bool
			last  string
		)
		tm := func(v int64) string {
			if !clock {
				return strconv.FormatInt(v, 10)
			}
			x := time.UnixMilli(v).UTC()
			if x.Nanosecond() != 0 {
				return x.Format("15:04:05.000")
			}
			return x.Format("15:04:05")
		}
		win := func(w Window) string { return "[" + tm(w.Start) + "," + tm(w.End) + ")" }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) int64 {
				a, ok := d.Arg(key)
				if !ok {
					d.Fatalf(t, "missing argument %s", key)
				}
				return parseT(t, d, a.SingleVal(t))
			}
			opt := func(key string) int64 {
				if !d.HasArg(key) {
					return 0
				}
				return arg(key)
			}
			str := func(key string) string {
				var s string
				d.ScanArgs(t, key, &s)
				return s
			}
			switch d.Cmd {
			case "tumbling":
				clock = d.HasArg("clock")
				return win(Tumbling(arg("t"), arg("size"), opt("offset")))
			case "sliding":
				clock = d.HasArg("clock")
				got := Sliding(arg("t"), arg("size"), arg("slide"), opt("offset"), nil)
				if len(got) == 0 {
					return "none"
				}
				parts := make([]string, len(got))
				for i, w := range got {
					parts[i] = win(w)
				}
				return strings.Join(parts, " ")
			case "sessions":
				clock = d.HasArg("clock")
				sess, last = NewSessions(arg("gap")), "sessions"
				return "ok"
			case "add":
				m, abs := sess.Add(str("key"), arg("t"))
				out := "merged " + win(m)
				if len(abs) == 0 {
					return out + " absorbed none"
				}
				out += " absorbed"
				for _, w := range abs {
					out += " " + win(w)
				}
				return out
			case "burst":
				clock = d.HasArg("clock")
				var err error
				burst, err = NewBurst(arg("size"), arg("slide"), int(arg("threshold")))
				if err != nil {
					return err.Error()
				}
				last = "burst"
				return "ok"
			case "click":
				burst.Add(str("device"), arg("t"))
				return fmt.Sprintf("open %d dropped %d", burst.Open(), burst.Dropped())
			case "fire":
				var b strings.Builder
				switch last {
				case "sessions":
					sess.Fire(arg("wm"), func(key string, w Window, n int64) {
						fmt.Fprintf(&b, "%s %s count=%d\n", key, win(w), n)
					})
				case "burst":
					burst.Fire(arg("wm"), func(dev string, w Window, n int) {
						fmt.Fprintf(&b, "%s %s count=%d\n", dev, win(w), n)
					})
				default:
					d.Fatalf(t, "fire before sessions or burst")
				}
				if b.Len() == 0 {
					return "none"
				}
				return b.String()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
				return ""
			}
		})
	})
}

// parseT reads a Unix-ms integer or a time of day hh:mm:ss[.mmm] on the
// story's day, 2026-11-29 UTC.
func parseT(t *testing.T, d *datadriven.TestData, s string) int64 {
	if !strings.Contains(s, ":") {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			d.Fatalf(t, "bad integer %q: %v", s, err)
		}
		return v
	}
	layout := "15:04:05"
	if strings.Contains(s, ".") {
		layout = "15:04:05.000"
	}
	x, err := time.Parse(layout, s)
	if err != nil {
		d.Fatalf(t, "bad time of day %q: %v", s, err)
	}
	return at(x.Hour(), x.Minute(), x.Second(), x.Nanosecond()/int(time.Millisecond))
}

func BenchmarkSliding(b *testing.B) {
	dst := make([]Window, 0, 8)
	t0 := at(10, 14, 0, 0)
	for i := 0; b.Loop(); i++ {
		dst = Sliding(t0+int64(i), DefaultBurstSize, DefaultBurstSlide, 0, dst[:0])
	}
}
