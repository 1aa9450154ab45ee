package windowing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

const (
	mn = int64(60_000)
	h0 = int64(1_800_000_000_000) // a whole hour, Unix ms
)

func collect(m *Minutes, wm int64) []Row {
	var out []Row
	m.Advance(wm, func(r Row) { out = append(out, r) })
	return out
}

func newMinutes(t *testing.T) *Minutes {
	t.Helper()
	m, err := NewMinutes(mn)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMinutesFireEdge(t *testing.T) {
	m := newMinutes(t)
	m.Add("ad", h0, 2, 20)
	if rows := collect(m, h0+mn-2); len(rows) != 0 {
		t.Fatalf("at end−2: got %v, want nothing", rows)
	}
	rows := collect(m, h0+mn-1)
	want := []Row{{Ad: "ad", StartMs: h0, Valid: 2, SpendMicros: 20, RunValid: 2, RunSpend: 20}, {Ad: "ad", StartMs: h0, Hour: true, Valid: 2, SpendMicros: 20, RunValid: 2, RunSpend: 20}}
	if !slices.Equal(rows, want) {
		t.Fatalf("at end−1: got %v, want %v", rows, want)
	}
	if m.Add("ad", h0, 1, 1) {
		t.Fatal("Add to a fired window returned true, want false")
	}
	if m.Stats().ClosedPartials != 1 {
		t.Fatalf("ClosedPartials = %d, want 1", m.Stats().ClosedPartials)
	}
}

func TestMinutesHourRollUp(t *testing.T) {
	m := newMinutes(t)
	m.Add("b", h0+2*mn, 4, 40)
	m.Add("a", h0, 1, 10)
	m.Add("a", h0+mn, 3, 30)
	m.Add("a", h0+mn, 2, 20) // a second partial for the same minute
	m.Add("a", h0+59*mn, 7, 70)
	rows := collect(m, h0+3*mn-1)
	want := []Row{
		{Ad: "a", StartMs: h0, Valid: 1, SpendMicros: 10, RunValid: 1, RunSpend: 10},
		{Ad: "a", StartMs: h0 + mn, Valid: 5, SpendMicros: 50, RunValid: 5, RunSpend: 50},
		{Ad: "b", StartMs: h0 + 2*mn, Valid: 4, SpendMicros: 40, RunValid: 4, RunSpend: 40},
		// The row holds closed minutes only, not the open 59th; the running
		// total for dashboards includes it.
		{Ad: "a", StartMs: h0, Hour: true, Valid: 6, SpendMicros: 60, RunValid: 13, RunSpend: 130},
		{Ad: "b", StartMs: h0, Hour: true, Valid: 4, SpendMicros: 40, RunValid: 4, RunSpend: 40},
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("got %v\nwant %v", rows, want)
	}
	// Hour state is kept while a minute of the hour is open...
	if !m.HasTotal("a", h0, true) || m.HasTotal("b", h0, true) != true {
		t.Fatal("hour totals dropped while the hour is not complete")
	}
	rows = collect(m, h0+60*mn-1)
	want = []Row{{Ad: "a", StartMs: h0 + 59*mn, Valid: 7, SpendMicros: 70, RunValid: 7, RunSpend: 70}, {Ad: "a", StartMs: h0, Hour: true, Valid: 13, SpendMicros: 130, RunValid: 13, RunSpend: 130}}
	if !slices.Equal(rows, want) {
		t.Fatalf("got %v\nwant %v", rows, want)
	}
	// ...and dropped once the hour is complete.
	if m.HasTotal("a", h0, true) || m.HasTotal("b", h0, true) {
		t.Fatal("hour state kept after the hour is complete")
	}
	if m.OpenWindows() != 0 {
		t.Fatalf("OpenWindows() = %d, want 0", m.OpenWindows())
	}
}

// Hours are forgotten once complete whatever order they arrived in, and
// after a restore.
func TestMinutesForgetHours(t *testing.T) {
	m := newMinutes(t)
	m.Add("a", h0+3*eventtime.HourMs, 1, 1)
	collect(m, h0+mn)         // nothing complete yet
	m.Add("b", h0+2*mn, 1, 1) // an older hour than any held
	collect(m, h0+eventtime.HourMs)
	if m.HasTotal("b", h0, true) {
		t.Fatal("hour of b kept after it completed")
	}
	if !m.HasTotal("a", h0+3*eventtime.HourMs, true) {
		t.Fatal("open hour of a dropped")
	}
	r := newMinutes(t)
	if err := m.Snapshot(func(_ int, d []byte) error { return r.Restore(d) }); err != nil {
		t.Fatal(err)
	}
	collect(r, h0+4*eventtime.HourMs)
	if r.HasTotal("a", h0+3*eventtime.HourMs, true) {
		t.Fatal("restored hour of a kept after it completed")
	}
}

func TestMinutesAdvanceNeverBack(t *testing.T) {
	m := newMinutes(t)
	m.Add("a", h0+5*mn, 1, 0)
	collect(m, h0+10*mn)
	if rows := collect(m, h0); len(rows) != 0 || m.Watermark() != h0+10*mn {
		t.Fatalf("lower watermark: got %v and wm %d, want nothing and wm unchanged", rows, m.Watermark())
	}
}

func early(m *Minutes) []string {
	var out []string
	m.Early(func(r Running) {
		k := "m"
		if r.Hour {
			k = "h"
		}
		out = append(out, fmt.Sprintf("%s %s %d=%d", k, r.Ad, (r.StartMs-h0)/mn, r.Valid))
	})
	slices.Sort(out)
	return out
}

func TestMinutesEarlyOnlyChanged(t *testing.T) {
	m := newMinutes(t)
	m.Add("a", h0, 1, 0)
	m.Add("b", h0+mn, 2, 0)
	if got, want := early(m), []string{"h a 0=1", "h b 0=2", "m a 0=1", "m b 1=2"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := early(m); len(got) != 0 {
		t.Fatalf("nothing changed: got %v, want nothing", got)
	}
	m.Add("a", h0, 3, 0)
	if got, want := early(m), []string{"h a 0=4", "m a 0=4"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// A minute that closed since the last call is not re-emitted as
	// running (the row carries its final total); its hour is unchanged too.
	collect(m, h0+mn-1)
	if got := early(m); len(got) != 0 {
		t.Fatalf("after closing minute 0: got %v, want nothing", got)
	}
}

func snapshot(t *testing.T, m *Minutes) map[int][]byte {
	t.Helper()
	out := map[int][]byte{}
	if err := m.Snapshot(func(kg int, d []byte) error { out[kg] = slices.Clone(d); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMinutesSnapshotRestoreRoundtrip(t *testing.T) {
	build := func() *Minutes {
		m := newMinutes(t)
		for i, ad := range []string{"ad_7", "ad_9", "ad_1", "ad_7", "héllo"} {
			m.Add(ad, h0+int64(i%3)*mn, int64(i+1), int64(10*i))
		}
		m.Add("ad_7", h0+61*mn, 5, 5) // the next hour
		collect(m, h0+mn-1)           // minute 0 closed: hour state with closed and open parts
		return m
	}
	a := build()
	b := newMinutes(t)
	for _, d := range snapshot(t, a) {
		if err := b.Restore(d); err != nil {
			t.Fatal(err)
		}
	}
	// Restore does not bring the watermark; feed both the same future.
	collect(b, h0+mn-1)
	for _, m := range []*Minutes{a, b} {
		m.Add("ad_9", h0+2*mn, 1, 1)
		m.Add("new", h0+3*mn, 1, 1)
	}
	for _, wm := range []int64{h0 + 2*mn - 1, h0 + 4*mn - 1, h0 + 2*60*mn} {
		ra, rb := collect(a, wm), collect(b, wm)
		if !slices.Equal(ra, rb) {
			t.Fatalf("after restore at wm %d: got %v, want %v", wm, rb, ra)
		}
	}
	sa, sb := snapshot(t, a), snapshot(t, b)
	if len(sa) != len(sb) {
		t.Fatalf("snapshots differ: %d vs %d key groups", len(sa), len(sb))
	}
	for kg := range sa {
		if !slices.Equal(sa[kg], sb[kg]) {
			t.Fatalf("key group %d: snapshots differ", kg)
		}
	}
}

func TestMinutesSnapshotError(t *testing.T) {
	m := newMinutes(t)
	m.Add("a", h0, 1, 1)
	boom := errors.New("boom")
	if err := m.Snapshot(func(int, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
}

func TestMinutesRestoreCorrupt(t *testing.T) {
	m := newMinutes(t)
	m.Add("ad_7", h0, 3, 30)
	collect(m, h0-1)
	var good []byte
	m.Snapshot(func(_ int, d []byte) error { good = append(good, d...); return nil })
	cases := map[string][]byte{
		"bad kind":         append([]byte{'x'}, good[1:]...),
		"length too long":  {'m', 0x7f, 'a'},
		"bad uvarint":      {'m', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"truncated varint": {'m', 1, 'a', 0x80},
		"hour truncated":   {'h', 1, 'a', 2, 2, 2},
	}
	// good is one minute record then one hour record; cutting anywhere but
	// at the boundary between them leaves a partial record.
	boundary := 1 + 1 + len("ad_7")
	for _, v := range []int64{h0, 3, 30} {
		boundary += len(binary.AppendVarint(nil, v))
	}
	if good[boundary] != 'h' {
		t.Fatalf("snapshot layout changed: byte %d is %q, want 'h'", boundary, good[boundary])
	}
	for i := 1; i < len(good); i++ {
		if i != boundary {
			cases[fmt.Sprintf("truncated at %d", i)] = good[:i]
		}
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Restore panicked: %v", r)
				}
			}()
			if err := newMinutes(t).Restore(d); err == nil {
				t.Fatalf("Restore(%q) = nil, want an error", d)
			}
		})
	}
}

func FuzzMinutesRestore(f *testing.F) {
	f.Add([]byte("m\x01a\x02\x02\x02"))
	f.Add([]byte("h\x01a\x02\x02\x02\x02\x02\x02"))
	f.Fuzz(func(t *testing.T, d []byte) {
		m, _ := NewMinutes(mn)
		_ = m.Restore(d) // must not panic
	})
}

func TestNewMinutesValidates(t *testing.T) {
	for _, w := range []int64{0, -1, 7_000} {
		if _, err := NewMinutes(w); err == nil || !strings.HasPrefix(err.Error(), "windowing:") {
			t.Errorf("NewMinutes(%d) error = %v, want a windowing: error", w, err)
		}
	}
}

// TestMinutesEarlyMatchesModel drives Minutes with random partials,
// watermarks and early firings and checks every Early against a naive
// model: the open minutes and held hours changed since the last Early, with
// their current running totals.
func TestMinutesEarlyMatchesModel(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	m := newMinutes(t)
	type key struct {
		ad    string
		start int64
		hour  bool
	}
	openMin := map[key]int64{} // open minutes: running count
	hours := map[key]int64{}   // hours with an open minute or not yet complete
	changed := map[key]bool{}
	wm := int64(eventtime.NoWatermark)
	for step := 0; step < 20_000; step++ {
		switch x := r.Intn(100); {
		case x < 90:
			ad := fmt.Sprintf("ad_%d", r.Intn(40))
			start := h0 + int64(r.Intn(150))*mn
			if wm != eventtime.NoWatermark && start+mn-1 <= wm {
				continue
			}
			c := int64(1 + r.Intn(3))
			if !m.Add(ad, start, c, 0) {
				t.Fatalf("Add(%s, %d) refused above the watermark", ad, start)
			}
			mk, hk := key{ad, start, false}, key{ad, HourStart(start), true}
			openMin[mk] += c
			hours[hk] += c
			changed[mk], changed[hk] = true, true
		case x < 97:
			if wm == eventtime.NoWatermark {
				wm = h0
			}
			wm += int64(r.Intn(3)) * mn / 2
			m.Advance(wm, func(Row) {})
			for k := range openMin {
				if k.start+mn-1 <= wm {
					delete(openMin, k)
				}
			}
			for k := range hours {
				open := false
				for mk := range openMin {
					if mk.ad == k.ad && HourStart(mk.start) == k.start {
						open = true
					}
				}
				if !open && k.start+eventtime.HourMs-1 <= wm {
					delete(hours, k)
				}
			}
		default:
			var want []string
			for k := range changed {
				if v, ok := openMin[k]; ok && !k.hour {
					want = append(want, fmt.Sprintf("m %s %d=%d", k.ad, k.start, v))
				}
				if v, ok := hours[k]; ok && k.hour {
					want = append(want, fmt.Sprintf("h %s %d=%d", k.ad, k.start, v))
				}
			}
			clear(changed)
			var got []string
			m.Early(func(r Running) {
				k := "m"
				if r.Hour {
					k = "h"
				}
				got = append(got, fmt.Sprintf("%s %s %d=%d", k, r.Ad, r.StartMs, r.Valid))
			})
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: Early emitted %v, want %v", step, got, want)
			}
		}
	}
	if n := m.OpenWindows(); n != len(openMin) {
		t.Fatalf("OpenWindows() = %d, want %d", n, len(openMin))
	}
}
