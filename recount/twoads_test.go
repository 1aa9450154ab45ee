package recount

import (
	"context"
	"testing"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// TestReconcileOneClickIDTwoAds: the stream counts a click id once per ad
// (docs/scale-out.md §3.2), the recount once in all, under the ad of its
// earliest copy. The difference is explained, click id by click id: the
// copy the stream counted for the other ad is in that ad's A.
func TestReconcileOneClickIDTwoAds(t *testing.T) {
	ctx := context.Background()
	m := int64(60_000)
	copies := []struct {
		ad   string
		arr  int64
		want preagg.Verdict
	}{
		{"ad7", h10 + 5*m + 100, preagg.Counted},
		{"ad9", h10 + 5*m + 200, preagg.Counted},   // another ad: counted for it
		{"ad7", h10 + 5*m + 300, preagg.Duplicate}, // the first ad again
	}
	pa, err := preagg.New(preagg.Options{}, preagg.NewMemDedup(), 0, 128)
	if err != nil {
		t.Fatal(err)
	}
	var lake []latepath.Record
	for i, c := range copies {
		click := ingest.Click{ClickID: "c1", AdID: c.ad, CampaignID: "camp", DeviceID: "dev",
			ImpressionMs: h10 + 5*m, DeviceMs: h10 + 5*m, EventMs: h10 + 5*m, ArrivalMs: c.arr, SpendMicros: 100}
		v, err := pa.Add(&click, 0)
		if err != nil || v != c.want {
			t.Fatalf("copy %d (%s): %v, %v; want %v", i, c.ad, v, err, c.want)
		}
		lake = append(lake, rec(v.String(), "c1", c.ad, h10+5*m, h10+5*m, c.arr, 100))
	}
	st := newMemStore()
	writeLake(t, st, 1, lake...)
	rows := sinktest.NewMemRows()
	_, err = rows.Put(ctx, []sink.Put{
		{Key: sink.Key{Entity: "ad7", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 1, SpendMicros: 100, Epoch: 1, Gen: 1},
		{Key: sink.Key{Entity: "ad9", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 1, SpendMicros: 100, Epoch: 1, Gen: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: 1, NowMs: 7, Watermark: forever, MaxLoggedIDs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a := adResult(t, res, h10, "ad7"); !equalAd(a, AdResult{Ad: "ad7", Fast: 1, Final: 1, FastSpend: 100, FinalSpend: 100, Balanced: true}) {
		t.Errorf("ad7: got %+v, want fast 1, final 1, balanced", a)
	}
	want := AdResult{Ad: "ad9", Fast: 1, Final: 0, A: 1, FastSpend: 100, ASpend: 100, Balanced: true, AIDs: []string{"c1"}}
	if a := adResult(t, res, h10, "ad9"); !equalAd(a, want) {
		t.Errorf("ad9: got %+v, want %+v", a, want)
	}
}
