package state

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDedupInsert inserts b.N random click ids spread over 128 key
// groups and two hours of expiries, committing every 50,000 inserts as the
// runtime does every few hundred ms. Run with -benchtime=10000000x for the
// 10M-id figure.
func BenchmarkDedupInsert(b *testing.B) {
	benchmarkDedupInsert(b, Options{})
}

func benchmarkDedupInsert(b *testing.B, o Options) {
	db, _ := openTemp(b, o)
	d := db.NewDedup()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 16)
	ids := make([]string, 0, 1<<16)
	for range cap(ids) {
		ids = append(ids, randomID(r, buf))
	}
	base := int64(1_700_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		// Fresh random ids: reuse the pregenerated suffixes with a counter so
		// generation cost stays out of the measurement while every id is new.
		id := ids[i&(len(ids)-1)]
		exp := base + int64(i)*10 + int64(r.IntN(7_200_000))
		ok, err := d.Insert(int(r.Uint32()%KeyGroups), id[:24]+itoa8(i), exp)
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			b.Fatalf("insert %d reported a duplicate", i)
		}
		if i%50_000 == 49_999 {
			if err := d.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := d.Commit(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(db.SizeBytes())/float64(b.N), "disk-B/id")
}

// itoa8 renders i as 8 hex digits.
func itoa8(i int) string {
	const hex = "0123456789abcdef"
	var out [8]byte
	for j := 7; j >= 0; j-- {
		out[j] = hex[i&15]
		i >>= 4
	}
	return string(out[:])
}

// TestDedupLargerThanCache runs dedup with far more state than the block
// cache and the memtables hold, so lookups go to the tables on disk: every
// inserted id must still be found as a duplicate, and new ids must not be.
func TestDedupLargerThanCache(t *testing.T) {
	n := 3_000_000
	if raceEnabled || testing.Short() {
		n = 300_000
	}
	db, _ := openTemp(t, Options{CacheSize: 1 << 20, MemTableSize: 4 << 20})
	d := db.NewDedup()
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 16)
	type rec struct {
		kg  int
		id  string
		exp int64
	}
	sample := make([]rec, 0, 2000)
	start := time.Now()
	for i := range n {
		x := rec{int(r.Uint32() % KeyGroups), randomID(r, buf), int64(r.IntN(7_200_000))}
		mustInsert(t, d, x.kg, x.id, x.exp, true)
		if i%(n/cap(sample)) == 0 && len(sample) < cap(sample) {
			sample = append(sample, x)
		}
		if i%50_000 == 49_999 {
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	size := db.SizeBytes()
	t.Logf("%d ids in %v (%.2f µs/insert), state %d MiB on disk, cache 1 MiB",
		n, elapsed, float64(elapsed.Microseconds())/float64(n), size>>20)
	if size < 8<<20 {
		t.Errorf("state is %d bytes, want it well beyond the 1 MiB cache and 4 MiB memtable", size)
	}
	for _, x := range sample {
		mustInsert(t, d, x.kg, x.id, x.exp, false)
	}
	for range 2000 {
		mustInsert(t, d, int(r.Uint32()%KeyGroups), randomID(r, buf), int64(r.IntN(7_200_000)), true)
	}
}

// cpuTime returns the process's user+system CPU time in ns. On a shared
// machine it is a steadier measure than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkDedupInsertMemtable(b *testing.B) {
	for _, mt := range []uint64{4 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("memtable=%dMiB", mt>>20), func(b *testing.B) {
			benchmarkDedupInsert(b, Options{MemTableSize: mt})
		})
	}
}
