//go:build integration

package dynamo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

// BenchmarkTaggedWrites measures sustained tagged writes per second against
// the local DynamoDB stand-in with N requests in flight: each operation is
// one conditional UpdateItem (the TAGGED WRITE with the closed-row
// condition) of a distinct item, sent through Put in calls of 256 writes.
// Run it with a fixed count, for example -benchtime 2000x.
func BenchmarkTaggedWrites(b *testing.B) {
	client := localClient(b)
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			s := freshStore(b, client, Options{MaxInFlight: n})
			ctx := context.Background()
			const perCall = 256
			puts := make([]sink.Put, 0, perCall)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += perCall {
				puts = puts[:0]
				for k := i; k < min(i+perCall, b.N); k++ {
					puts = append(puts, sink.Put{
						Key:    sink.Key{Entity: fmt.Sprintf("ad_%d", k/60), Bucket: sink.MinuteBucket(int64(k%60) * 60_000)},
						Writer: sink.Fast, Valid: int64(k), SpendMicros: int64(k) * 10, Epoch: 1, Gen: 1,
						ClosedRow: true, RestoredCkpt: 0,
					})
				}
				refused, err := s.Put(ctx, puts)
				if err != nil || refused != 0 {
					b.Fatalf("put: %d refused, %v", refused, err)
				}
			}
			d := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/d.Seconds(), "writes/s")
			b.Logf("inflight=%d: %d tagged writes in %v: %.0f writes/s", n, b.N, d.Round(time.Millisecond), float64(b.N)/d.Seconds())
		})
	}
}
