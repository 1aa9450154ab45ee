package preagg

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/adclick/adclick/ingest"
)

// benchClicks returns n decoded clicks over 10,000 ads with Zipf-skewed
// popularity (s = 1.1: the hot ad gets a large share), one click per
// millisecond of event time, unique click ids.
func benchClicks(n int) []ingest.Click {
	r := rand.New(rand.NewSource(1))
	z := rand.NewZipf(r, 1.1, 1, 9_999)
	ads := make([]string, 10_000)
	for i := range ads {
		ads[i] = fmt.Sprintf("ad_%d", i)
	}
	out := make([]ingest.Click, n)
	for i := range out {
		ev := t0 + int64(i)
		out[i] = ingest.Click{ClickID: fmt.Sprintf("click-%016x", r.Uint64()), AdID: ads[z.Uint64()],
			CampaignID: "camp", DeviceID: "dev", ImpressionMs: ev - 1000, DeviceMs: ev, EventMs: ev,
			ArrivalMs: ev, SpendMicros: 1500}
	}
	return out
}

// BenchmarkPreagg measures PreAgg.Add per click (the hot path after decode),
// with a 500 ms flush every 500 clicks and a watermark every 5,000.
func BenchmarkPreagg(b *testing.B) {
	clicks := benchClicks(1 << 18)
	for _, mode := range []string{"NoDedup", "MemDedup"} {
		b.Run("Add/"+mode, func(b *testing.B) {
			var d Dedup
			o := Options{NoDedup: mode == "NoDedup"}
			if !o.NoDedup {
				d = NewMemDedup()
			}
			p, err := New(o, d, 0, 128)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var c ingest.Click
			for i := 0; i < b.N; i++ {
				// Each pass over the clicks is shifted 3 h later in time
				// (past the dedup horizon, so the ids of the pass before
				// have expired), so every click is counted however large
				// b.N is.
				c = clicks[i%len(clicks)]
				shift := int64(i/len(clicks)) * 3 * 3_600_000
				if i%len(clicks) == 0 && i > 0 && d != nil {
					b.StopTimer()
					if err := d.Expire(0, 128, c.ImpressionMs+shift); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				c.ImpressionMs += shift
				c.DeviceMs += shift
				c.EventMs += shift
				c.ArrivalMs += shift
				v, err := p.Add(&c, i&127)
				if err != nil {
					b.Fatal(err)
				}
				if v != Counted {
					b.Fatalf("click %d: verdict %v, want counted", i, v)
				}
				if i%500 == 499 {
					p.Tick(c.ArrivalMs)
				}
				if i%5000 == 4999 {
					p.Watermark(c.EventMs - 5000)
				}
			}
		})
	}
	b.Run("TickFlush", func(b *testing.B) {
		p, _ := New(Options{NoDedup: true}, nil, 0, 128)
		for i := 0; i < 200; i++ {
			p.Add(&clicks[i], 0)
		}
		p.Tick(t0)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for j := 0; j < 50; j++ {
				p.Add(&clicks[j], 0)
			}
			p.Tick(t0 + int64(i+1)*500)
		}
	})
}

// TestAddAllocs reports whether Add allocates per click in steady state:
// with NoDedup it must not (the partial buffer and its index are reused
// across flushes); with MemDedup the map holding the ids grows, which
// allocates amortised.
func TestAddAllocs(t *testing.T) {
	clicks := benchClicks(4096)
	p, _ := New(Options{NoDedup: true}, nil, 0, 128)
	for i := range clicks {
		p.Add(&clicks[i], 0)
	}
	p.Flush()
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		p.Add(&clicks[i%len(clicks)], 0)
		if i%256 == 255 {
			p.Flush()
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("Add with NoDedup: %.2f allocs per click, want 0", allocs)
	}
}
