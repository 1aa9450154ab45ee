package recount

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
)

// The recount reads only the columns it needs, a row group at a time,
// column by column: strings become substrings of one string per page (or
// the dictionary's entries), so a row costs no allocation. Objects whose
// layout the fast path does not know (a missing column, another physical
// type, nullable or repeated columns) are read with the generic reader.

// String and int64 columns of a batch, by position in scanStrings and
// scanInts.
const (
	colVerdict = iota
	colClickID
	colAdID
	colCampaignID
	colDeviceID
	colShard
	colSeq
	numStrCols
)

const (
	colImpression = iota
	colDevice
	colArrival
	colSpend
	numIntCols
)

var (
	scanStrings = [numStrCols]string{"verdict", "click_id", "ad_id", "campaign_id", "device_id", "shard", "seq"}
	scanInts    = [numIntCols]string{"impression_ms", "device_ms", "arrival_ms", "spend_micros"}
)

// batch holds the recount's columns of n rows. Its strings may be kept: they
// never alias buffers the reader reuses.
type batch struct {
	n    int
	strs [numStrCols][]string
	ints [numIntCols][]int64
}

func (b *batch) reset(n int) {
	b.n = n
	for i := range b.strs {
		b.strs[i] = resize(b.strs[i], n)
	}
	for i := range b.ints {
		b.ints[i] = resize(b.ints[i], n)
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// scanner reads lake objects into batches. Not safe for concurrent use.
type scanner struct {
	b     batch
	rows  []Row
	vals  []parquet.Value
	dicts map[parquet.Dictionary][]string
}

// scan calls fn with the rows of the Parquet object data, a batch at a
// time.
func (s *scanner) scan(data []byte, fn func(*batch) error) error {
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(64<<10))
	if err != nil {
		return err
	}
	var strIdx [numStrCols]int
	var intIdx [numIntCols]int
	fast := true
	for i, name := range scanStrings {
		strIdx[i], fast = leaf(f.Schema(), name, parquet.ByteArray, fast)
	}
	for i, name := range scanInts {
		intIdx[i], fast = leaf(f.Schema(), name, parquet.Int64, fast)
	}
	if !fast {
		return s.scanGeneric(data, fn)
	}
	if s.dicts == nil {
		s.dicts = map[parquet.Dictionary][]string{}
	}
	for _, rg := range f.RowGroups() {
		n := rg.NumRows()
		if n == 0 {
			continue
		}
		s.b.reset(int(n))
		chunks := rg.ColumnChunks()
		for i, ci := range strIdx {
			if err := s.readStrings(chunks[ci], s.b.strs[i]); err != nil {
				return fmt.Errorf("column %s: %w", scanStrings[i], err)
			}
		}
		for i, ci := range intIdx {
			if err := s.readInts(chunks[ci], s.b.ints[i]); err != nil {
				return fmt.Errorf("column %s: %w", scanInts[i], err)
			}
		}
		if err := fn(&s.b); err != nil {
			return err
		}
	}
	return nil
}

// leaf returns the index of the required, non-repeated leaf column name of
// physical kind k, and ok && whether there is one.
func leaf(schema *parquet.Schema, name string, k parquet.Kind, ok bool) (int, bool) {
	c, found := schema.Lookup(name)
	if !ok || !found || c.MaxDefinitionLevel != 0 || c.MaxRepetitionLevel != 0 || c.Node.Type().Kind() != k {
		return 0, false
	}
	return c.ColumnIndex, true
}

var errColumnLength = errors.New("column chunk does not hold one value per row")

// eachPage calls fill for every page of a column chunk that must hold
// exactly n non-null values, with the page's first value index and count,
// and releases the page after it.
func eachPage(cc parquet.ColumnChunk, n int, fill func(p parquet.Page, i, k int) error) error {
	pages := cc.Pages()
	defer pages.Close()
	i := 0
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		k := int(p.NumValues())
		if p.NumNulls() != 0 || i+k > n {
			parquet.Release(p)
			return errColumnLength
		}
		err = fill(p, i, k)
		parquet.Release(p)
		if err != nil {
			return err
		}
		i += k
	}
	if i != n {
		return errColumnLength
	}
	return nil
}

// readStrings fills dst with the values of a BYTE_ARRAY column chunk.
func (s *scanner) readStrings(cc parquet.ColumnChunk, dst []string) error {
	clear(s.dicts) // a dictionary belongs to one column chunk
	return eachPage(cc, len(dst), func(p parquet.Page, i, n int) error {
		out := dst[i : i+n]
		data := p.Data()
		switch dict := p.Dictionary(); {
		case dict != nil && data.Kind() == encoding.Int32:
			entries := s.dictStrings(dict)
			for j, x := range data.Int32() {
				if x < 0 || int(x) >= len(entries) {
					return fmt.Errorf("dictionary index %d out of range", x)
				}
				out[j] = entries[x]
			}
		case dict == nil && data.Kind() == encoding.ByteArray:
			b, offs := data.ByteArray()
			if len(offs) != n+1 {
				return errColumnLength
			}
			all := string(b)
			for j := range out {
				out[j] = all[offs[j]:offs[j+1]]
			}
		default:
			return s.readValues(p, n, func(j int, v parquet.Value) { out[j] = string(v.ByteArray()) })
		}
		return nil
	})
}

// readInts fills dst with the values of an INT64 column chunk.
func (s *scanner) readInts(cc parquet.ColumnChunk, dst []int64) error {
	return eachPage(cc, len(dst), func(p parquet.Page, i, n int) error {
		out := dst[i : i+n]
		data := p.Data()
		if p.Dictionary() == nil && data.Kind() == encoding.Int64 && len(data.Int64()) == n {
			copy(out, data.Int64())
			return nil
		}
		return s.readValues(p, n, func(j int, v parquet.Value) { out[j] = v.Int64() })
	})
}

// readValues is the slow path for a page of another encoding.
func (s *scanner) readValues(p parquet.Page, n int, set func(int, parquet.Value)) error {
	if cap(s.vals) < 1024 {
		s.vals = make([]parquet.Value, 1024)
	}
	r := p.Values()
	j := 0
	for j < n {
		k, err := r.ReadValues(s.vals[:min(1024, n-j)])
		for _, v := range s.vals[:k] {
			set(j, v)
			j++
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if k == 0 {
			break
		}
	}
	if j != n {
		return errColumnLength
	}
	return nil
}

// dictStrings returns the entries of dict as strings, once per dictionary.
func (s *scanner) dictStrings(dict parquet.Dictionary) []string {
	if e, ok := s.dicts[dict]; ok {
		return e
	}
	e := make([]string, dict.Len())
	for i := range e {
		e[i] = string(dict.Index(int32(i)).ByteArray())
	}
	s.dicts[dict] = e
	return e
}

// scanGeneric reads data with the generic row reader (any layout the
// schema's columns can be assigned from) into batches.
func (s *scanner) scanGeneric(data []byte, fn func(*batch) error) error {
	if s.rows == nil {
		s.rows = make([]Row, 1024)
	}
	return readObjectBatches(data, s.rows, func(rows []Row) error {
		b := &s.b
		b.reset(len(rows))
		for i := range rows {
			r := &rows[i]
			b.strs[colVerdict][i], b.strs[colClickID][i], b.strs[colAdID][i] = r.Verdict, r.ClickID, r.AdID
			b.strs[colCampaignID][i], b.strs[colDeviceID][i] = r.CampaignID, r.DeviceID
			b.strs[colShard][i], b.strs[colSeq][i] = r.Shard, r.Seq
			b.ints[colImpression][i], b.ints[colDevice][i] = r.ImpressionMs, r.DeviceMs
			b.ints[colArrival][i], b.ints[colSpend][i] = r.ArrivalMs, r.SpendMicros
		}
		return fn(b)
	})
}
