package latepath

import (
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"slices"
	"testing"

	"github.com/adclick/adclick/windowing"
)

const (
	h0 = int64(1_800_000_000_000) // a whole hour, Unix ms
	hr = int64(eventtime.HourMs)
)

func flush(l *Late) []Total {
	var out []Total
	l.Flush(func(t Total) { out = append(out, t) })
	return out
}

func TestLateAddFlush(t *testing.T) {
	l := New(2 * hr)
	l.Add("b", h0+5, 1, 10)
	l.Add("a", h0+hr+1, 1, 7)
	l.Add("a", h0+59*60_000, 2, 20) // same hour as h0
	want := []Total{{"a", h0, 2, 20}, {"a", h0 + hr, 1, 7}, {"b", h0, 1, 10}}
	if got := flush(l); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := flush(l); len(got) != 0 {
		t.Fatalf("second Flush: got %v, want nothing (only dirty totals)", got)
	}
	l.Add("b", h0+1, 1, 1)
	if got, want := flush(l), []Total{{"b", h0, 2, 11}}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v (absolute value)", got, want)
	}
	if l.Clicks() != 5 || l.Len() != 3 {
		t.Fatalf("Clicks() = %d, Len() = %d; want 5, 3", l.Clicks(), l.Len())
	}
	if v, s, ok := l.Get("a", h0); !ok || v != 2 || s != 20 {
		t.Fatalf("Get = %d, %d, %v; want 2, 20, true", v, s, ok)
	}
	if _, _, ok := l.Get("a", h0+7*hr); ok {
		t.Fatal("Get of an absent total: ok = true")
	}
}

func TestLateExpire(t *testing.T) {
	l := New(2 * hr)
	l.Add("a", h0, 1, 1)
	l.Add("b", h0+hr, 1, 1)
	l.Expire(h0 + 10*hr)
	if l.Len() != 2 {
		t.Fatalf("dirty totals expired: Len() = %d, want 2", l.Len())
	}
	flush(l)
	l.Expire(h0 + hr + 2*hr) // == hour end + horizon of a: kept (strictly after)
	if l.Len() != 2 {
		t.Fatalf("Len() = %d at hour end + horizon, want 2", l.Len())
	}
	l.Expire(h0 + 3*hr + 1)
	if _, _, ok := l.Get("a", h0); ok || l.Len() != 1 {
		t.Fatalf("after wm past hour end + horizon: Len() = %d, a present %v; want 1, false", l.Len(), ok)
	}
	// An hour older than every hour held, added after an Expire that found
	// nothing to do, must still expire.
	l.Add("c", h0-5*hr, 1, 1)
	flush(l)
	l.Expire(h0 + 3*hr + 2)
	if _, _, ok := l.Get("c", h0-5*hr); ok || l.Len() != 1 {
		t.Fatalf("older hour added later: Len() = %d, c present %v; want 1, false", l.Len(), ok)
	}
}

func TestLateExpireAfterRestore(t *testing.T) {
	l := New(2 * hr)
	l.Add("a", h0, 1, 1)
	l.Add("b", h0+5*hr, 1, 1)
	flush(l)
	r := New(2 * hr)
	if err := l.Snapshot(func(_ int, d []byte) error { return r.Restore(d) }); err != nil {
		t.Fatal(err)
	}
	r.Expire(h0 + 3*hr + 1)
	if _, _, ok := r.Get("a", h0); ok || r.Len() != 1 {
		t.Fatalf("restored: Len() = %d, a present %v; want 1, false", r.Len(), ok)
	}
	r.Expire(h0 + 8*hr + 1)
	if r.Len() != 0 {
		t.Fatalf("restored: Len() = %d after every hour's horizon, want 0", r.Len())
	}
}

func TestLateSnapshotRestore(t *testing.T) {
	l := New(2 * hr)
	for i := 0; i < 40; i++ {
		l.Add(fmt.Sprintf("ad_%d", i%7), h0+int64(i%3)*hr, 1, int64(i))
	}
	blobs := map[int][]byte{}
	var order []int
	if err := l.Snapshot(func(kg int, d []byte) error {
		order = append(order, kg)
		blobs[kg] = slices.Clone(d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(order) {
		t.Fatalf("key groups out of order: %v", order)
	}
	for kg, d := range blobs {
		r := New(2 * hr)
		if err := r.Restore(d); err != nil {
			t.Fatal(err)
		}
		r.Each(func(tt Total) {
			if windowing.KeyGroup(tt.Ad) != kg {
				t.Errorf("total of %s in key group %d, want %d", tt.Ad, kg, windowing.KeyGroup(tt.Ad))
			}
			v, s, ok := l.Get(tt.Ad, tt.HourMs)
			if !ok || v != tt.Valid || s != tt.SpendMicros {
				t.Errorf("restored %v, want %d %d", tt, v, s)
			}
		})
	}
	all := New(2 * hr)
	for _, d := range blobs {
		all.Restore(d)
	}
	if all.Len() != l.Len() {
		t.Fatalf("restored %d totals, want %d", all.Len(), l.Len())
	}
	if got := flush(all); len(got) != 0 {
		t.Fatalf("restored totals are dirty: %v", got)
	}
	boom := errors.New("boom")
	if err := l.Snapshot(func(int, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
}

func TestLateRestoreCorrupt(t *testing.T) {
	for name, d := range map[string][]byte{
		"length past end": {5, 'a'},
		"bad uvarint":     {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"missing values":  {1, 'a', 2},
	} {
		t.Run(name, func(t *testing.T) {
			if err := New(hr).Restore(d); err == nil {
				t.Fatalf("Restore(%q) = nil, want an error", d)
			}
		})
	}
}

func FuzzLateRestore(f *testing.F) {
	f.Add([]byte{1, 'a', 2, 2, 2})
	f.Fuzz(func(t *testing.T, d []byte) {
		_ = New(hr).Restore(d) // must not panic
	})
}
