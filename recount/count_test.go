package recount

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/adclick/adclick/sink/sinktest"
)

// recountAll runs Reconcile over every hour of st, with the stream's rows
// in place, and returns the results as JSON.
func recountAll(t *testing.T, st Store, res streamResult) []byte {
	t.Helper()
	var hours []int64
	if err := Hours(context.Background(), st, 0, func(h int64) error { hours = append(hours, h); return nil }); err != nil {
		t.Fatal(err)
	}
	rows := sinktest.NewMemRows()
	putRows(t, rows, res)
	out, err := Reconcile(context.Background(), Options{Store: st, Rows: rows, Hours: hours, Watermark: forever, NowMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHashCollisionsChangeNothing recounts a generated lake with the
// click-id hash cut to 3 bits (every id collides with thousands of others)
// and checks that the results equal those with the full hash.
func TestHashCollisionsChangeNothing(t *testing.T) {
	lines := genLines(t, 20_000, 5, 100)
	st := newMemStore()
	res := simulateStream(t, st, lines, 3000, 1)
	want := recountAll(t, st, res)
	defer func(m uint64) { idHashMask = m }(idHashMask)
	idHashMask = 7
	if got := recountAll(t, st, res); !bytes.Equal(got, want) {
		t.Fatalf("with colliding hashes the results differ:\ngot  %.600s\nwant %.600s", got, want)
	}
}

// TestGenericReaderPathAgrees rewrites every lake object in other layouts
// another tool might write: without dictionaries, with delta encodings,
// small pages and the columns in another order (read by the column
// scanner); and also without the seq column (read by the generic row
// reader, which leaves it empty, as the simulated stream does). The results
// must not change.
func TestGenericReaderPathAgrees(t *testing.T) {
	lines := genLines(t, 20_000, 9, 100)
	st := newMemStore()
	res := simulateStream(t, st, lines, 3000, 1)
	want := recountAll(t, st, res)

	// Plain (no dictionary) columns, in another order.
	type plainRow struct {
		Epoch        int64  `parquet:"epoch"`
		EventHourMs  int64  `parquet:"event_hour_ms"`
		Raw          string `parquet:"raw"`
		Seq          string `parquet:"seq"`
		Shard        string `parquet:"shard"`
		SpendMicros  int64  `parquet:"spend_micros,delta"`
		ArrivalMs    int64  `parquet:"arrival_ms,delta"`
		EventMs      int64  `parquet:"event_ms"`
		DeviceMs     int64  `parquet:"device_ms"`
		ImpressionMs int64  `parquet:"impression_ms"`
		DeviceID     string `parquet:"device_id"`
		CampaignID   string `parquet:"campaign_id"`
		AdID         string `parquet:"ad_id"`
		ClickID      string `parquet:"click_id,delta"`
		Verdict      string `parquet:"verdict"`
	}
	plain := newMemStore()
	for k, b := range st.objs {
		if !bytes.HasSuffix([]byte(k), []byte(".parquet")) {
			plain.objs[k] = b
			continue
		}
		rows, err := parquet.Read[Row](bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]plainRow, len(rows))
		for i, r := range rows {
			out[i] = plainRow{r.Epoch, r.EventHourMs, string(r.Raw), r.Seq, r.Shard, r.SpendMicros, r.ArrivalMs, r.EventMs, r.DeviceMs,
				r.ImpressionMs, r.DeviceID, r.CampaignID, r.AdID, r.ClickID, r.Verdict}
		}
		var buf bytes.Buffer
		if err := parquet.Write(&buf, out, parquet.PageBufferSize(4096)); err != nil {
			t.Fatal(err)
		}
		plain.objs[k] = buf.Bytes()
	}
	if got := recountAll(t, plain, res); !bytes.Equal(got, want) {
		t.Fatalf("re-encoded lake gives other results:\ngot  %.600s\nwant %.600s", got, want)
	}
	type noSeqRow struct {
		Verdict      string `parquet:"verdict"`
		ClickID      string `parquet:"click_id"`
		AdID         string `parquet:"ad_id"`
		CampaignID   string `parquet:"campaign_id"`
		DeviceID     string `parquet:"device_id"`
		ImpressionMs int64  `parquet:"impression_ms"`
		DeviceMs     int64  `parquet:"device_ms"`
		ArrivalMs    int64  `parquet:"arrival_ms"`
		SpendMicros  int64  `parquet:"spend_micros"`
		Shard        string `parquet:"shard"`
	}
	noSeq := newMemStore()
	for k, b := range st.objs {
		if !bytes.HasSuffix([]byte(k), []byte(".parquet")) {
			noSeq.objs[k] = b
			continue
		}
		rows, err := parquet.Read[Row](bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]noSeqRow, len(rows))
		for i, r := range rows {
			if r.Seq != "" {
				t.Fatalf("the simulated stream wrote seq %q", r.Seq)
			}
			out[i] = noSeqRow{r.Verdict, r.ClickID, r.AdID, r.CampaignID, r.DeviceID, r.ImpressionMs, r.DeviceMs, r.ArrivalMs, r.SpendMicros, r.Shard}
		}
		var buf bytes.Buffer
		if err := parquet.Write(&buf, out); err != nil {
			t.Fatal(err)
		}
		noSeq.objs[k] = buf.Bytes()
	}
	if got := recountAll(t, noSeq, res); !bytes.Equal(got, want) {
		t.Fatalf("lake without seq gives other results:\ngot  %.600s\nwant %.600s", got, want)
	}
}
