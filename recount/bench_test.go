package recount

import (
	"context"
	"strconv"
	"testing"

	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/sink/sinktest"
)

// benchRecords returns n records of one hour, like the stream's.
func benchRecords(n int) []latepath.Record {
	const start = 1_795_946_400_000
	rs := make([]latepath.Record, n)
	for i := range rs {
		ev := int64(start + i%3_600_000)
		rs[i] = latepath.Record{Verdict: latepath.VerdictCounted, ClickID: "c" + strconv.Itoa(i) + "-x9f3a",
			AdID: "ad_" + strconv.Itoa(i%997), CampaignID: "camp_" + strconv.Itoa(i%50), DeviceID: "d_" + strconv.Itoa(i*7919%1_000_000),
			ImpressionMs: ev - 12_000, DeviceMs: ev, EventMs: ev, ArrivalMs: ev + 800, SpendMicros: 1000 + int64(i%500_000),
			Shard: "S" + strconv.Itoa(i%4), Seq: strconv.Itoa(i)}
	}
	return rs
}

// BenchmarkWriter measures Add + Flush (Parquet encoding and a Put to an
// in-memory-like folder) per record.
func BenchmarkWriter(b *testing.B) {
	rs := benchRecords(100_000)
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &rs[i%len(rs)]
		w.Add(r)
		if w.Buffered() == len(rs) {
			if err := w.Flush(ctx, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx, int64(b.N)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	_, by := w.Written()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(by)/float64(b.N), "bytes/row")
}

// BenchmarkRecount measures the recount of a lake of one million clicks
// over about three hours (the generator's trace, written by the simulated
// stream): clicks per second of one Run over every hour. Run sequentially,
// so with GOMAXPROCS=1 the figure is per core:
//
//	GOMAXPROCS=1 go test -run X -bench Recount -benchtime 3x ./recount/
func BenchmarkRecount(b *testing.B) {
	lines := genLines(b, 1_000_000, 11, 100)
	st := newMemStore()
	res := simulateStream(b, st, lines, 100_000, 1)
	var hours []int64
	if err := Hours(context.Background(), st, 0, func(h int64) error { hours = append(hours, h); return nil }); err != nil {
		b.Fatal(err)
	}
	_ = res
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rows := sinktest.NewMemRows()
		if _, err := Run(context.Background(), Options{Store: st, Rows: rows, Hours: hours, Gen: 1, Watermark: forever, AcceptUnbalanced: lakeOnly}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(lines))*float64(b.N)/b.Elapsed().Seconds(), "clicks/s")
}
