package state

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// benchAds returns 1<<16 ad ids drawn from 10,000 with Zipf-skewed
// popularity (s = 1.1, as preagg's benchmark and BENCHMARKS' trace: the hot
// ad gets a large share), from their own generator so that the click ids
// and expiries of a benchmark do not depend on them.
func benchAds() []string {
	r := rand.New(rand.NewPCG(11, 12))
	z := rand.NewZipf(r, 1.1, 1, 9_999)
	ads := make([]string, 1<<16)
	for i := range ads {
		ads[i] = fmt.Sprintf("ad_%d", z.Uint64())
	}
	return ads
}

// BenchmarkDedupInsert inserts b.N random click ids spread over 128 key
// groups and two hours of expiries, with Zipf-skewed ads (benchAds),
// committing every 50,000 inserts as the runtime does every few hundred
// ms. Run with -benchtime=10000000x for the 10M-id figure.
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
	ads := benchAds()
	base := int64(1_700_000_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		// Fresh random ids: reuse the pregenerated suffixes with a counter so
		// generation cost stays out of the measurement while every id is new.
		id := ids[i&(len(ids)-1)]
		exp := base + int64(i)*10 + int64(r.IntN(7_200_000))
		ok, err := d.Insert(int(r.Uint32()%KeyGroups), ads[i&(len(ads)-1)], id[:24]+itoa8(i), exp)
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
	cpu := cpuTime() - cpu0
	// The memtable is not on disk yet: flush it, so that the size is that
	// of every id.
	if err := db.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
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
		// The same click with another impression: an earlier expiry (in
		// another filter partition), then a later one (which moves it).
		mustInsert(t, d, x.kg, x.id, x.exp-hourMs+7, false)
		mustInsert(t, d, x.kg, x.id, x.exp+45*BucketMs, false)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d2 := db.NewDedup()
	for _, x := range sample[:200] {
		mustInsert(t, d2, x.kg, x.id, x.exp, false)
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

// BenchmarkDedupInsertPipeline drives a Dedup as the pre-aggregator does:
// batches of 512 clicks, each batch prefetched before it is inserted;
// impressions trail a virtual clock that advances 10 ms per click, so
// expiries span the 2 h horizon; the watermark (the clock less 5 s) expires
// ids once per virtual minute; commits every 50,000 inserts. About 2% of
// the clicks are resends of a recent click (same impression), and one in
// 5,000 a copy of a recent id with another impression.
func BenchmarkDedupInsertPipeline(b *testing.B) {
	benchmarkDedupInsertPipeline(b, 10)
}

// BenchmarkDedupInsertPipelineLowRate is BenchmarkDedupInsertPipeline with
// 100 ms of virtual time per click: 600 clicks a minute, so that a memtable
// lives through hundreds of Expires, as in a replay or a catch-up of a
// low-rate stream (no checkpoint flushes it). It measures what the
// batching of expired keys' deletion saves (see physicalPerKeyGroup); run
// with -benchtime=1000000x to compare runs, since the cost of range
// deletions in a memtable grows with the number of clicks.
func BenchmarkDedupInsertPipelineLowRate(b *testing.B) {
	benchmarkDedupInsertPipeline(b, 100)
}

// benchmarkDedupInsertPipeline runs BenchmarkDedupInsertPipeline with
// stepMs of virtual time per click.
func benchmarkDedupInsertPipeline(b *testing.B, stepMs int64) {
	db, _ := openTemp(b, Options{})
	d := db.NewDedup()
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 16)
	ids := make([]string, 0, 1<<16)
	for range cap(ids) {
		ids = append(ids, randomID(r, buf))
	}
	ads := benchAds()
	type click struct {
		kg     int
		ad, id string
		exp    int64
	}
	const batch = 512
	clicks := make([]click, 0, batch)
	recent := make([]click, 1024)
	base := int64(1_700_000_000_000)
	lastExpire := base
	dups := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; {
		clicks = clicks[:0]
		for j := 0; j < batch && i+j < b.N; j++ {
			n := i + j
			now := base + int64(n)*stepMs
			c := click{int(r.Uint32() % KeyGroups), ads[n&(len(ads)-1)], ids[n&(len(ids)-1)][:24] + itoa8(n), now - int64(r.IntN(60_000)) + 2*hourMs}
			switch x := r.IntN(5000); {
			case x == 0:
				c = recent[r.IntN(len(recent))]
				c.exp += int64(r.IntN(2*hourMs)) - hourMs
			case x < 100:
				c = recent[r.IntN(len(recent))]
			default:
				recent[n%len(recent)] = c
			}
			if c.id == "" {
				c = click{0, ads[0], "x" + itoa8(n), now + 2*hourMs}
			}
			clicks = append(clicks, c)
		}
		for _, c := range clicks {
			d.Prefetch(c.kg, c.ad, c.id, c.exp)
		}
		for _, c := range clicks {
			ok, err := d.Insert(c.kg, c.ad, c.id, c.exp)
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				dups++
			}
			if i%50_000 == 49_999 {
				if err := d.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
		if wm := base + int64(i)*stepMs - 5000; wm-lastExpire >= BucketMs {
			lastExpire = wm
			if err := d.Expire(0, KeyGroups, wm); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := d.Commit(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(dups)/float64(b.N), "dups/op")
	b.ReportMetric(float64(d.FilterBytes())/float64(b.N), "filter-B/op")
}

// BenchmarkDedupFilterPath measures what an Insert of a new id costs in
// memory alone, the filters and the pending table: after 2.5M ids are
// inserted and committed over the 2 h horizon (2M of them live), batches
// of 512 are prefetched then inserted, and the pending table is emptied
// after each batch instead of committed. Expiry every virtual minute is
// not timed, nor the first read after it (Pebble then fragments the range
// deletions of its memtables again, a cost that does not depend on the
// filters and that the duplicates of a real stream pay anyway).
func BenchmarkDedupFilterPath(b *testing.B) {
	db, _ := openTemp(b, Options{DedupBatchBytes: 1 << 30})
	d := db.NewDedup()
	r := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 16)
	ids := make([]string, 0, 1<<16)
	for range cap(ids) {
		ids = append(ids, randomID(r, buf)[:24])
	}
	const (
		live   = 2_000_000
		stepUs = 2 * hourMs * 1000 / live // µs of virtual time per click
		batch  = 512
	)
	ads := benchAds()
	base := int64(1_700_000_000_000)
	n := 0
	type click struct {
		kg     int
		ad, id string
		exp    int64
	}
	clicks := make([]click, batch)
	lastExpire := base
	var untimed int64 // CPU ns spent with the timer stopped
	run := func(count int, commit bool) {
		for done := 0; done < count; done += batch {
			for j := range clicks {
				now := base + int64(n+j)*stepUs/1000
				clicks[j] = click{int(r.Uint32() % KeyGroups), ads[(n+j)&(len(ads)-1)], ids[(n+j)&(len(ids)-1)] + itoa8(n+j), now - int64(r.IntN(60_000)) + 2*hourMs}
			}
			for _, c := range clicks {
				d.Prefetch(c.kg, c.ad, c.id, c.exp)
			}
			for _, c := range clicks {
				if _, err := d.Insert(c.kg, c.ad, c.id, c.exp); err != nil {
					b.Fatal(err)
				}
			}
			n += batch
			if commit {
				if err := d.Commit(); err != nil {
					b.Fatal(err)
				}
			} else {
				d.pending.reset()
			}
			if wm := base + int64(n)*stepUs/1000 - 5000; wm-lastExpire >= BucketMs {
				lastExpire = wm
				b.StopTimer()
				c0 := cpuTime()
				if err := d.Expire(0, KeyGroups, wm); err != nil {
					b.Fatal(err)
				}
				if _, closer, err := db.db.Get([]byte("e\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01ax")); err == nil {
					_ = closer.Close()
				}
				untimed += cpuTime() - c0
				b.StartTimer()
			}
		}
	}
	run(live+live/4, true)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, untimed := cpuTime(), int64(0)
	run(b.N, false)
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0-untimed)/float64(b.N), "cpu-ns/op")
	ins, dup := d.Count()
	b.ReportMetric(float64(d.FilterBytes())/float64(live), "filter-B/live-id")
	b.ReportMetric(float64(dup)/float64(ins+dup), "false-dups")
}
