package state

import (
	"math/rand/v2"
	"testing"
)

func TestFilterNoFalseNegativesAndLowFalsePositives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		n        int
		stages   int
	}{
		{"fits", 10_000, 10_000, 1},
		{"grows", 256, 10_000, 4}, // 256, 1024, 4096, 16384
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(tc.capacity)))
			f := newFilter(tc.capacity)
			added := make([]uint64, tc.n)
			for i := range added {
				added[i] = r.Uint64()
				f.add(added[i])
			}
			for _, h := range added {
				if !f.mayContain(h) {
					t.Fatalf("added hash %x not found", h)
				}
			}
			if len(f.stages) != tc.stages || f.count() != tc.n {
				t.Errorf("stages %d, count %d; want %d, %d", len(f.stages), f.count(), tc.stages, tc.n)
			}
			fp := 0
			const probes = 100_000
			for range probes {
				if f.mayContain(r.Uint64()) {
					fp++
				}
			}
			// 12 bits per id: about 0.5% per full stage; allow 1% per stage.
			if rate := float64(fp) / probes; rate > 0.01*float64(tc.stages) {
				t.Errorf("false-positive rate %.4f, want <= %.2f", rate, 0.01*float64(tc.stages))
			}
		})
	}
}
