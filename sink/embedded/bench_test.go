package embedded

import (
	"fmt"
	"testing"

	"github.com/adclick/adclick/sink"
)

// rewriteLoad produces the row writes of a running job, one Put call (of up
// to 100 rows) at a time: every minute each of ads ads gets its closed
// minute row, written once with the closed-row condition, and then its
// hour's roll-up, the same hour row rewritten every minute of the hour. The
// epoch advances every other minute, as checkpoints do.
type rewriteLoad struct {
	ads  []string
	call int
}

func newRewriteLoad(ads int) *rewriteLoad {
	l := &rewriteLoad{ads: make([]string, ads)}
	for i := range l.ads {
		l.ads[i] = fmt.Sprintf("ad_%d", i)
	}
	return l
}

// next fills ps with the next call's writes and returns them.
func (l *rewriteLoad) next(ps []sink.Put) []sink.Put {
	const startMs = 1795946400000 // 2026-11-29T10:00Z
	perKind := (len(l.ads) + 99) / 100
	minute := l.call / (2 * perKind)
	step := l.call % (2 * perKind)
	l.call++
	hour := step >= perKind
	from := (step % perKind) * 100
	ms := startMs + int64(minute)*60_000
	bucket := sink.MinuteBucket(ms)
	if hour {
		bucket = sink.HourBucket(ms)
	}
	ps = ps[:0]
	for _, ad := range l.ads[from:min(from+100, len(l.ads))] {
		ps = append(ps, sink.Put{Key: sink.Key{Entity: ad, Bucket: bucket}, Writer: sink.Fast,
			Valid: int64(minute + 1), SpendMicros: int64(minute+1) * 1000, Epoch: int64(1 + minute/2), Gen: 1, ClosedRow: !hour})
	}
	return ps
}

// BenchmarkPutRewrites measures Put under the write pattern of a running
// job (rewriteLoad): half the rows are written once, half are hour rows
// rewritten every minute.
func BenchmarkPutRewrites(b *testing.B) {
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"rows", Options{NoSync: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := openTemp(b, c.o)
			l := newRewriteLoad(20_000)
			ps := make([]sink.Put, 0, 100)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				ps = l.next(ps)
				n += len(ps)
				if _, err := s.Put(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/item")
		})
	}
}
