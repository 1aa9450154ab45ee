package recount

import (
	"bytes"
	"context"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"strconv"
	"testing"

	"github.com/parquet-go/parquet-go/compress/snappy"

	"github.com/adclick/adclick/latepath"
)

// TestWriterReusesBuffersAcrossHours writes chunks whose hours change from
// one chunk to the next (the buffers are reused whatever the hours)
// and checks that every row reads back once, in its own hour and epoch with
// its own fields, and that the kept slices stay bounded.
func TestWriterReusesBuffersAcrossHours(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	w, err := NewWriter(st, "preagg-1")
	if err != nil {
		t.Fatal(err)
	}
	w.SpillRows = 7
	const h0 = 1_795_946_400_000 // 2026-11-29T10:00Z
	type want struct {
		hour, epoch, spend int64
		ad                 string
	}
	wants := map[string]want{}
	n := 0
	for epoch := int64(1); epoch <= 4; epoch++ {
		for i := 0; i < 23; i++ {
			// Epoch e writes mostly hour e, some of hour e-1 and a few of
			// a far hour, interleaved.
			h := h0 + epoch*eventtime.HourMs
			switch {
			case i%5 == 1:
				h -= eventtime.HourMs
			case i%11 == 3:
				h += 40 * eventtime.HourMs
			}
			id := "c" + strconv.Itoa(n)
			ad := fmt.Sprintf("ad_%d", n%3)
			w.Add(&latepath.Record{Verdict: latepath.VerdictCounted, ClickID: id, AdID: ad, CampaignID: "k", DeviceID: "d",
				ImpressionMs: h, DeviceMs: h + 10, EventMs: h + 10, ArrivalMs: h + 20, SpendMicros: int64(n), Shard: "S1"})
			wants[id] = want{hour: h, epoch: epoch, spend: int64(n), ad: ad}
			n++
			if err := w.Spill(ctx, epoch); err != nil {
				t.Fatal(err)
			}
			if c := w.bufferCap(); c > 4*w.SpillRows {
				t.Fatalf("buffers hold %d rows, want at most %d", c, 4*w.SpillRows)
			}
		}
		if err := w.Flush(ctx, epoch); err != nil {
			t.Fatal(err)
		}
		if w.Buffered() != 0 {
			t.Fatalf("buffered %d after flush, want 0", w.Buffered())
		}
	}
	if rows, _ := w.Written(); rows != int64(n) {
		t.Errorf("written %d rows, want %d", rows, n)
	}
	got := 0
	err = Hours(ctx, st, 0, func(h int64) error {
		return ReadHour(ctx, st, h, func(r *Row) error {
			wt, ok := wants[r.ClickID]
			if !ok {
				return fmt.Errorf("unexpected click %q", r.ClickID)
			}
			if r.EventHourMs != h || wt.hour-wt.hour%eventtime.HourMs != h || r.Epoch != wt.epoch || r.SpendMicros != wt.spend || r.AdID != wt.ad {
				return fmt.Errorf("click %s: got hour %d epoch %d spend %d ad %q, want hour %d epoch %d spend %d ad %q",
					r.ClickID, r.EventHourMs, r.Epoch, r.SpendMicros, r.AdID, wt.hour, wt.epoch, wt.spend, wt.ad)
			}
			delete(wants, r.ClickID)
			got++
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != n || len(wants) != 0 {
		t.Errorf("read %d rows, want %d (%d missing)", got, n, len(wants))
	}
}

// TestFastSnappyRoundTrip checks that the lake's codec makes blocks the
// standard Snappy decoder reads back.
func TestFastSnappyRoundTrip(t *testing.T) {
	for _, src := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("counted ad_17 "), 5000), []byte("abcdefghijklmnopqrstuvwxyz0123456789")} {
		enc, err := (&fastSnappy{}).Encode(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := (&snappy.Codec{}).Decode(nil, enc)
		if err != nil {
			t.Fatalf("decode %d bytes: %v", len(src), err)
		}
		if !bytes.Equal(dec, src) {
			t.Errorf("round trip of %d bytes gave %d bytes", len(src), len(dec))
		}
	}
}
