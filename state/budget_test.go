package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestFoldableBlocks(t *testing.T) {
	for _, n := range []int{0, 1, 2, 15, 16, 17, 31, 33, 100, 255, 1000, 4097, 1 << 20, 1<<20 + 1} {
		got := foldableBlocks(n)
		if got < max(n, 1) || float64(got) > float64(max(n, 1))*1.125+1 {
			t.Errorf("foldableBlocks(%d) = %d, want in [%d, %.0f]", n, got, max(n, 1), float64(n)*1.125+1)
		}
		m := got
		for m%2 == 0 {
			m /= 2
		}
		if m >= 16 {
			t.Errorf("foldableBlocks(%d) = %d = %d·2^s: odd part ≥ 16, cannot fold down to under 16 blocks", n, got, m)
		}
	}
}

// Folding keeps every id and tag: no false negative at any size.
func TestFoldKeepsEveryID(t *testing.T) {
	f := newBlockBloom(20_000)
	r := rand.New(rand.NewPCG(1, 2))
	type added struct {
		h   uint64
		tag uint32
	}
	var all []added
	for range 20_000 {
		a := added{r.Uint64(), r.Uint32N(partitionBuckets)}
		f.add(a.h, a.tag)
		all = append(all, a)
	}
	folds := 0
	for f.foldable() {
		f.fold()
		folds++
		for _, a := range all {
			if !f.mayContain(a.h) || !f.mayContainTag(a.h, a.tag) {
				t.Fatalf("after %d folds (%d blocks): id %x tag %d lost", folds, len(f.blocks), a.h, a.tag)
			}
		}
	}
	if folds < 5 {
		t.Fatalf("folded %d times, want at least 5 (a 20,000-id filter is %d blocks after)", folds, len(f.blocks))
	}
}

// filterBytesNow sums the filters' sizes: what FilterBytes must equal.
func filterBytesNow(d *Dedup) int {
	n := 0
	for kg := range d.kgs {
		for _, p := range append(d.kgs[kg].cur.parts, d.kgs[kg].legacy.parts...) {
			n += p.f.sizeBytes()
		}
	}
	return n
}

// With a budget, the filters' memory stays within it however many ids are
// live, and the Dedup stays exact: every fresh id is new, every copy a
// duplicate. The price is lookups in Pebble, counted.
func TestDedupBudgetBoundsFilterMemory(t *testing.T) {
	// 400,000 ids over every key group take 2.36 MB of filters unbounded;
	// under the race detector (ten times slower) 50,000 over 16 key groups.
	ids, kgs, budget := 400_000, KeyGroups, 512<<10
	if raceEnabled {
		ids, kgs, budget = 50_000, 16, 64<<10
	}
	for _, tc := range []struct {
		name   string
		budget int
		bound  bool // FilterBytes must stay within budget
	}{
		{"unbounded", 0, false},
		{"bounded", budget, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := openTemp(t, Options{})
			d := db.NewDedup()
			d.SetFilterBudget(tc.budget)
			base := int64(1_700_000_000_000)
			peak := 0
			for i := range ids {
				// Expiries over 100 minutes: four partitions per key group.
				exp := base + int64(i)*100*BucketMs/int64(ids)
				mustInsert(t, d, i%kgs, fmt.Sprintf("click-%d", i), exp, true)
				if i%10_000 == 0 {
					peak = max(peak, d.FilterBytes())
					if got, want := d.FilterBytes(), filterBytesNow(d); got != want {
						t.Fatalf("after %d ids: FilterBytes() = %d, filters hold %d", i, got, want)
					}
				}
			}
			peak = max(peak, d.FilterBytes())
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
			// Every copy is a duplicate, whatever expiry it carries.
			for i := 0; i < ids; i += 97 {
				mustInsert(t, d, i%kgs, fmt.Sprintf("click-%d", i), base+int64(i%7)*BucketMs, false)
			}
			st := d.Stats()
			t.Logf("budget %d: peak filter bytes %d (%.1f bits per id), folds %d, vain lookups %d (%.2f%% of new ids), gets %d",
				tc.budget, peak, float64(peak*8)/float64(ids), st.Folds, st.VainLookups, 100*float64(st.VainLookups)/float64(ids), st.Gets)
			if tc.bound {
				if peak > tc.budget {
					t.Fatalf("peak filter memory %d B, budget %d B", peak, tc.budget)
				}
				if st.Folds == 0 {
					t.Fatalf("no fold, yet %d ids exceed the budget", ids)
				}
			} else if peak <= budget {
				t.Fatalf("unbounded peak %d B: the ids are too few for the bounded case to mean anything", peak)
			}
		})
	}
}

// BenchmarkDedupBudget measures what a filter budget costs: 2 M live ids
// (128 key groups, expiries over two hours, as the job's horizon spreads
// them) are inserted untimed, then b.N more new ids are timed, with no
// budget and with a half and a quarter of the memory the
// unbounded filters took. It reports the filters' bits per live id and,
// per new id, the vain lookups (false positives) and Pebble Gets.
//
//	go test -run '^$' -bench DedupBudget -benchtime 200000x ./state/
func BenchmarkDedupBudget(b *testing.B) {
	const live = 2_000_000
	base := int64(1_700_000_000_000)
	exp := func(i int) int64 { return base + int64(i)*2*hourMs/live }
	ads := benchAds()
	ad := func(i int) string { return ads[i&(len(ads)-1)] }
	fill := func(b *testing.B, budget int) (*Dedup, int) {
		db, _ := openTemp(b, Options{})
		d := db.NewDedup()
		d.SetFilterBudget(budget)
		for i := range live {
			if _, err := d.Insert(i%KeyGroups, ad(i), "live-"+itoa8(i), exp(i)); err != nil {
				b.Fatal(err)
			}
			if i%50_000 == 49_999 {
				if err := d.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		return d, d.FilterBytes()
	}
	var natural int
	for _, frac := range []int{0, 2, 4} {
		name := "unbounded"
		if frac > 0 {
			name = fmt.Sprintf("budget=1/%d", frac)
		}
		b.Run(name, func(b *testing.B) {
			budget := 0
			if frac > 0 {
				if natural == 0 {
					b.Skip("run the unbounded case first (no -bench filter that leaves it out)")
				}
				budget = natural / frac
			}
			d, bytes := fill(b, budget)
			if frac == 0 {
				natural = bytes
			}
			s0 := d.Stats()
			b.ResetTimer()
			for i := range b.N {
				j := live + i
				if ok, err := d.Insert(j%KeyGroups, ad(j), "new-"+itoa8(j), exp(live-1)); err != nil || !ok {
					b.Fatalf("insert of new id %d: %v, %v", j, ok, err)
				}
				if i%50_000 == 49_999 {
					if err := d.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			s := d.Stats()
			b.ReportMetric(float64(s.FilterBytes*8)/float64(live+b.N), "bits/id")
			b.ReportMetric(float64(s.VainLookups-s0.VainLookups)/float64(b.N), "vain/op")
			b.ReportMetric(float64(s.Gets-s0.Gets)/float64(b.N), "gets/op")
		})
	}
}
