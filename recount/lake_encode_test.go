package recount

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/latepath"
)

// The lake's encoder is checked against the way the lake was written
// before it: parquet-go's GenericWriter[Row] with the options below, one
// object per hour of a chunk, rows in order of Add. Both must give the
// same bytes.

// writerOptions are the Parquet writer settings of the lake: Snappy pages,
// page statistics, one row group per object, no min/max bounds or page
// statistics for the string columns.
func writerOptions() []parquet.WriterOption {
	opts := []parquet.WriterOption{parquet.Compression(&fastSnappy{}), parquet.CreatedBy("adclick", "", "")}
	for _, col := range []string{"verdict", "click_id", "ad_id", "campaign_id", "device_id", "shard", "seq", "raw"} {
		opts = append(opts, parquet.SkipPageBounds(col), parquet.SkipPageStatistics(col))
	}
	return opts
}

// refRow is the row the lake holds for r in epoch.
func refRow(r *latepath.Record, epoch int64) Row {
	raw := r.Raw
	if len(raw) > latepath.MaxRaw {
		raw = raw[:latepath.MaxRaw]
	}
	row := Row{Verdict: r.Verdict, ClickID: r.ClickID, AdID: r.AdID, CampaignID: r.CampaignID, DeviceID: r.DeviceID,
		ImpressionMs: r.ImpressionMs, DeviceMs: r.DeviceMs, EventMs: r.EventMs, ArrivalMs: r.ArrivalMs,
		SpendMicros: r.SpendMicros, Shard: r.Shard, Seq: r.Seq, EventHourMs: PartitionHour(r), Epoch: epoch}
	if raw != "" {
		row.Raw = []byte(raw)
	}
	return row
}

// refObjects returns the objects of one chunk of rs with the generic
// writer, by hour: a new writer for every object, as a writer reused with
// Reset writes an empty path_in_schema for every column of the objects
// after its first (see TestEveryObjectNamesItsColumns).
func refObjects(t testing.TB, rs []latepath.Record, epoch int64) map[int64][]byte {
	t.Helper()
	byHour := map[int64][]Row{}
	for i := range rs {
		row := refRow(&rs[i], epoch)
		byHour[row.EventHourMs] = append(byHour[row.EventHourMs], row)
	}
	out := map[int64][]byte{}
	for h, rows := range byHour {
		var buf bytes.Buffer
		pw := parquet.NewGenericWriter[Row](&buf, writerOptions()...)
		if _, err := pw.Write(rows); err != nil {
			t.Fatal(err)
		}
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
		out[h] = buf.Bytes()
	}
	return out
}

// writerObjects writes rs as one chunk with a Writer and returns its
// objects by hour.
func writerObjects(t testing.TB, w *Writer, st *memStore, rs []latepath.Record, epoch int64) map[int64][]byte {
	t.Helper()
	for i := range rs {
		w.Add(&rs[i])
	}
	if err := w.Flush(context.Background(), epoch); err != nil {
		t.Fatal(err)
	}
	out := map[int64][]byte{}
	for k, b := range st.objs {
		if !strings.HasPrefix(k, "hour=") || !strings.HasSuffix(k, "-e"+epochString(epoch)+".parquet") {
			continue
		}
		h, err := ParseHour(strings.TrimPrefix(k[:strings.IndexByte(k, '/')], "hour="))
		if err != nil {
			t.Fatal(err)
		}
		out[h] = b
	}
	return out
}

// sameObjects fails t unless the writer's objects are the reference's.
func sameObjects(t testing.TB, got, want map[int64][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d objects, want %d", len(got), len(want))
	}
	for h, w := range want {
		g, ok := got[h]
		if !ok {
			t.Fatalf("no object for hour %s", FormatHour(h))
		}
		if !bytes.Equal(g, w) {
			i := 0
			for i < len(g) && i < len(w) && g[i] == w[i] {
				i++
			}
			t.Fatalf("hour %s: object of %d bytes differs from the generic writer's (%d bytes) from byte %d",
				FormatHour(h), len(g), len(w), i)
		}
	}
}

// randRecords returns n random records: a few hours (of event or arrival
// time), invalid ones, duplicates, empty and long strings, raw payloads
// over the limit and not UTF-8, extreme int64s.
func randRecords(rng *rand.Rand, n int) []latepath.Record {
	verdicts := []string{latepath.VerdictCounted, latepath.VerdictCounted, latepath.VerdictCounted, latepath.VerdictLate,
		latepath.VerdictDuplicate, latepath.VerdictBeyondHorizon, "guard_expired", latepath.InvalidPrefix + "malformed_json",
		latepath.InvalidPrefix + "missing_field"}
	ints := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, maxHourMs, maxHourMs + 1}
	str := func(p string, k int) string {
		switch rng.IntN(20) {
		case 0:
			return ""
		case 1:
			return strings.Repeat("é", rng.IntN(40))
		}
		return p + strconv.Itoa(rng.IntN(k))
	}
	num := func(base int64) int64 {
		if rng.IntN(50) == 0 {
			return ints[rng.IntN(len(ints))]
		}
		return base + rng.Int64N(4_000_000) - 2_000_000
	}
	hours := 1 + rng.IntN(4)
	rs := make([]latepath.Record, n)
	for i := range rs {
		base := h10 + int64(rng.IntN(hours))*eventtime.HourMs + rng.Int64N(eventtime.HourMs)
		r := latepath.Record{Verdict: verdicts[rng.IntN(len(verdicts))], ClickID: str("c", 1<<30), AdID: str("ad_", 1+rng.IntN(3000)),
			CampaignID: str("camp_", 50), DeviceID: str("d_", 1_000_000), ImpressionMs: num(base), DeviceMs: num(base),
			EventMs: num(base), ArrivalMs: num(base), SpendMicros: num(500_000), Shard: str("S", 16), Seq: str("", 1<<40)}
		if invalidVerdict(r.Verdict) {
			r.EventMs = 0
			switch rng.IntN(4) {
			case 0:
				r.Raw = string([]byte{0xff, 0xfe, 0, '{'})
			case 1:
				r.Raw = strings.Repeat("x", latepath.MaxRaw+rng.IntN(100))
			default:
				r.Raw = `{"click_id":"` + r.ClickID
			}
		}
		rs[i] = r
	}
	return rs
}

func invalidVerdict(v string) bool { return strings.HasPrefix(v, latepath.InvalidPrefix) }

// TestEncoderMatchesGenericWriter writes random chunks, from one row to
// several pages per column, with the lake's writer and with the generic
// writer, and compares the objects byte for byte: the lake keeps the
// layout, statistics and page index it had, and every reader reads it as
// before.
func TestEncoderMatchesGenericWriter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 2, 63, 64, 65, 127, 128, 129, 1000, 5000, 40_000, 70_000}
	for i, n := range sizes {
		rs := randRecords(rng, n)
		epoch := int64(i + 1)
		if i == len(sizes)-1 {
			epoch = math.MaxInt64
		}
		// One writer for every chunk: its reused buffers must not leak
		// from one object into the next.
		sameObjects(t, writerObjects(t, w, st, rs, epoch), refObjects(t, rs, epoch))
	}
}

// TestEncoderOneHourLongChunk checks a chunk of one hour with enough rows
// for several pages in every column, including the dictionary columns
// (64,256 rows a page), as the stream writes them.
func TestEncoderOneHourLongChunk(t *testing.T) {
	rs := benchRecords(200_000)
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, writerObjects(t, w, st, rs, 7), refObjects(t, rs, 7))
}

// FuzzEncoder compares the lake's writer with the generic writer on
// random chunks (a seed and a size).
func FuzzEncoder(f *testing.F) {
	for _, s := range []struct {
		seed uint64
		n    uint16
	}{{1, 1}, {2, 300}, {3, 4000}, {4, 64}, {5, 10}} {
		f.Add(s.seed, s.n)
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint16) {
		if n == 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		rs := randRecords(rng, int(n))
		st := newMemStore()
		w, err := NewWriter(st, "preagg-0")
		if err != nil {
			t.Fatal(err)
		}
		sameObjects(t, writerObjects(t, w, st, rs, int64(seed>>1)), refObjects(t, rs, int64(seed>>1)))
	})
}

// readAll returns every row of the lake, by the generic reader (ReadHour)
// and by the recount's column scanner, which must agree.
func readAll(t *testing.T, st Store) []Row {
	t.Helper()
	ctx := context.Background()
	var rows []Row
	err := Hours(ctx, st, 0, func(h int64) error {
		return ReadHour(ctx, st, h, func(r *Row) error { rows = append(rows, *r); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	var scanned []Row
	var sc scanner
	err = st.List(ctx, "hour=", "", func(k string) error {
		b, err := st.Get(ctx, k)
		if err != nil {
			return err
		}
		return sc.scan(b, func(bt *batch) error {
			for i := 0; i < bt.n; i++ {
				scanned = append(scanned, Row{Verdict: bt.strs[colVerdict][i], ClickID: bt.strs[colClickID][i],
					AdID: bt.strs[colAdID][i], CampaignID: bt.strs[colCampaignID][i], DeviceID: bt.strs[colDeviceID][i],
					Shard: bt.strs[colShard][i], Seq: bt.strs[colSeq][i], ImpressionMs: bt.ints[colImpression][i],
					DeviceMs: bt.ints[colDevice][i], ArrivalMs: bt.ints[colArrival][i], SpendMicros: bt.ints[colSpend][i]})
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(scanned) != len(rows) {
		t.Fatalf("scanner read %d rows, the generic reader %d", len(scanned), len(rows))
	}
	for i := range rows {
		r := rows[i]
		r.EventMs, r.Raw, r.EventHourMs, r.Epoch = 0, nil, 0, 0 // the scanner does not read them
		if fmt.Sprint(r) != fmt.Sprint(scanned[i]) {
			t.Fatalf("row %d: scanner read %+v, generic reader %+v", i, scanned[i], r)
		}
	}
	return rows
}

// TestEncoderRoundTripEdges writes edge records through the lake's writer
// and reads them back with the recount's readers: empty strings, extreme
// int64s, a raw payload over the limit and not UTF-8, clicks of many hours
// interleaved in one chunk, hour 0 (no usable time), and an empty flush,
// which writes nothing.
func TestEncoderRoundTripEdges(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	w, err := NewWriter(st, "preagg-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if len(st.objs) != 0 {
		t.Fatalf("an empty flush wrote %d objects", len(st.objs))
	}
	long := strings.Repeat("\xff\x00z", latepath.MaxRaw)
	rs := []latepath.Record{
		{}, // every field empty: hour 0
		{Verdict: latepath.VerdictCounted, ImpressionMs: math.MinInt64, DeviceMs: math.MaxInt64, EventMs: h10, ArrivalMs: math.MaxInt64,
			SpendMicros: math.MaxInt64},
		{Verdict: latepath.InvalidPrefix + "too_long", ArrivalMs: h10 + 5, Raw: long, SpendMicros: math.MinInt64},
		{Verdict: latepath.VerdictLate, ClickID: "ü", AdID: "", CampaignID: "", DeviceID: "", Shard: "", Seq: "", EventMs: maxHourMs + 1,
			ArrivalMs: h10},
	}
	// 100 hours, interleaved, in one chunk.
	for i := range 1000 {
		h := h10 + int64(i*37%100)*eventtime.HourMs
		rs = append(rs, latepath.Record{Verdict: latepath.VerdictCounted, ClickID: "c" + strconv.Itoa(i), AdID: "ad_" + strconv.Itoa(i%7),
			CampaignID: "k", DeviceID: "d", ImpressionMs: h, DeviceMs: h + 1, EventMs: h + 1, ArrivalMs: h + 2, SpendMicros: int64(i), Shard: "S1",
			Seq: strconv.Itoa(i)})
	}
	for i := range rs {
		w.Add(&rs[i])
	}
	if err := w.Flush(ctx, math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, st)
	want := make([]Row, len(rs))
	for i := range rs {
		want[i] = refRow(&rs[i], math.MaxInt64)
	}
	// The lake's order: hours ascending, Add order within an hour.
	slices.SortStableFunc(want, func(a, b Row) int { return cmp.Compare(a.EventHourMs, b.EventHourMs) })
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := hoursOfRows(got); n != 101 {
		t.Errorf("rows in %d hours, want 101", n)
	}
	var sawLong bool
	for _, r := range got {
		if len(r.Raw) > 0 {
			sawLong = true
			if string(r.Raw) != long[:latepath.MaxRaw] {
				t.Errorf("raw payload of %d bytes, want the first %d bytes of the record's", len(r.Raw), latepath.MaxRaw)
			}
		}
	}
	if !sawLong {
		t.Error("the raw payload was lost")
	}
}

func hoursOfRows(rows []Row) int {
	hs := map[int64]bool{}
	for _, r := range rows {
		hs[r.EventHourMs] = true
	}
	return len(hs)
}

// TestWriterRetryAfterFailedPut checks that rows stay buffered when a
// Put fails half-way through a chunk's objects, and that the retry writes
// the same objects.
func TestWriterRetryAfterFailedPut(t *testing.T) {
	ctx := context.Background()
	st := &failingStore{memStore: newMemStore(), failAt: 3}
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	rs := randRecords(rand.New(rand.NewPCG(9, 9)), 3000)
	for i := range rs {
		w.Add(&rs[i])
	}
	if err := w.Flush(ctx, 5); err == nil {
		t.Fatal("flush with a failing store succeeded")
	}
	if w.Buffered() != len(rs) {
		t.Fatalf("%d rows buffered after the failure, want %d", w.Buffered(), len(rs))
	}
	if err := w.Flush(ctx, 5); err != nil {
		t.Fatal(err)
	}
	want := refObjects(t, rs, 5)
	got := map[int64][]byte{}
	for k, b := range st.objs {
		if strings.HasPrefix(k, "hour=") {
			h, _ := ParseHour(strings.TrimPrefix(k[:strings.IndexByte(k, '/')], "hour="))
			got[h] = b
		}
	}
	sameObjects(t, got, want)
}

// failingStore fails its failAt-th Put (counting from 1).
type failingStore struct {
	*memStore
	puts, failAt int
}

func (s *failingStore) Put(ctx context.Context, key string, data []byte) error {
	s.puts++
	if s.puts == s.failAt {
		return fmt.Errorf("put %s: injected failure", key)
	}
	return s.memStore.Put(ctx, key, data)
}

// TestPackKey checks that dictionary keys of short values are equal
// exactly when the values are, zero bytes and the bytes past a value
// included.
func TestPackKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 1, 'a', 0xff}
	seen := map[[2]uint64]string{}
	for range 200_000 {
		l := rng.IntN(16)
		b := make([]byte, 16)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))] // past l too: must not count
		}
		k := packKey(b, l)
		v := string(b[:l])
		if old, ok := seen[k]; ok && old != v {
			t.Fatalf("values %q and %q have the same key", old, v)
		}
		seen[k] = v
	}
	if len(seen) < 1000 {
		t.Fatalf("only %d distinct values tried", len(seen))
	}
}

// TestEveryObjectNamesItsColumns checks the path_in_schema of every column
// chunk of every object a writer writes, the first and the later ones. (A
// GenericWriter reused with Reset, as the lake was written before, clears
// the paths from its second object on; readers that find columns by path,
// such as parquet-mr's, cannot read such objects.)
func TestEveryObjectNamesItsColumns(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for epoch := int64(1); epoch <= 3; epoch++ {
		rs := randRecords(rng, 500)
		for i := range rs {
			w.Add(&rs[i])
		}
		if err := w.Flush(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	objects := 0
	for k, b := range st.objs {
		if !strings.HasPrefix(k, "hour=") {
			continue
		}
		objects++
		f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range f.Metadata().RowGroups[0].Columns {
			if p := c.MetaData.PathInSchema; len(p) != 1 || p[0] != leaves[i].name {
				t.Fatalf("%s: column %d has path %q, want [%q]", k, i, p, leaves[i].name)
			}
		}
	}
	if objects < 4 {
		t.Fatalf("%d objects written, want several", objects)
	}
}

// TestEncoderPageOrders checks the column index's boundary order of int64
// columns spread over several pages: descending, ascending, constant and
// unordered values.
func TestEncoderPageOrders(t *testing.T) {
	rs := benchRecords(100_000) // one hour, four pages per int64 column
	for i := range rs {
		rs[i].ImpressionMs = h10 + 3_000_000 - int64(i) // descending
		rs[i].DeviceMs = h10 + int64(i)                 // ascending
		rs[i].SpendMicros = 7                           // constant
		rs[i].ArrivalMs = h10 + int64(i*7919%100_000)   // unordered
	}
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	got := writerObjects(t, w, st, rs, 2)
	sameObjects(t, got, refObjects(t, rs, 2))
	b := got[h10]
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"impression_ms": "DESCENDING", "device_ms": "ASCENDING", "spend_micros": "ASCENDING",
		"arrival_ms": "UNORDERED"}
	for i, c := range f.Metadata().RowGroups[0].Columns {
		wo, ok := want[leaves[i].name]
		if !ok {
			continue
		}
		var ci format.ColumnIndex
		if err := thrift.Unmarshal(&thrift.CompactProtocol{}, b[c.ColumnIndexOffset:c.ColumnIndexOffset+int64(c.ColumnIndexLength)], &ci); err != nil {
			t.Fatal(err)
		}
		if len(ci.MinValues) < 2 || ci.BoundaryOrder.String() != wo {
			t.Errorf("%s: %d pages, boundary order %s, want %s over several pages", leaves[i].name, len(ci.MinValues), ci.BoundaryOrder, wo)
		}
	}
}

// A burst of invalid clicks with long raw payloads does not keep its
// buffers once ordinary chunks follow: the writer's memory follows its
// rows, not the largest chunk it ever wrote.
func TestWriterBuffersShrinkAfterABurst(t *testing.T) {
	const hour = 1_795_946_400_000 // 2026-11-29T10:00Z
	rec := func(i int) latepath.Record {
		ev := hour + int64(i%3_600_000)
		return latepath.Record{Verdict: latepath.VerdictCounted, ClickID: "c" + strconv.Itoa(i), AdID: "ad_" + strconv.Itoa(i%97),
			CampaignID: "k", DeviceID: "d", ImpressionMs: ev, DeviceMs: ev, EventMs: ev, ArrivalMs: ev + 5, SpendMicros: int64(i),
			Shard: "S1", Seq: strconv.Itoa(i)}
	}
	st := newMemStore()
	w, err := NewWriter(st, "source")
	if err != nil {
		t.Fatal(err)
	}
	w.SpillRows = 20_000
	raw := strings.Repeat("x", latepath.MaxRaw)
	for i := range 20_000 {
		r := rec(i)
		r.Verdict, r.EventMs, r.Raw = latepath.InvalidPrefix+"malformed_json", 0, raw
		w.Add(&r)
	}
	if err := w.Flush(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for e := int64(2); e < 6; e++ {
		for i := range 20_000 {
			r := rec(i)
			w.Add(&r)
		}
		if err := w.Flush(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	kept := 0
	for _, b := range append(w.hours, w.free...) {
		kept += b.capBytes()
	}
	if limit := keptBytesPerRow * w.SpillRows; kept > limit {
		t.Errorf("the writer keeps %d bytes of string buffers four chunks after a burst of long payloads; want at most %d", kept, limit)
	}
}

// A damaged object is an error of the hour's read, not a panic.
func TestReadHourDamagedObject(t *testing.T) {
	const hour = 1_795_946_400_000 // 2026-11-29T10:00Z
	st := newMemStore()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	objs := writerObjects(t, w, st, randRecords(rand.New(rand.NewPCG(7, 7)), 500), 1)
	var good []byte
	for _, b := range objs {
		good = b
		break
	}
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)/2],
		"garbage":   []byte("PAR1 not a footer PAR1"),
		"empty":     {},
	} {
		t.Run(name, func(t *testing.T) {
			st := newMemStore()
			key := HourPrefix(hour) + "part-x-e000000000001.parquet"
			if err := st.Put(context.Background(), key, b); err != nil {
				t.Fatal(err)
			}
			err := ReadHour(context.Background(), st, hour, func(*Row) error { return nil })
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("read of a %s object: got %v, want an error naming %s", name, err, key)
			}
		})
	}
}
