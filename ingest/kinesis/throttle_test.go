package kinesis_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
)

// TestThrottledShardReportsItsReader throttles one shard for 60 s of the
// fake's clock: the source reports that shard's reader as throttled (so the
// watermark holds instead of marking it idle), shows it in the per-shard
// metric, and once the throttle ends reports the reader caught up only after
// the shard's records, while the other shard reads on throughout.
func TestThrottledShardReportsItsReader(t *testing.T) { forModes(t, testThrottledShard) }

func testThrottledShard(t *testing.T, mode string) {
	f := newStream(t, 2)
	var mu sync.Mutex
	now := time.Now()
	f.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	put := putPlain(t, f, keys, 0, 5)
	perShard := map[string]int{}
	for _, r := range f.Records(stream) {
		perShard[r.Shard]++
	}
	if len(perShard) != 2 {
		t.Fatalf("records on %d shards, want both: %v", len(perShard), perShard)
	}
	ids := make([]string, 0, 2)
	for id := range perShard {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	free, throttled := ids[0], ids[1]
	f.Throttle(stream, throttled, now.Add(60*time.Second))

	reg := prometheus.NewRegistry()
	src := open(t, f, inMode(kinesis.Options{Registerer: reg, StartHold: -1}, mode))
	r := newReader(t, src)
	last := func(id string) ingest.ReaderState {
		st := r.readers[id]
		if len(st) == 0 {
			return ingest.ReaderUnknown
		}
		return st[len(st)-1]
	}
	count := func(id string) int {
		n := 0
		for _, rec := range r.recs {
			if rec.Shard == id {
				n++
			}
		}
		return n
	}
	r.readUntil(func() bool {
		return count(free) == perShard[free] && last(free) == ingest.ReaderCaughtUp && last(throttled) == ingest.ReaderThrottled
	}, 10*time.Second)
	if n := count(throttled); n != 0 {
		t.Fatalf("read %d records of the throttled shard, want 0", n)
	}
	if got := gauge(t, reg, "adclick_kinesis_shard_throttled", throttled); got != 1 {
		t.Fatalf("adclick_kinesis_shard_throttled{shard=%s} = %v, want 1", throttled, got)
	}

	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	r.readUntil(func() bool {
		return count(throttled) == perShard[throttled] && last(throttled) == ingest.ReaderCaughtUp
	}, 10*time.Second)
	if got, want := len(r.recs), len(put); got != want {
		t.Fatalf("read %d records, want %d", got, want)
	}
	if got := gauge(t, reg, "adclick_kinesis_shard_throttled", throttled); got != 0 {
		t.Fatalf("adclick_kinesis_shard_throttled{shard=%s} after the throttle = %v, want 0", throttled, got)
	}
	// The caught-up report comes after the shard's last record.
	var lastRec, caughtUp int
	for i, rec := range r.order {
		switch {
		case rec.Shard != throttled:
		case rec.Event == "":
			lastRec = i
		case rec.Event == kinesis.EventShardReader && rec.Reader == ingest.ReaderCaughtUp:
			caughtUp = i
		}
	}
	if caughtUp < lastRec {
		t.Fatalf("caught-up report at item %d, before the shard's last record at %d", caughtUp, lastRec)
	}
	if got := r.readers[throttled][0]; got != ingest.ReaderBehind {
		t.Fatalf("first reader state of %s = %v, want behind (nothing read yet)", throttled, got)
	}
	if !slices.Contains(r.readers[throttled], ingest.ReaderThrottled) {
		t.Fatalf("reader states of %s = %v, want throttled among them", throttled, r.readers[throttled])
	}
}

// gauge returns the value of gauge family name with label shard=id.
func gauge(t *testing.T, reg *prometheus.Registry, name, id string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "shard" && l.GetValue() == id {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{shard=%s}", name, id)
	return 0
}
