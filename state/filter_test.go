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
		maxRate  float64 // of false positives, for both questions
	}{
		// 12 bits per id for each question: about 0.5% when full.
		{"full", 10_000, 10_000, 0.01},
		{"half full", 20_000, 10_000, 0.002},
		{"tiny", 1, 1, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(tc.capacity)))
			f := newBlockBloom(tc.capacity)
			type added struct {
				h   uint64
				tag uint32
			}
			adds := make([]added, tc.n)
			for i := range adds {
				if f.full() {
					t.Fatalf("full after %d of %d adds, capacity %d", i, tc.n, tc.capacity)
				}
				adds[i] = added{r.Uint64(), r.Uint32N(partitionBuckets)}
				f.add(adds[i].h, adds[i].tag)
			}
			// The capacity is rounded up to what a foldable size holds.
			if f.cap < tc.capacity || f.cap > tc.capacity*9/8+512/filterBitsPerKey {
				t.Errorf("newBlockBloom(%d) holds %d ids, want %d to an eighth more", tc.capacity, f.cap, tc.capacity)
			}
			if wantFull := tc.n >= f.cap; f.full() != wantFull || f.count() != tc.n {
				t.Errorf("after %d adds to capacity %d: full() = %v, count %d, want %v, %d",
					tc.n, f.cap, f.full(), f.count(), wantFull, tc.n)
			}
			for _, a := range adds {
				if !f.mayContain(a.h) || !f.mayContainTag(a.h, a.tag) {
					t.Fatalf("added hash %x tag %d: mayContain %v, mayContainTag %v, want true, true",
						a.h, a.tag, f.mayContain(a.h), f.mayContainTag(a.h, a.tag))
				}
			}
			// Another tag of an added hash should be about as unlikely as a
			// hash never added (the block is the same, so a little more).
			const probes = 100_000
			fp, fpTag := 0, 0
			for i := range probes {
				if f.mayContain(r.Uint64()) {
					fp++
				}
				a := adds[i%len(adds)]
				if f.mayContainTag(a.h, (a.tag+1+r.Uint32N(partitionBuckets-1))%partitionBuckets) {
					fpTag++
				}
			}
			for _, c := range []struct {
				what string
				n    int
			}{{"false-positive rate", fp}, {"false-positive rate of other tags", fpTag}} {
				if rate := float64(c.n) / probes; rate > tc.maxRate {
					t.Errorf("%s %.4f, want <= %.3f", c.what, rate, tc.maxRate)
				}
			}
		})
	}
}
