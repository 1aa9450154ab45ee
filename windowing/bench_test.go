package windowing

import (
	"fmt"
	"math/rand"
	"testing"
)

// BenchmarkWindow measures Minutes.Add of one partial (Zipf-skewed ads over
// 10,000, the minute advancing with the partials) with an Advance every 100
// partials that closes the minutes 5 s behind, as the pre-aggregators'
// partials and the watermark drive it, and an Early (the running totals
// for dashboards) every 1,000 partials.
func BenchmarkWindow(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	z := rand.NewZipf(r, 1.1, 1, 9_999)
	ads := make([]string, 10_000)
	for i := range ads {
		ads[i] = fmt.Sprintf("ad_%d", i)
	}
	seq := make([]string, 1<<16)
	for i := range seq {
		seq[i] = ads[z.Uint64()]
	}
	m, err := NewMinutes(mn)
	if err != nil {
		b.Fatal(err)
	}
	emit := func(Row) {}
	running := func(Running) {}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := h0 + int64(i)*10 // 100 partials per second of event time
		m.Add(seq[i&(len(seq)-1)], ev-ev%mn, 3, 4500)
		if i%100 == 99 {
			m.Advance(ev-5000, emit)
		}
		if i%1000 == 999 {
			m.Early(running)
		}
	}
}
