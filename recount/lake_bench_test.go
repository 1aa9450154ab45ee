package recount

import (
	"context"
	"strconv"
	"testing"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
)

// traceRecords returns the lake records of n clicks of the benchmark trace
// (BENCHMARKS.md: 100,000 ads, the hottest 30 %, Zipf, 1 % duplicates, 2 %
// late, 0.5 % invalid, 16 shards, 100,000 clicks/s), decoded as the runtime
// decodes them, with a file position as the source sequence. Late clicks
// fall in earlier hours and invalid ones go by their arrival hour, so a
// chunk has several hours, as in the stream.
func traceRecords(tb testing.TB, n int) []latepath.Record {
	tb.Helper()
	g := ingest.NewGen(ingest.GenOptions{Clicks: int64(n), Ads: 100_000, Shards: 16, Rate: 100_000, HotFraction: 0.3,
		DupFraction: 0.01, TailFraction: 0.02, InvalidFraction: 0.005, TailMaxMs: 5_400_000})
	rs := make([]latepath.Record, 0, n)
	pos := 0
	var c ingest.Click
	for {
		l, _, ok := g.Next(nil)
		if !ok {
			return rs
		}
		reason := ingest.Decode(l, &c)
		if reason == "" {
			reason = c.FinishLine()
		}
		r := latepath.Record{ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID, DeviceID: c.DeviceID,
			ImpressionMs: c.ImpressionMs, DeviceMs: c.DeviceMs, ArrivalMs: c.ArrivalMs, SpendMicros: c.SpendMicros,
			Shard: c.Shard, Seq: strconv.Itoa(pos)}
		switch {
		case reason != "":
			r.Verdict = latepath.InvalidPrefix + string(reason)
			if reason == ingest.ReasonMalformedJSON || reason == ingest.ReasonNotObject {
				r.Raw = string(l)
			}
		case c.ArrivalMs-c.EventMs > 60_000:
			r.Verdict, r.EventMs = latepath.VerdictLate, c.EventMs
		default:
			r.Verdict, r.EventMs = latepath.VerdictCounted, c.EventMs
		}
		pos += len(l) + 1
		rs = append(rs, r)
	}
}

// BenchmarkWriterTrace measures Add, Spill (after every batch of 512
// records, as the pre-aggregator calls it) and Flush per record of the
// benchmark trace, with the default spill size.
func BenchmarkWriterTrace(b *testing.B) {
	rs := traceRecords(b, 300_000)
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Add(&rs[i%len(rs)])
		if i%512 == 511 {
			if err := w.Spill(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx, 1); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	_, by := w.Written()
	b.ReportMetric(float64(by)/float64(b.N), "bytes/row")
}
