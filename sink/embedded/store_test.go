package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/sink"
)

var ctx = context.Background()

func put(t testing.TB, s *Store, ps ...sink.Put) int {
	t.Helper()
	refused, err := s.Put(ctx, ps)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	return refused
}

func get(t testing.TB, s *Store, k sink.Key) (sink.Item, bool) {
	t.Helper()
	it, ok, err := s.Get(ctx, k)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return it, ok
}

// indexEntries lists the raw tag-index entries of the store as
// "writer|ix|entity|bucket", read straight from Pebble.
func indexEntries(t testing.TB, s *Store) []string {
	t.Helper()
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixIndex}, UpperBound: []byte{prefixIndex + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Close()
	var out []string
	for valid := iter.First(); valid; valid = iter.Next() {
		k := iter.Key()
		ix, rest, err := readEsc(k[2:])
		if err != nil {
			t.Fatalf("index key %x: %v", k, err)
		}
		key, err := decodeKeySuffix(rest)
		if err != nil {
			t.Fatalf("index key %x: %v", k, err)
		}
		out = append(out, fmt.Sprintf("%v|%s|%s|%s", sink.Writer(k[1]), ix, key.Entity, key.Bucket))
	}
	return out
}

func queryKeys(t testing.TB, s *Store, w sink.Writer, ix string) []string {
	t.Helper()
	var out []string
	err := s.QueryIndex(ctx, w, ix, func(it sink.Item) error {
		out = append(out, it.Entity+"/"+it.Bucket)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex(%v, %q): %v", w, ix, err)
	}
	slices.Sort(out)
	return out
}

func TestEscRoundTripAndOrder(t *testing.T) {
	strs := []string{"", "\x00", "\x00\x00", "\x00\x01", "\x00\xff", "a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\xff"}
	var enc [][]byte
	for _, s := range strs {
		e := appendEsc(nil, s)
		got, rest, err := readEsc(append(e, 'z'))
		if err != nil || got != s || string(rest) != "z" {
			t.Errorf("readEsc(appendEsc(%q)) = %q, %q, %v; want %q, \"z\", nil", s, got, rest, err, s)
		}
		enc = append(enc, e)
	}
	// strs is sorted; the encodings must sort the same way.
	for i := 1; i < len(enc); i++ {
		if string(enc[i-1]) >= string(enc[i]) {
			t.Errorf("encoding of %q does not sort before %q", strs[i-1], strs[i])
		}
	}
	for _, bad := range [][]byte{{'a'}, {0}, {0, 2}, {'a', 0}} {
		if _, _, err := readEsc(bad); err == nil {
			t.Errorf("readEsc(%x) succeeded, want error", bad)
		}
	}
}

func TestItemEncodingRoundTrip(t *testing.T) {
	k := sink.Key{Entity: "ad\x00x", Bucket: "H2026-11-29T10Z"}
	cases := []sink.Item{
		{Key: k},
		{Key: k, JobGen: -3, HasJobGen: true},
		{Key: k, JobGen: 7, HasJobGen: true,
			Fast:  sink.Tagged{Present: true, Valid: 5, SpendMicros: 1 << 40, Ckpt: 41, Ix: "41#3", Gen: 7},
			Late:  sink.Tagged{Present: true, Valid: -1, SpendMicros: 0, Ckpt: 0, Ix: "", Gen: 0},
			Final: sink.FinalAttrs{Present: true, Valid: 9, SpendMicros: 99, Gen: 2, AtMs: 1_700_000_000_000}},
		{Key: k, Late: sink.Tagged{Present: true, Valid: 1, Ix: "x"}},
		{Key: k, JobGen: 7, HasJobGen: true, Fence: 12, Fast: sink.Tagged{Present: true, Valid: 5, Ckpt: 41, Ix: "41#3", Gen: 7}},
		{Key: k, JobGen: 7, HasJobGen: true, Fence: 1 << 40},
	}
	for i, want := range cases {
		got, err := decodeItem(k, encodeItem(&want))
		if err != nil || got != want {
			t.Errorf("case %d: got %+v, %v; want %+v", i, got, err, want)
		}
	}
	// Fence 0 is not written: the bytes are those of the format before
	// fences (format, flags, job_gen 7 as a zig-zag varint).
	if got, want := encodeItem(&sink.Item{Key: k, JobGen: 7, HasJobGen: true}), []byte{1, flagJobGen, 14}; !bytes.Equal(got, want) {
		t.Errorf("encoding without a fence = %x, want %x", got, want)
	}
	if got, want := encodeItem(&sink.Item{Key: k, JobGen: 7, HasJobGen: true, Fence: 3}), []byte{1, flagJobGen | flagFence, 14, 6}; !bytes.Equal(got, want) {
		t.Errorf("encoding with fence 3 = %x, want %x", got, want)
	}
	for _, bad := range [][]byte{nil, {2, 0}, {1, flagJobGen}, {1, flagFast, 2}, {1, 0, 5}, {1, flagFence}} {
		if _, err := decodeItem(k, bad); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeItem(%x) error = %v, want errCorrupt", bad, err)
		}
	}
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 4, SpendMicros: 400, Epoch: 41, Gen: 2})
	tot := sink.Total{Ad: "ad_7", StartMs: 1000, Valid: 4, SpendMicros: 400, Epoch: 41}
	if err := s.SetTotals(ctx, []sink.Total{tot}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, k); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}

	s = openDir(t, dir)
	it, ok := get(t, s, k)
	want := sink.Tagged{Present: true, Valid: 4, SpendMicros: 400, Ckpt: 41, Ix: sink.IndexKey(41, k), Gen: 2}
	if !ok || it.Fast != want || it.JobGen != 2 {
		t.Errorf("after reopen: item %+v, ok %v; want fast %+v, job_gen 2", it, ok, want)
	}
	if got := queryKeys(t, s, sink.Fast, sink.IndexKey(41, k)); !slices.Equal(got, []string{"ad_7/M2026-11-29T10:14Z"}) {
		t.Errorf("index after reopen = %v", got)
	}
	gotT, ok, err := s.GetTotal(ctx, tot.Key())
	if err != nil || !ok || gotT != tot {
		t.Errorf("total after reopen = %+v, %v, %v; want %+v", gotT, ok, err, tot)
	}
	var keys []sink.TotalKey
	if err := s.TotalsWritten(ctx, 41, func(k sink.TotalKey) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != tot.Key() {
		t.Errorf("TotalsWritten(41) after reopen = %v, want [%v]", keys, tot.Key())
	}
}

func openDir(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSurvivesKill writes from a child process that exits without closing
// the store, as a killed process would, and checks every write whose call
// returned is there.
func TestSurvivesKill(t *testing.T) {
	if dir := os.Getenv("EMBEDDED_KILL_CHILD_DIR"); dir != "" {
		s, err := Open(dir, Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := range 50 {
			p := sink.Put{Key: sink.Key{Entity: fmt.Sprintf("ad_%02d", i), Bucket: "M2026-11-29T10:14Z"}, Writer: sink.Late, Valid: int64(i), Epoch: 5, Gen: 1}
			if _, err := s.Put(ctx, []sink.Put{p}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
		// Running totals are written back: durable once Sync returns (the
		// runtime syncs at every checkpoint).
		if err := s.SetTotals(ctx, []sink.Total{{Ad: "ad_01", StartMs: 60_000, Valid: 3, Epoch: 5}}); err != nil {
			os.Exit(2)
		}
		if err := s.Sync(ctx); err != nil {
			os.Exit(2)
		}
		os.Exit(0) // no Close: the memtable is lost, only the synced log remains
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivesKill$")
	cmd.Env = append(os.Environ(), "EMBEDDED_KILL_CHILD_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s := openDir(t, dir)
	n := 0
	err := s.Scan(ctx, func(it sink.Item) error {
		if want := fmt.Sprintf("ad_%02d", n); it.Entity != want || it.Late.Valid != int64(n) {
			t.Errorf("item %d = %s valid %d, want %s valid %d", n, it.Entity, it.Late.Valid, want, n)
		}
		n++
		return nil
	})
	if err != nil || n != 50 {
		t.Errorf("after kill: %d items (err %v), want 50", n, err)
	}
	if _, ok, _ := s.GetTotal(ctx, sink.TotalKey{Ad: "ad_01", StartMs: 60_000}); !ok {
		t.Errorf("total synced before the kill is missing")
	}
}

func TestIndexEntriesFollowTags(t *testing.T) {
	s := openTemp(t, Options{})
	k := sink.Key{Entity: "ad_9", Bucket: "H2026-11-29T10Z"}
	ix := func(e int64) string { return sink.IndexKey(e, k) }
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"fast write", func() {
			put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 1})
		}, []string{"fast|" + ix(41)}},
		{"late write", func() {
			put(t, s, sink.Put{Key: k, Writer: sink.Late, Valid: 1, Epoch: 41, Gen: 1})
		}, []string{"fast|" + ix(41), "late|" + ix(41)}},
		{"fast retagged", func() {
			put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 2, Epoch: 42, Gen: 1})
		}, []string{"fast|" + ix(42), "late|" + ix(41)}},
		{"same tag rewritten", func() {
			put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 3, Epoch: 42, Gen: 1})
		}, []string{"fast|" + ix(42), "late|" + ix(41)}},
		{"refused write leaves the index", func() {
			if r := put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 9, Epoch: 50, Gen: 0}); r != 1 {
				t.Errorf("refused = %d, want 1", r)
			}
		}, []string{"fast|" + ix(42), "late|" + ix(41)}},
		{"remove with wrong ckpt", func() {
			if ok, err := s.Remove(ctx, k, sink.Late, 40); ok || err != nil {
				t.Errorf("Remove(ckpt 40) = %v, %v; want false, nil", ok, err)
			}
		}, []string{"fast|" + ix(42), "late|" + ix(41)}},
		{"late removed", func() {
			if ok, err := s.Remove(ctx, k, sink.Late, 41); !ok || err != nil {
				t.Errorf("Remove = %v, %v; want true, nil", ok, err)
			}
		}, []string{"fast|" + ix(42)}},
		{"fast deleted", func() {
			if del, ok, err := s.Delete(ctx, k, sink.Fast, 42); !del || !ok || err != nil {
				t.Errorf("Delete = %v, %v, %v; want true, true, nil", del, ok, err)
			}
		}, nil},
	}
	for _, st := range steps {
		st.do()
		var want []string
		for _, w := range st.want {
			want = append(want, w+"|ad_9|H2026-11-29T10Z")
		}
		if got := indexEntries(t, s); !slices.Equal(got, want) {
			t.Errorf("%s: index = %v, want %v", st.name, got, want)
		}
	}
	if _, ok := get(t, s, k); ok {
		t.Errorf("item still present after Delete")
	}
}

// TestQueryIndexCostIndependentOfTable checks that QueryIndex visits only the
// matching index entries, whatever else the table holds: it counts the
// iterator's steps, so the proof does not need a large table, only one
// where the matches are a small part of the index (a handful among 40,000
// entries; it had 200,000, which cost a minute under -race and proved
// nothing more).
func TestQueryIndexCostIndependentOfTable(t *testing.T) {
	s := openTemp(t, Options{NoSync: true})
	target := sink.IndexKeyOf(77, 3)
	const items = 20_000
	var want []string
	var batch []sink.Put
	for i := range items {
		k := sink.Key{Entity: fmt.Sprintf("ad_%06d", i), Bucket: "M2026-11-29T10:14Z"}
		epoch := int64(70 + i%7) // epochs 70..76: never the target's
		if i%(items/50) == 0 {
			epoch = 77
		}
		p := sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: epoch, Gen: 1}
		if sink.IndexKey(epoch, k) == target {
			want = append(want, k.Entity+"/"+k.Bucket)
		}
		// Same tag under the other writer must not match either.
		batch = append(batch, p, sink.Put{Key: k, Writer: sink.Late, Valid: 1, Epoch: 77, Gen: 1})
		if len(batch) >= 1000 {
			put(t, s, batch...)
			batch = batch[:0]
		}
	}
	put(t, s, batch...)
	before := s.indexSteps.Load()
	got := queryKeys(t, s, sink.Fast, target)
	steps := s.indexSteps.Load() - before
	if !slices.Equal(got, want) {
		t.Errorf("QueryIndex = %v, want %v", got, want)
	}
	if len(want) == 0 {
		t.Fatalf("no item has index key %s: the test checks nothing", target)
	}
	if steps != int64(len(want)) {
		t.Errorf("QueryIndex took %d iterator steps for %d matches among %d index entries, want %d", steps, len(want), 2*items, len(want))
	}
}

func TestScanOrdered(t *testing.T) {
	s := openTemp(t, Options{})
	keys := []sink.Key{
		{Entity: "b", Bucket: "H2026-11-29T10Z"},
		{Entity: "a\x00", Bucket: "M2026-11-29T10:00Z"},
		{Entity: "a", Bucket: "M2026-11-29T10:01Z"},
		{Entity: "ab", Bucket: "H2026-11-29T10Z"},
		{Entity: "a", Bucket: "H2026-11-29T10Z"},
		{Entity: "a", Bucket: "M2026-11-29T10:00Z"},
	}
	for _, k := range keys {
		put(t, s, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1})
	}
	var got []sink.Key
	if err := s.ScanOrdered(ctx, func(it sink.Item) error { got = append(got, it.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(keys)
	slices.SortFunc(want, func(x, y sink.Key) int {
		if x.Entity != y.Entity {
			if x.Entity < y.Entity {
				return -1
			}
			return 1
		}
		if x.Bucket < y.Bucket {
			return -1
		}
		if x.Bucket > y.Bucket {
			return 1
		}
		return 0
	})
	if !slices.Equal(got, want) {
		t.Errorf("ScanOrdered order = %q, want %q", got, want)
	}
}

func TestBadInput(t *testing.T) {
	s := openTemp(t, Options{})
	k := sink.Key{Entity: "a", Bucket: "b"}
	bad := []struct {
		name string
		err  error
	}{
		{"empty entity", func() error {
			_, err := s.Put(ctx, []sink.Put{{Key: sink.Key{Bucket: "b"}, Writer: sink.Fast}})
			return err
		}()},
		{"final writer", func() error { _, err := s.Put(ctx, []sink.Put{{Key: k, Writer: sink.Final}}); return err }()},
		{"zero writer remove", func() error { _, err := s.Remove(ctx, k, 0, 1); return err }()},
		{"query final", s.QueryIndex(ctx, sink.Final, "1#1", func(sink.Item) error { return nil })},
		{"empty ad", s.SetTotals(ctx, []sink.Total{{}})},
	}
	for _, b := range bad {
		if b.err == nil {
			t.Errorf("%s: no error, want one", b.name)
		}
	}
	if _, ok := get(t, s, k); ok {
		t.Errorf("a rejected call wrote an item")
	}
}

func TestDeleteTotalsForgetsEveryEpoch(t *testing.T) {
	s := openTemp(t, Options{})
	a := sink.TotalKey{Ad: "ad_1", StartMs: 0}
	b := sink.TotalKey{Ad: "ad_1", StartMs: 0, Hour: true}
	for _, e := range []int64{3, 4, 5} {
		if err := s.SetTotals(ctx, []sink.Total{{Ad: a.Ad, StartMs: a.StartMs, Valid: e, Epoch: e}, {Ad: b.Ad, Hour: true, Valid: e, Epoch: e}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteTotals(ctx, []sink.TotalKey{a, {Ad: "missing"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetEpochs(ctx, 3, 4); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		epoch int64
		want  []sink.TotalKey
	}{{3, nil}, {4, []sink.TotalKey{b}}, {5, []sink.TotalKey{b}}} {
		var got []sink.TotalKey
		if err := s.TotalsWritten(ctx, tc.epoch, func(k sink.TotalKey) error { got = append(got, k); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("TotalsWritten(%d) = %v, want %v", tc.epoch, got, tc.want)
		}
	}
	// No bookkeeping key of a is left anywhere.
	for _, p := range [][]byte{reversePrefix("", a), totalKey(a)} {
		iter, _ := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if iter.First() {
			t.Errorf("key %x of a deleted total is left", iter.Key())
		}
		_ = iter.Close()
	}
	if got, ok, _ := s.GetTotal(ctx, b); !ok || got.Valid != 5 {
		t.Errorf("total b = %+v, %v; want valid 5", got, ok)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openTemp(t, Options{Registerer: reg})
	s2 := openTemp(t, Options{Registerer: reg}) // second store on the same registry
	k := sink.Key{Entity: "a", Bucket: "b"}
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Epoch: 1, Gen: 2}, sink.Put{Key: k, Writer: sink.Fast, Epoch: 2, Gen: 1})
	put(t, s2, sink.Put{Key: k, Writer: sink.Late, Epoch: 1, Gen: 1})
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"writes put", counterValue(t, s.metrics.Writes.WithLabelValues("put")), 2},
		{"refused put", counterValue(t, s.metrics.Refused.WithLabelValues("put")), 1},
		{"index added", counterValue(t, s.metrics.IndexEntries.WithLabelValues("added")), 2},
		{"syncs", counterValue(t, s.metrics.Syncs), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// BenchmarkPut measures a call of 100 tagged writes, with the log synced at
// the end of the call (the default) and without.
func BenchmarkPut(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			s := openTemp(b, Options{NoSync: noSync})
			ps := make([]sink.Put, 100)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				for j := range ps {
					ps[j] = sink.Put{Key: sink.Key{Entity: fmt.Sprintf("ad_%d", (i*100+j)%50_000), Bucket: "M2026-11-29T10:14Z"},
						Writer: sink.Fast, Valid: int64(i), Epoch: int64(i / 10), Gen: 1}
				}
				if _, err := s.Put(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ps)), "ns/item")
		})
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestCloseWhileCallbackWrites closes the store while a QueryIndex callback
// runs: Close waits for the query, and the callback's own write fails with
// ErrClosed instead of deadlocking.
func TestCloseWhileCallbackWrites(t *testing.T) {
	s := openTemp(t, Options{})
	k := sink.Key{Entity: "a", Bucket: "M2026-11-29T10:14Z"}
	put(t, s, sink.Put{Key: k, Writer: sink.Fast, Epoch: 3, Gen: 1})
	started := make(chan struct{})
	var removeErr error
	closed := make(chan error)
	go func() {
		<-started
		closed <- s.Close()
	}()
	err := s.QueryIndex(ctx, sink.Fast, sink.IndexKey(3, k), func(it sink.Item) error {
		close(started)
		for { // wait until Close is waiting for us
			if s.gate.IsClosed() {
				break
			}
			runtime.Gosched()
		}
		_, removeErr = s.Remove(ctx, it.Key, sink.Fast, 3)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex: %v", err)
	}
	if !errors.Is(removeErr, ErrClosed) {
		t.Errorf("Remove during Close: %v, want ErrClosed", removeErr)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestTotalsWriteBack: totals are visible at once, on disk after Sync, and
// TotalsWritten and DeleteTotals see the ones not yet synced.
func TestTotalsWriteBack(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := sink.Total{Ad: "ad_1", StartMs: 60_000, Valid: 3, SpendMicros: 30, Epoch: 7}
	b := sink.Total{Ad: "ad_2", StartMs: 60_000, Valid: 4, SpendMicros: 40, Epoch: 7}
	if err := s.SetTotals(ctx, []sink.Total{a, b}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.GetTotal(ctx, a.Key()); err != nil || !ok || got != a {
		t.Fatalf("GetTotal before Sync = %+v, %v, %v; want %+v", got, ok, err, a)
	}
	var keys []sink.TotalKey
	if err := s.TotalsWritten(ctx, 7, func(k sink.TotalKey) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("TotalsWritten(7) = %v, want both keys", keys)
	}
	if err := s.DeleteTotals(ctx, []sink.TotalKey{b.Key()}); err != nil {
		t.Fatal(err)
	}
	a.Valid = 5
	if err := s.SetTotals(ctx, []sink.Total{a}); err != nil { // pending again at Close
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir)
	if got, ok, _ := s.GetTotal(ctx, a.Key()); !ok || got.Valid != 5 {
		t.Errorf("after Close and reopen: %+v (present %v), want valid 5", got, ok)
	}
	if _, ok, _ := s.GetTotal(ctx, b.Key()); ok {
		t.Errorf("a deleted total came back after reopen")
	}
}

// TestScopedSurvivesReopen: a view's index entries and epoch records are on
// disk under its scope, and closing a view leaves the store open.
func TestScopedSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Scoped("kg0-16")
	if err != nil {
		t.Fatal(err)
	}
	k := sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	tk := sink.TotalKey{Ad: "ad_7", StartMs: 60_000}
	if _, err := a.Put(ctx, []sink.Put{{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetTotals(ctx, []sink.Total{{Ad: tk.Ad, StartMs: tk.StartMs, Valid: 3, Epoch: 41}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close of a view: %v", err)
	}
	if _, ok, err := s.Get(ctx, k); err != nil || !ok {
		t.Fatalf("Get after closing a view = %v, %v; want the item", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err = s.Scoped("kg0-16")
	if err != nil {
		t.Fatal(err)
	}
	listed := func(st *Store) []sink.TotalKey {
		var got []sink.TotalKey
		if err := st.TotalsWritten(ctx, 41, func(k sink.TotalKey) error { got = append(got, k); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := listed(a); !slices.Equal(got, []sink.TotalKey{tk}) {
		t.Errorf("scoped TotalsWritten(41) after reopen = %v, want [%v]", got, tk)
	}
	if got := listed(s); len(got) != 0 {
		t.Errorf("unscoped TotalsWritten(41) after reopen = %v, want none", got)
	}
	var found []sink.Key
	if err := a.QueryIndex(ctx, sink.Fast, sink.IndexKey(41, k), func(it sink.Item) error { found = append(found, it.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(found, []sink.Key{k}) {
		t.Errorf("scoped QueryIndex after reopen = %v, want [%v]", found, k)
	}
	// DeleteTotals through the view leaves no record of the key behind.
	if err := a.DeleteTotals(ctx, []sink.TotalKey{tk}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{reversePrefix("kg0-16", tk), epochPrefix("kg0-16", 41), totalKey(tk)} {
		iter, _ := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if iter.First() {
			t.Errorf("key %x of a deleted total is left", iter.Key())
		}
		_ = iter.Close()
	}
}
