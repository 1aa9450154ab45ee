package recount

import (
	"context"
	"github.com/adclick/adclick/eventtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/sink/sinktest"
)

// gathered returns the adclick_recount_* and adclick_reconcile_* families
// gathered from reg, by name.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "adclick_recount_") || strings.HasPrefix(n, "adclick_reconcile_") {
			got[n] = mf
		}
	}
	return got
}

// counter returns the value of the family's series whose labels include
// the given name=value pairs.
func counter(mf *dto.MetricFamily, labels ...string) float64 {
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		return m.GetCounter().GetValue()
	}
	return -1
}

// TestMetricsRegisteredWithRegisterer: the finaliser (the job's recount)
// registers the recount's metrics with the registerer it is given, so they
// reach /metrics, and a later recount with the same registerer (a second
// finaliser, or Run) adds to the same series instead of failing.
func TestMetricsRegisteredWithRegisterer(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	writeLake(t, st, 1, rec("counted", "c1", "ad1", h10+1000, h10+1000, h10+2000, 10),
		rec("counted", "c2", "ad1", h10+3000, h10+3000, h10+4000, 20))
	putFast(t, rows, "ad1", h10, 2, 30)
	reg := prometheus.NewPedanticRegistry()
	wm := ReadyAt(h10, 2*eventtime.HourMs, 600_000)
	o := Options{Store: st, Rows: rows, Gen: 1, NowMs: 9, Registerer: reg,
		Watermark: func(context.Context) (int64, error) { return wm, nil }}

	f, err := NewFinalizer(FinalizerOptions{Recount: o})
	if err != nil {
		t.Fatal(err)
	}
	got := gathered(t, reg)
	for _, name := range []string{"adclick_recount_hours_total", "adclick_recount_rows_read_total",
		"adclick_recount_last_hour_ms", "adclick_recount_final_refused_total",
		"adclick_reconcile_clicks", "adclick_reconcile_unbalanced_ads"} {
		if got[name] == nil {
			t.Errorf("after NewFinalizer with a registerer: %s not gathered, want it registered", name)
		}
	}
	if _, err := f.Step(ctx); err != nil {
		t.Fatal(err)
	}
	got = gathered(t, reg)
	if v := counter(got["adclick_recount_hours_total"], "outcome", "final"); v != 1 {
		t.Errorf("adclick_recount_hours_total{outcome=final}: got %v, want 1", v)
	}
	if v := counter(got["adclick_recount_rows_read_total"]); v < 2 {
		t.Errorf("adclick_recount_rows_read_total: got %v, want at least 2", v)
	}

	// The same registerer again: shared, not a registration error.
	o.Hours = []int64{h10}
	if _, err := Reconcile(ctx, o); err != nil {
		t.Fatalf("Reconcile with an already used registerer: %v", err)
	}
	if v := counter(gathered(t, reg)["adclick_recount_hours_total"], "outcome", "checked"); v != 1 {
		t.Errorf("adclick_recount_hours_total{outcome=checked} after Reconcile: got %v, want 1", v)
	}
}

// TestMetricsRegistrationConflict: a registerer that holds another metric
// under one of the recount's names is reported, not ignored.
func TestMetricsRegistrationConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_recount_hours_total", Help: "something else"}))
	_, err := NewFinalizer(FinalizerOptions{Recount: Options{Store: newMemStore(), Rows: sinktest.NewMemRows(), Registerer: reg,
		Watermark: func(context.Context) (int64, error) { return 0, nil }}})
	if err == nil || !strings.Contains(err.Error(), "recount: register metrics") {
		t.Errorf("NewFinalizer with a conflicting metric: got %v, want a registration error", err)
	}
}
