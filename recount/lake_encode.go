package recount

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding/delta"
	"github.com/parquet-go/parquet-go/encoding/rle"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/adclick/adclick/latepath"
)

// The lake's objects are written by an encoder made for the one schema of
// Row, column by column, from buffers that Add fills: no reflection, no
// row values, no copy of the rows to split them by hour. It writes what
// parquet-go's GenericWriter[Row] writes with the lake's options
// (writerOptions in the tests), byte for byte: one row group, data pages v2
// of about 256 KiB (a column's page is cut at the first multiple of 64 rows
// at which its unencoded size reaches 98 % of 256 KiB), a dictionary page
// for each dict column, DELTA_LENGTH_BYTE_ARRAY for the other strings,
// PLAIN int64s, Snappy, page statistics and bounds for the int64 columns
// only, the page index. (The string columns carry no bounds or page
// statistics: nothing prunes on them; the recount reads every row, a query
// engine prunes on event_hour_ms, epoch and the times.) The tests compare
// the two writers' bytes on random rows. (The lake used to reuse one
// GenericWriter with Reset, which writes an empty path_in_schema in every
// object after its first; this encoder always writes the column's name, as
// a fresh GenericWriter does.)

// numLeaves is the number of columns: one per field of Row.
const numLeaves = 15

// The buffered columns of an hour: byte arrays (the dictionary columns
// too: their dictionaries are built when the object is encoded) and the
// int64s that vary by row. event_hour_ms and epoch are the same in every
// row of an object and are not buffered.
const (
	bytesVerdict = iota
	bytesAdID
	bytesCampaignID
	bytesShard
	bytesClickID
	bytesDeviceID
	bytesSeq
	bytesRaw
	numBytesCols
)

const (
	intImpression = iota
	intDevice
	intEvent
	intArrival
	intSpend
	numIntColsBuf
)

type leafKind uint8

const (
	kindDict leafKind = iota
	kindBytes
	kindInt
	kindConst
)

// leafSpec says where a leaf's values are buffered.
type leafSpec struct {
	name string
	kind leafKind
	idx  int  // index in hourRows.bytes or .ints; for kindConst, 0 = event hour, 1 = epoch
	str  bool // STRING logical type (UTF8)
}

// leaves are the columns in schema order (the order of Row's fields).
var leaves = [numLeaves]leafSpec{
	{"verdict", kindDict, bytesVerdict, true},
	{"click_id", kindBytes, bytesClickID, true},
	{"ad_id", kindDict, bytesAdID, true},
	{"campaign_id", kindDict, bytesCampaignID, true},
	{"device_id", kindBytes, bytesDeviceID, true},
	{"impression_ms", kindInt, intImpression, false},
	{"device_ms", kindInt, intDevice, false},
	{"event_ms", kindInt, intEvent, false},
	{"arrival_ms", kindInt, intArrival, false},
	{"spend_micros", kindInt, intSpend, false},
	{"shard", kindDict, bytesShard, true},
	{"seq", kindBytes, bytesSeq, true},
	{"raw", kindBytes, bytesRaw, false},
	{"event_hour_ms", kindConst, 0, false},
	{"epoch", kindConst, 1, false},
}

// createdBy is the footer's created_by, as parquet.CreatedBy("adclick",
// "", "") spells it.
const createdBy = "adclick version (build )"

// pageLimit is the unencoded size at which a page is cut (parquet-go's
// default page buffer, 256 KiB, times 0.98), checked every pageStride rows.
const (
	pageLimit  = 256 * 1024 * 98 / 100
	pageStride = 64
)

// schemaElements is the footer's schema: a root named after the Row type,
// then one required leaf per column.
var schemaElements = func() []format.SchemaElement {
	els := make([]format.SchemaElement, 0, numLeaves+1)
	root := format.SchemaElement{Name: "Row"}
	root.NumChildren = thrift.New(int32(numLeaves))
	els = append(els, root)
	for _, l := range leaves {
		e := format.SchemaElement{Name: l.name, RepetitionType: thrift.New(format.Required)}
		switch {
		case l.kind == kindInt || l.kind == kindConst:
			e.Type = thrift.New(format.Int64)
			e.TypeLength = thrift.New(int32(64))
			e.ConvertedType = thrift.New(deprecated.Int64)
			e.LogicalType = format.LogicalType{Value: &format.IntType{BitWidth: 64, IsSigned: true}}
		case l.str:
			e.Type = thrift.New(format.ByteArray)
			e.ConvertedType = thrift.New(deprecated.UTF8)
			e.LogicalType = format.LogicalType{Value: &format.StringType{}}
		default:
			e.Type = thrift.New(format.ByteArray)
		}
		els = append(els, e)
	}
	return els
}()

// leafPaths are the columns' path_in_schema.
var leafPaths = func() (p [numLeaves]thrift.Slice[string]) {
	for i, l := range leaves {
		p[i] = thrift.Slice[string]{l.name}
	}
	return p
}()

var columnOrders = func() []format.ColumnOrder {
	o := make([]format.ColumnOrder, numLeaves)
	for i := range o {
		o[i] = format.ColumnOrder{Value: &format.TypeDefinedOrder{}}
	}
	return o
}()

// bytesColumn is a byte-array column: every row's bytes one after the
// other, and their lengths.
type bytesColumn struct {
	data []byte
	lens []int32
}

func (c *bytesColumn) add(s string) {
	c.data = append(c.data, s...)
	c.lens = append(c.lens, int32(len(s)))
}

func (c *bytesColumn) reset() {
	c.data = c.data[:0]
	c.lens = c.lens[:0]
}

// hourRows holds the buffered rows of one partition hour, column by column,
// in order of Add. It holds no pointer (into the records or elsewhere).
type hourRows struct {
	hour  int64
	n     int
	bytes [numBytesCols]bytesColumn
	ints  [numIntColsBuf][]int64
}

// add appends r, its raw payload cut to latepath.MaxRaw bytes.
func (b *hourRows) add(r *latepath.Record) {
	raw := r.Raw
	if len(raw) > latepath.MaxRaw {
		raw = raw[:latepath.MaxRaw]
	}
	b.bytes[bytesVerdict].add(r.Verdict)
	b.bytes[bytesAdID].add(r.AdID)
	b.bytes[bytesCampaignID].add(r.CampaignID)
	b.bytes[bytesShard].add(r.Shard)
	b.bytes[bytesClickID].add(r.ClickID)
	b.bytes[bytesDeviceID].add(r.DeviceID)
	b.bytes[bytesSeq].add(r.Seq)
	b.bytes[bytesRaw].add(raw)
	b.ints[intImpression] = append(b.ints[intImpression], r.ImpressionMs)
	b.ints[intDevice] = append(b.ints[intDevice], r.DeviceMs)
	b.ints[intEvent] = append(b.ints[intEvent], r.EventMs)
	b.ints[intArrival] = append(b.ints[intArrival], r.ArrivalMs)
	b.ints[intSpend] = append(b.ints[intSpend], r.SpendMicros)
	b.n++
}

// capRows returns how many rows b holds without growing.
func (b *hourRows) capRows() int { return cap(b.ints[0]) }

// capBytes returns how many bytes of strings b holds without growing.
func (b *hourRows) capBytes() int {
	n := 0
	for i := range b.bytes {
		n += cap(b.bytes[i].data)
	}
	return n
}

// reset empties b, keeping its buffers and its hour (the next chunk likely
// has the same hours).
func (b *hourRows) reset() {
	b.n = 0
	for i := range b.bytes {
		b.bytes[i].reset()
	}
	for i := range b.ints {
		b.ints[i] = b.ints[i][:0]
	}
}

// encoder writes hourRows as Parquet objects. Its buffers are reused from
// one object to the next; not safe for concurrent use.
type encoder struct {
	out   bytes.Buffer // the object
	page  []byte       // a page's encoded values
	comp  []byte       // a page compressed
	stats []byte       // min/max values of the int64 pages
	enc   *thrift.Encoder
	proto thrift.CompactProtocol
	codec fastSnappy

	hdr     format.PageHeader
	chunks  [numLeaves]format.ColumnChunk
	colIdx  [numLeaves]format.ColumnIndex
	offIdx  [numLeaves]format.OffsetIndex
	rg      [1]format.RowGroup
	meta    format.FileMetaData
	deltaBP delta.BinaryPackedEncoding
	rleDict rle.DictionaryEncoding
	dict    dictBuilder
}

// maxKeptObject is the largest object buffer an encoder keeps for the
// next object.
const maxKeptObject = 64 << 20

// errPageTooLarge is returned for a page past Parquet's int32 sizes.
var errPageTooLarge = fmt.Errorf("page larger than %d bytes", math.MaxInt32)

// encode returns the rows of b, of checkpoint epoch epoch, as one Parquet
// object. The slice is valid until the next call.
func (e *encoder) encode(b *hourRows, epoch int64) ([]byte, error) {
	if e.enc == nil {
		e.enc = thrift.NewEncoder(e.proto.NewWriter(&e.out))
	}
	if e.out.Cap() > maxKeptObject {
		// One large object (a burst of invalid clicks with long raw
		// payloads) does not keep its buffer for the writer's lifetime.
		e.out = bytes.Buffer{}
	}
	e.out.Reset()
	e.stats = e.stats[:0]
	e.out.WriteString("PAR1")
	var totalUncomp, totalComp int64
	for c := range leaves {
		if err := e.column(c, b, epoch); err != nil {
			return nil, fmt.Errorf("column %s: %w", leaves[c].name, err)
		}
		totalUncomp += e.chunks[c].MetaData.TotalUncompressedSize
		totalComp += e.chunks[c].MetaData.TotalCompressedSize
	}
	for c := range e.colIdx {
		e.chunks[c].ColumnIndexOffset = int64(e.out.Len())
		if err := e.enc.Encode(&e.colIdx[c]); err != nil {
			return nil, err
		}
		e.chunks[c].ColumnIndexLength = int32(int64(e.out.Len()) - e.chunks[c].ColumnIndexOffset)
	}
	for c := range e.offIdx {
		e.chunks[c].OffsetIndexOffset = int64(e.out.Len())
		if err := e.enc.Encode(&e.offIdx[c]); err != nil {
			return nil, err
		}
		e.chunks[c].OffsetIndexLength = int32(int64(e.out.Len()) - e.chunks[c].OffsetIndexOffset)
	}
	e.rg[0] = format.RowGroup{Columns: e.chunks[:], TotalByteSize: totalUncomp, NumRows: int64(b.n),
		SortingColumns: []format.SortingColumn{}, FileOffset: 4, TotalCompressedSize: totalComp}
	e.meta = format.FileMetaData{Version: 2, Schema: schemaElements, NumRows: int64(b.n), RowGroups: e.rg[:],
		KeyValueMetadata: []format.KeyValue{}, CreatedBy: createdBy, ColumnOrders: columnOrders}
	start := e.out.Len()
	if err := e.enc.Encode(&e.meta); err != nil {
		return nil, err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(e.out.Len()-start))
	e.out.Write(n[:])
	e.out.WriteString("PAR1")
	return e.out.Bytes(), nil
}

// column writes the chunk of leaf c and fills in its metadata and page
// index.
func (e *encoder) column(c int, b *hourRows, epoch int64) error {
	l := &leaves[c]
	ch := &e.chunks[c]
	*ch = format.ColumnChunk{MetaData: format.ColumnMetaData{
		Encoding:      ch.MetaData.Encoding[:0],
		PathInSchema:  leafPaths[c],
		Codec:         format.Snappy,
		NumValues:     int64(b.n),
		EncodingStats: ch.MetaData.EncodingStats[:0],
	}}
	md := &ch.MetaData
	ci := &e.colIdx[c]
	*ci = format.ColumnIndex{NullPages: ci.NullPages[:0], MinValues: ci.MinValues[:0], MaxValues: ci.MaxValues[:0],
		NullCounts: ci.NullCounts[:0]}
	oi := &e.offIdx[c]
	*oi = format.OffsetIndex{PageLocations: oi.PageLocations[:0]}

	var dataEnc format.Encoding
	var err error
	switch l.kind {
	case kindDict:
		md.Type = format.ByteArray
		md.Encoding = append(md.Encoding, format.Plain, format.RLEDictionary)
		dataEnc = format.RLEDictionary
		ids, numValues := e.dict.build(&b.bytes[l.idx])
		md.DictionaryPageOffset = int64(e.out.Len())
		if err = e.dictPage(md, numValues); err != nil {
			return err
		}
		md.DataPageOffset = int64(e.out.Len())
		err = splitPages(b.n, func(i, j int) int { return 4 * (j - i) }, func(i, j int) error {
			var perr error
			if e.page, perr = e.rleDict.EncodeInt32(e.page[:0], ids[i:j]); perr != nil {
				return perr
			}
			return e.dataPage(c, i, j, dataEnc, format.Statistics{})
		})
	case kindBytes:
		md.Type = format.ByteArray
		md.Encoding = append(md.Encoding, format.DeltaLengthByteArray)
		dataEnc = format.DeltaLengthByteArray
		col := &b.bytes[l.idx]
		md.DataPageOffset = int64(e.out.Len())
		// pos is where the page's bytes start; sum the bytes of the rows
		// before summed.
		pos, sum, summed := 0, 0, 0
		err = splitPages(b.n, func(i, j int) int {
			for _, n := range col.lens[summed:j] {
				sum += int(n)
			}
			summed = j
			return sum - pos + 4*(j-i)
		}, func(i, j int) error {
			// size(i, j) was the last call: sum ends the page.
			e.page, _ = e.deltaBP.EncodeInt32(e.page[:0], col.lens[i:j])
			e.page = append(e.page, col.data[pos:sum]...)
			md.SizeStatistics.UnencodedByteArrayDataBytes += int64(sum - pos)
			pos = sum
			return e.dataPage(c, i, j, dataEnc, format.Statistics{})
		})
	default:
		md.Type = format.Int64
		md.Encoding = append(md.Encoding, format.Plain)
		dataEnc = format.Plain
		var vals []int64
		var k int64
		if l.kind == kindInt {
			vals = b.ints[l.idx]
		} else if l.idx == 0 {
			k = b.hour
		} else {
			k = epoch
		}
		md.DataPageOffset = int64(e.out.Len())
		var minAll, maxAll int64
		err = splitPages(b.n, func(i, j int) int { return 8 * (j - i) }, func(i, j int) error {
			var lo, hi int64
			if vals != nil {
				e.page, lo, hi = appendInt64s(e.page[:0], vals[i:j])
			} else {
				e.page, lo, hi = appendConstInt64(e.page[:0], k, j-i)
			}
			if i == 0 {
				minAll, maxAll = lo, hi
			} else {
				minAll, maxAll = min(minAll, lo), max(maxAll, hi)
			}
			s := len(e.stats)
			e.stats = binary.LittleEndian.AppendUint64(e.stats, uint64(lo))
			e.stats = binary.LittleEndian.AppendUint64(e.stats, uint64(hi))
			minB, maxB := e.stats[s:s+8:s+8], e.stats[s+8:s+16:s+16]
			ci.MinValues = append(ci.MinValues, minB)
			ci.MaxValues = append(ci.MaxValues, maxB)
			return e.dataPage(c, i, j, dataEnc, format.Statistics{Max: maxB, Min: minB, MaxValue: maxB, MinValue: minB})
		})
		if b.n > 0 {
			s := len(e.stats)
			e.stats = binary.LittleEndian.AppendUint64(e.stats, uint64(minAll))
			e.stats = binary.LittleEndian.AppendUint64(e.stats, uint64(maxAll))
			md.Statistics.MinValue, md.Statistics.MaxValue = e.stats[s:s+8:s+8], e.stats[s+8:s+16:s+16]
		}
	}
	if err != nil {
		return err
	}
	sortEncodingStats(md.EncodingStats) // by page type, then encoding
	ci.BoundaryOrder = boundaryOrder(l.kind, ci)
	return nil
}

// splitPages calls page(i, j) for every page [i, j) of n rows: a page ends
// at the first multiple of pageStride rows (or the last row) at which
// size(start, j) reaches pageLimit.
func splitPages(n int, size func(i, j int) int, page func(i, j int) error) error {
	start := 0
	for end := 0; end < n; {
		end = min(end+pageStride, n)
		if size(start, end) >= pageLimit {
			if err := page(start, end); err != nil {
				return err
			}
			start = end
		}
	}
	if start < n {
		return page(start, n)
	}
	return nil
}

// dictPage writes the dictionary page (numValues values, PLAIN, built by
// e.dict) of the chunk md.
func (e *encoder) dictPage(md *format.ColumnMetaData, numValues int) error {
	e.page, e.dict.plain = e.dict.plain, e.page[:0]
	if len(e.page) > math.MaxInt32 {
		return errPageTooLarge
	}
	e.compress()
	e.hdr = format.PageHeader{Type: format.DictionaryPage, UncompressedPageSize: int32(len(e.page)),
		CompressedPageSize: int32(len(e.comp)), CRC: int32(crc32.ChecksumIEEE(e.comp))}
	e.hdr.DictionaryPageHeader = thrift.New(format.DictionaryPageHeader{NumValues: int32(numValues), Encoding: format.Plain})
	start := e.out.Len()
	if err := e.enc.Encode(&e.hdr); err != nil {
		return err
	}
	hl := e.out.Len() - start
	e.out.Write(e.comp)
	record(md, format.DictionaryPage, format.Plain, hl, len(e.page), len(e.comp))
	return nil
}

// dataPage writes the data page of rows [i, j) of leaf c from e.page.
func (e *encoder) dataPage(c, i, j int, enc format.Encoding, st format.Statistics) error {
	if len(e.page) > math.MaxInt32 {
		return errPageTooLarge
	}
	e.compress()
	raw, comp, crc := len(e.page), e.comp, crc32.ChecksumIEEE(e.comp)
	n := int32(j - i)
	e.hdr = format.PageHeader{Type: format.DataPageV2, UncompressedPageSize: int32(raw),
		CompressedPageSize: int32(len(comp)), CRC: int32(crc)}
	e.hdr.DataPageHeaderV2 = thrift.New(format.DataPageHeaderV2{NumValues: n, NumRows: n, Encoding: enc,
		IsCompressed: thrift.New(true), Statistics: st})
	start := e.out.Len()
	if err := e.enc.Encode(&e.hdr); err != nil {
		return err
	}
	hl := e.out.Len() - start
	e.out.Write(comp)
	md := &e.chunks[c].MetaData
	oi := &e.offIdx[c]
	oi.PageLocations = append(oi.PageLocations, format.PageLocation{Offset: int64(start),
		CompressedPageSize: int32(hl + len(comp)), FirstRowIndex: int64(i)})
	ci := &e.colIdx[c]
	ci.NullPages = append(ci.NullPages, false)
	ci.NullCounts = append(ci.NullCounts, 0)
	if leaves[c].kind == kindDict || leaves[c].kind == kindBytes {
		ci.MinValues = append(ci.MinValues, []byte{})
		ci.MaxValues = append(ci.MaxValues, []byte{})
	}
	record(md, format.DataPageV2, enc, hl, raw, len(comp))
	return nil
}

// record adds a page just written (header of hl bytes, raw bytes of
// values, comp compressed) to its chunk's sizes and encoding statistics.
func record(md *format.ColumnMetaData, typ format.PageType, enc format.Encoding, hl, raw, comp int) {
	md.TotalUncompressedSize += int64(hl + raw)
	md.TotalCompressedSize += int64(hl + comp)
	md.EncodingStats = addEncodingStat(md.EncodingStats, typ, enc)
}

// compress sets e.comp to e.page compressed, in a buffer reused for every
// page.
func (e *encoder) compress() {
	if n := s2.MaxEncodedLen(len(e.page)); cap(e.comp) < n {
		e.comp = make([]byte, 0, n)
	}
	e.comp, _ = e.codec.Encode(e.comp[:0], e.page)
}

func addEncodingStat(stats []format.PageEncodingStats, typ format.PageType, enc format.Encoding) []format.PageEncodingStats {
	for i := range stats {
		if stats[i].PageType == typ && stats[i].Encoding == enc {
			stats[i].Count++
			return stats
		}
	}
	return append(stats, format.PageEncodingStats{PageType: typ, Encoding: enc, Count: 1})
}

func sortEncodingStats(stats []format.PageEncodingStats) {
	for i := 1; i < len(stats); i++ {
		for j := i; j > 0 && (stats[j].PageType < stats[j-1].PageType ||
			stats[j].PageType == stats[j-1].PageType && stats[j].Encoding < stats[j-1].Encoding); j-- {
			stats[j], stats[j-1] = stats[j-1], stats[j]
		}
	}
}

// boundaryOrder returns the column index's order: for the int64 columns,
// ascending when both the pages' minimums and maximums never decrease,
// descending when they never increase; for the string columns, whose
// bounds are not written (all empty), ascending from two pages on.
func boundaryOrder(k leafKind, ci *format.ColumnIndex) format.BoundaryOrder {
	if len(ci.MinValues) < 2 {
		return format.Unordered
	}
	if k == kindDict || k == kindBytes {
		return format.Ascending
	}
	lo, hi := orderOf(ci.MinValues), orderOf(ci.MaxValues)
	switch {
	case lo == hi && lo > 0:
		return format.Ascending
	case lo == hi && lo < 0:
		return format.Descending
	}
	return format.Unordered
}

// orderOf returns +1 if the little-endian int64s vs never decrease, -1 if
// they never increase (and are not all equal), 0 otherwise.
func orderOf(vs [][]byte) int {
	asc, desc := true, true
	for i := 1; i < len(vs); i++ {
		a, b := int64(binary.LittleEndian.Uint64(vs[i-1])), int64(binary.LittleEndian.Uint64(vs[i]))
		if a > b {
			asc = false
		}
		if a < b {
			desc = false
		}
	}
	switch {
	case asc:
		return 1
	case desc:
		return -1
	}
	return 0
}

// appendInt64s appends vs PLAIN-encoded and returns their minimum and
// maximum.
func appendInt64s(dst []byte, vs []int64) ([]byte, int64, int64) {
	lo, hi := vs[0], vs[0]
	n := len(dst)
	dst = growBytes(dst, 8*len(vs))
	out := dst[n:]
	for i, v := range vs {
		binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
		lo, hi = min(lo, v), max(hi, v)
	}
	return dst, lo, hi
}

// appendConstInt64 appends v n times PLAIN-encoded.
func appendConstInt64(dst []byte, v int64, n int) ([]byte, int64, int64) {
	start := len(dst)
	dst = growBytes(dst, 8*n)
	out := dst[start:]
	if n > 0 {
		binary.LittleEndian.PutUint64(out, uint64(v))
		for k := 8; k < len(out); k *= 2 {
			copy(out[k:], out[:k])
		}
	}
	return dst, v, v
}

// growBytes extends b by n bytes.
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// dictBuilder builds the dictionary of a byte-array column: every row's
// index, and the distinct values in order of first appearance, PLAIN-encoded
// (the dictionary page). Values of at most 15 bytes, all of the lake's in
// practice (verdicts, ad, campaign and shard ids), are looked up by value
// packed in two words, longer ones by string. Its buffers are reused.
type dictBuilder struct {
	ids   []int32
	plain []byte
	short map[[2]uint64]int32
	long  map[string]int32
}

// build returns the indexes of the rows of col and the number of distinct
// values; d.plain holds their dictionary page.
func (d *dictBuilder) build(col *bytesColumn) ([]int32, int) {
	if d.short == nil {
		d.short, d.long = map[[2]uint64]int32{}, map[string]int32{}
	}
	clear(d.short)
	clear(d.long)
	d.ids = slices.Grow(d.ids[:0], len(col.lens))[:len(col.lens)]
	d.plain = d.plain[:0]
	n := int32(0)
	var lastKey [2]uint64
	lastID := int32(-1)
	pos := 0
	full := col.data[:cap(col.data)] // the bytes past len are masked off
	for i, l := range col.lens {
		v := col.data[pos : pos+int(l)]
		var id int32
		if l < 16 {
			var k [2]uint64
			if pos+16 <= len(full) {
				k = packKey(full[pos:pos+16], int(l))
			} else {
				var buf [16]byte
				copy(buf[:], v)
				k = packKey(buf[:], int(l))
			}
			if k == lastKey && lastID >= 0 {
				d.ids[i] = lastID
				pos += int(l)
				continue
			}
			var ok bool
			if id, ok = d.short[k]; !ok {
				id = n
				d.short[k] = id
			}
			lastKey, lastID = k, id
		} else {
			var ok bool
			if id, ok = d.long[string(v)]; !ok {
				id = n
				d.long[string(v)] = id
			}
			lastID = -1
		}
		if id == n {
			n++
			d.plain = binary.LittleEndian.AppendUint32(d.plain, uint32(l))
			d.plain = append(d.plain, v...)
		}
		d.ids[i] = id
		pos += int(l)
	}
	return d.ids, int(n)
}

// packKey returns the first l < 16 bytes of b (which has 16) and l in two
// words: equal keys are equal values.
func packKey(b []byte, l int) [2]uint64 {
	lo, hi := binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:16])
	if l < 8 {
		lo &= 1<<(8*l) - 1
		hi = 0
	} else {
		hi &= 1<<(8*(l-8)) - 1
	}
	return [2]uint64{lo, hi | uint64(l)<<56}
}
