package recount

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"strconv"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
)

// TestSpillChunksReadBackAndRemove writes one epoch in several chunks (Spill)
// and the next in one (Flush): every record reads back once, and removing
// the first epoch removes all its chunks and its manifest.
func TestSpillChunksReadBackAndRemove(t *testing.T) {
	ctx := context.Background()
	f, err := NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	w.SpillRows = 10
	const h10 = 1_795_946_400_000 // 2026-11-29T10:00Z
	add := func(i int, epoch int64) {
		w.Add(&latepath.Record{Verdict: latepath.VerdictCounted, ClickID: "c" + strconv.Itoa(i), AdID: "ad_1", CampaignID: "k",
			DeviceID: "d", ImpressionMs: h10, DeviceMs: h10 + int64(i), EventMs: h10 + int64(i), ArrivalMs: h10 + int64(i) + 5, Shard: "S1"})
		if err := w.Spill(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 35; i++ {
		add(i, 1)
	}
	if err := w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := 35; i < 40; i++ {
		add(i, 2)
	}
	if err := w.Flush(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := f.List(ctx, HourPrefix(h10), "", func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 5 { // epoch 1: 3 spilled chunks + the flushed rest; epoch 2: one
		t.Fatalf("objects %v, want 5", keys)
	}
	seen := map[string]int64{}
	if err := ReadHour(ctx, f, h10, func(r *Row) error { seen[r.ClickID] = r.Epoch; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		want := int64(1)
		if i >= 35 {
			want = 2
		}
		if e, ok := seen["c"+strconv.Itoa(i)]; !ok || e != want {
			t.Errorf("c%d: epoch %d (present %v), want %d", i, e, ok, want)
		}
	}
	if len(seen) != 40 {
		t.Errorf("read %d distinct clicks, want 40", len(seen))
	}
	n, err := RemoveEpochs(ctx, f, 1)
	if err != nil || n != 5 {
		t.Fatalf("RemoveEpochs(1) = %d, %v; want 5 objects", n, err)
	}
	keys = keys[:0]
	if err := f.List(ctx, "", "", func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("left after removing epochs ≥ 1: %s", strings.Join(keys, ", "))
	}
}

// failingPuts fails the n-th Put of a parquet object (counting from 1), once.
type failingPuts struct {
	*memStore
	n, seen int
}

func (f *failingPuts) Put(ctx context.Context, key string, data []byte) error {
	if strings.HasSuffix(key, ".parquet") {
		f.seen++
		if f.seen == f.n {
			return errors.New("injected put failure")
		}
	}
	return f.memStore.Put(ctx, key, data)
}

// TestFlushRetryAfterObjectFailure fails one object upload of a two-hour
// chunk: the rows stay buffered, and the retried Flush writes every object
// with a manifest that lists each key once.
func TestFlushRetryAfterObjectFailure(t *testing.T) {
	ctx := context.Background()
	st := &failingPuts{memStore: newMemStore(), n: 2}
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	const h0 = 1_795_946_400_000
	for i := range 10 {
		h := h0 + int64(i%2)*eventtime.HourMs
		w.Add(&latepath.Record{Verdict: latepath.VerdictCounted, ClickID: fmt.Sprint("c", i), AdID: "a", CampaignID: "k", DeviceID: "d",
			ImpressionMs: h, DeviceMs: h, EventMs: h, ArrivalMs: h, SpendMicros: 1, Shard: "S1"})
	}
	if err := w.Flush(ctx, 3); err == nil {
		t.Fatal("Flush with a failing object upload succeeded")
	}
	if w.Buffered() != 10 {
		t.Fatalf("buffered %d after a failed flush, want 10", w.Buffered())
	}
	if err := w.Flush(ctx, 3); err != nil {
		t.Fatal(err)
	}
	man, err := st.Get(ctx, manifestKey("", 3, "preagg-0"))
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Fields(string(man))
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Errorf("manifest lists %s twice: %q", k, man)
		}
		seen[k] = true
		if _, err := st.Get(ctx, k); err != nil {
			t.Errorf("manifest key %s: %v", k, err)
		}
	}
	if len(keys) != 2 {
		t.Errorf("manifest lists %d keys, want 2 (one per hour): %q", len(keys), man)
	}
}
