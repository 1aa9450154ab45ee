package recount

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// An hour whose lake lacks records the stream counted does not balance:
// the recount writes no final_* for it (billing keeps it provisional),
// names it in the metrics and the error, and still finalises a balanced
// hour; once the records are back the hour finalises and leaves the metric.
func TestUnbalancedHourIsHeldNotFinal(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	h11 := h10 + eventtime.HourMs
	// Hour 10: the stream counted 3 clicks, the lake holds 1 (two lost).
	writeLake(t, st, 1, rec("counted", "x1", "ad1", h10+1000, h10+1000, h10+2000, 10))
	// Hour 11: balanced.
	writeLake(t, st, 2, rec("counted", "y1", "ad1", h11+1000, h11+1000, h11+2000, 10))
	_, err := rows.Put(ctx, []sink.Put{
		{Key: sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 1, Gen: 1},
		{Key: sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h11)}, Writer: sink.Fast, Valid: 1, SpendMicros: 10, Epoch: 2, Gen: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	o := Options{Store: st, Rows: rows, Hours: []int64{h10, h11}, Gen: 1, NowMs: 7, Watermark: forever, Registerer: reg}
	res, err := Run(ctx, o)
	var ue *UnbalancedError
	if !errors.As(err, &ue) || ue.HourMs != h10 || ue.Unexplained != -2 || ue.UnexplainedSpend != -20 {
		t.Fatalf("Run: got err %v, want an UnbalancedError for hour 10, unexplained -2 (-20 spend)", err)
	}
	if len(res) != 2 || res[0].Status != "held" || res[1].Status != "final" {
		t.Fatalf("statuses: got %+v, want held, final", res)
	}
	got := finals(t, rows)
	if _, ok := got[sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}]; ok {
		t.Errorf("hour 10 (unbalanced): final_* written %v, want none", got)
	}
	if v := got[sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h11)}]; v != [2]int64{1, 10} {
		t.Errorf("hour 11 (balanced): final %v, want [1 10]", v)
	}
	mf := gathered(t, reg)
	if v := mf["adclick_recount_unbalanced_hours"].GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Errorf("adclick_recount_unbalanced_hours: got %v, want 1", v)
	}
	hc := mf["adclick_recount_unbalanced_hour_clicks"]
	if hc == nil || len(hc.GetMetric()) != 1 || hc.GetMetric()[0].GetLabel()[0].GetValue() != "2026-11-29T10Z" || hc.GetMetric()[0].GetGauge().GetValue() != -2 {
		t.Errorf("adclick_recount_unbalanced_hour_clicks: got %v, want {hour=2026-11-29T10Z} -2", hc)
	}
	if v := counter(mf["adclick_recount_hours_total"], "outcome", "held"); v != 1 {
		t.Errorf("hours_total{held}: got %v, want 1", v)
	}

	// The missing records are found and put back: the hour balances.
	writeLake(t, st, 3, rec("counted", "x2", "ad1", h10+1000, h10+1000, h10+2000, 10),
		rec("counted", "x3", "ad1", h10+1000, h10+1000, h10+2000, 10))
	o.Hours = []int64{h10}
	if _, err := Run(ctx, o); err != nil {
		t.Fatalf("Run after the records are back: %v", err)
	}
	if v := finals(t, rows)[sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}]; v != [2]int64{3, 30} {
		t.Errorf("hour 10 after the records are back: final %v, want [3 30]", v)
	}
	mf = gathered(t, reg)
	if v := mf["adclick_recount_unbalanced_hours"].GetMetric()[0].GetGauge().GetValue(); v != 0 {
		t.Errorf("adclick_recount_unbalanced_hours after: got %v, want 0", v)
	}
	if hc := mf["adclick_recount_unbalanced_hour_clicks"]; hc != nil && len(hc.GetMetric()) != 0 {
		t.Errorf("adclick_recount_unbalanced_hour_clicks after: got %v, want no series", hc)
	}
}

// lakeOnly accepts the unexplained difference of a test that recounts a
// lake with no stream rows (every click is then unexplained).
const lakeOnly = "test: a lake recounted without the stream's rows"
