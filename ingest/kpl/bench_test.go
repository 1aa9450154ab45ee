package kpl_test

import (
	"testing"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kpl"
)

// benchAggregates builds aggregated records (the KPL's default 50 KiB limit)
// from generated clicks.
func benchAggregates(b *testing.B) (aggs [][]byte, records int) {
	b.Helper()
	g := ingest.NewGen(ingest.GenOptions{Clicks: 20_000, InvalidFraction: -1, Seed: 7})
	a := kpl.NewAggregator(0)
	for {
		line, _, ok := g.Next(nil)
		if !ok {
			break
		}
		full, err := a.Add("shard-0", "", line)
		if err != nil {
			b.Fatal(err)
		}
		if full != nil {
			aggs = append(aggs, full.Data)
			records += full.Records
		}
	}
	if last := a.Flush(); last != nil {
		aggs = append(aggs, last.Data)
		records += last.Records
	}
	return aggs, records
}

// BenchmarkDeaggregate measures de-aggregation alone, in user records per
// second on one core.
func BenchmarkDeaggregate(b *testing.B) {
	aggs, records := benchAggregates(b)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		for _, agg := range aggs {
			k, err := kpl.Deaggregate(agg, func(int, string, []byte) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			n += k
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(records), "records/op")
}

// BenchmarkDeaggregateDecode measures de-aggregation plus click decoding,
// validation and the clamp, as a shard reader and the driver do per record.
func BenchmarkDeaggregateDecode(b *testing.B) {
	aggs, records := benchAggregates(b)
	var c ingest.Click
	b.ReportAllocs()
	b.ResetTimer()
	n, bad := 0, 0
	for b.Loop() {
		for _, agg := range aggs {
			k, err := kpl.Deaggregate(agg, func(_ int, _ string, data []byte) error {
				if ingest.Decode(data, &c) != "" || c.Finish(c.DeviceMs+1000) != "" {
					bad++
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			n += k
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(records), "records/op")
	if bad > n/10 {
		b.Fatalf("%d of %d records failed to decode", bad, n)
	}
}
