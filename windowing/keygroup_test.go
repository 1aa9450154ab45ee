package windowing

import "testing"

func TestMurmur3KnownVectors(t *testing.T) {
	// Published MurmurHash3_x86_32 vectors with seed 0.
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0},
		{"a", 0x3c2569b2},
		{"abc", 0xb3dd93fa},
		{"Hello, world!", 0xc0363e43},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723},
	} {
		if got := murmur3(tc.in); got != tc.want {
			t.Errorf("murmur3(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

func TestRangeMatchesOwner(t *testing.T) {
	for p := 1; p <= MaxParallelism; p++ {
		covered := 0
		for s := 0; s < p; s++ {
			from, to := Range(s, p)
			for kg := from; kg < to; kg++ {
				if got := Owner(kg, p); got != s {
					t.Fatalf("p=%d: Owner(%d) = %d, want %d (Range(%d) = [%d,%d))", p, kg, got, s, s, from, to)
				}
				covered++
			}
		}
		if covered != MaxParallelism {
			t.Fatalf("p=%d: ranges cover %d key groups, want %d", p, covered, MaxParallelism)
		}
	}
}

func TestKeyGroupInRange(t *testing.T) {
	for _, k := range []string{"", "ad_7", "ad_9", "c1", "a-very-long-ad-identifier-0000000001"} {
		if kg := KeyGroup(k); kg < 0 || kg >= MaxParallelism {
			t.Errorf("KeyGroup(%q) = %d, out of range", k, kg)
		}
	}
}
