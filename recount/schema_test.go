package recount

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/adclick/adclick/latepath"
)

// TestParquetSchemaWithIndependentReader opens a lake object with
// parquet-go's file-level reader (not the GenericReader[Row] the recount
// uses): the columns, their physical types, logical types and required-ness
// are the documented ones, and every value reads back column by column.
func TestParquetSchemaWithIndependentReader(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rs := []latepath.Record{
		rec("counted", "c1", "ad_1", h10+1000, h10+1500, h10+2000, 123),
		rec("invalid:malformed_json", "", "", 0, 0, h10+3000, 0),
	}
	rs[1].Raw = `{"click_id":"c`
	rs[0].Seq = "4960"
	writeLake(t, st, 42, rs...)
	b, err := st.Get(ctx, ObjectKey(h10, "preagg-0", 42))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		kind parquet.Kind
		str  bool
	}{
		{"verdict", parquet.ByteArray, true}, {"click_id", parquet.ByteArray, true}, {"ad_id", parquet.ByteArray, true},
		{"campaign_id", parquet.ByteArray, true}, {"device_id", parquet.ByteArray, true},
		{"impression_ms", parquet.Int64, false}, {"device_ms", parquet.Int64, false}, {"event_ms", parquet.Int64, false},
		{"arrival_ms", parquet.Int64, false}, {"spend_micros", parquet.Int64, false},
		{"shard", parquet.ByteArray, true}, {"seq", parquet.ByteArray, true}, {"raw", parquet.ByteArray, false},
		{"event_hour_ms", parquet.Int64, false}, {"epoch", parquet.Int64, false},
	}
	fields := f.Schema().Fields()
	if len(fields) != len(want) {
		t.Fatalf("schema has %d columns, want %d:\n%s", len(fields), len(want), f.Schema())
	}
	for i, w := range want {
		fl := fields[i]
		if fl.Name() != w.name || fl.Type().Kind() != w.kind || !fl.Required() {
			t.Errorf("column %d: got %s %v required=%v, want %s %v required", i, fl.Name(), fl.Type().Kind(), fl.Required(), w.name, w.kind)
		}
		lt := fl.Type().LogicalType()
		if w.str && (lt == nil || lt.String() != "STRING") {
			t.Errorf("column %s: logical type %v, want STRING", w.name, lt)
		}
		if w.kind == parquet.ByteArray && !w.str && lt != nil {
			// raw holds bytes as read, which need not be UTF-8: a STRING
			// annotation makes readers such as DuckDB refuse the file.
			t.Errorf("column %s: logical type %v, want none", w.name, lt)
		}
		if !strings.Contains(SchemaDoc, w.name) {
			t.Errorf("SchemaDoc does not document %s", w.name)
		}
	}
	// The invalid click goes by its arrival hour, also 10: both rows are
	// in the object.
	if f.NumRows() != 2 {
		t.Fatalf("hour 10 object: %d rows, want 2", f.NumRows())
	}
	got := map[string][]parquet.Value{}
	for _, rg := range f.RowGroups() {
		for i, cc := range rg.ColumnChunks() {
			pages := cc.Pages()
			for {
				p, err := pages.ReadPage()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				vals := make([]parquet.Value, p.NumValues())
				n, _ := p.Values().ReadValues(vals)
				for _, v := range vals[:n] {
					got[want[i].name] = append(got[want[i].name], v.Clone())
				}
				parquet.Release(p)
			}
			pages.Close()
		}
	}
	check := func(col string, row int, wantV any) {
		t.Helper()
		vs := got[col]
		if len(vs) != 2 {
			t.Errorf("%s: %d values, want 2", col, len(vs))
			return
		}
		var g any
		switch wantV.(type) {
		case string:
			g = vs[row].String()
		case int64:
			g = vs[row].Int64()
		}
		if g != wantV {
			t.Errorf("%s row %d: got %v, want %v", col, row, g, wantV)
		}
	}
	check("verdict", 0, "counted")
	check("click_id", 0, "c1")
	check("ad_id", 0, "ad_1")
	check("seq", 0, "4960")
	check("impression_ms", 0, h10+1000)
	check("device_ms", 0, h10+1500)
	check("event_ms", 0, h10+1500)
	check("arrival_ms", 0, h10+2000)
	check("spend_micros", 0, int64(123))
	check("shard", 0, "S0")
	check("raw", 0, "")
	check("epoch", 0, int64(42))
	check("event_hour_ms", 0, h10)
	check("verdict", 1, "invalid:malformed_json")
	check("raw", 1, `{"click_id":"c`)
	check("event_ms", 1, int64(0))
	check("event_hour_ms", 1, h10)
}
