package api

import (
	"encoding/json"
	"github.com/adclick/adclick/eventtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/runtime"
)

// fakeJobRegistry returns a registry holding the job metrics the status
// reads, as runtime, the sinks and Valkey register them, with the values
// of the fake job's story: 16 records, one late, one refused write, one
// failed checkpoint attempt, Valkey down. counted and late, if not
// negative, replace those verdicts' counts.
func fakeJobRegistry(counted, late float64) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	clicks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricClicks, Help: "h"}, []string{"verdict"})
	verdicts := map[string]float64{"counted": 12, "late": 1, "duplicate": 2, "beyond_horizon": 0, "guard_expired": 0, "invalid": 1}
	if counted >= 0 {
		verdicts["counted"] = counted
	}
	if late >= 0 {
		verdicts["late"] = late
	}
	for v, n := range verdicts {
		clicks.WithLabelValues(v).Add(n)
	}
	ckpts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricCheckpoints, Help: "h"}, []string{"result"})
	ckpts.WithLabelValues("completed").Add(4)
	ckpts.WithLabelValues("failed").Add(1)
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricSinkWrites, Help: "h"}, []string{"writer"})
	writes.WithLabelValues("fast").Add(30)
	writes.WithLabelValues("late").Add(2)
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricSinkRetries, Help: "h"}, []string{"writer"})
	retries.WithLabelValues("fast")
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricSinkRefused, Help: "h"}, []string{"writer", "reason"})
	refused.WithLabelValues("late", "condition").Inc()
	totalsUp := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricTotalsUp, Help: "h"})
	totalsUp.Set(1)
	totalsErr := prometheus.NewCounter(prometheus.CounterOpts{Name: metricTotalsErrors, Help: "h"})
	valkeyUp := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricValkeyUp, Help: "h"})
	reg.MustRegister(clicks, ckpts, writes, retries, refused, totalsUp, totalsErr, valkeyUp)
	return reg
}

func TestStatusReadsJobMetrics(t *testing.T) {
	f := newFakeJob(t)
	s := newTestServer(t, f, Options{AdminToken: adminTok, Gatherer: fakeJobRegistry(-1, -1)})
	var r StatusResponse
	rec := do(t, s, "GET", "/v1/status", "", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Verdicts["counted"] + r.Verdicts["late"]; got != 13 {
		t.Errorf("verdicts counted + late: got %d, want 13 (%v)", got, r.Verdicts)
	}
	for name, got := range map[string]*int64{"completed": r.Checkpoints.Completed, "failed": r.Checkpoints.Failed,
		"row_writes": r.Sinks.RowWrites, "retries": r.Sinks.Retries, "refused_writes": r.Sinks.RefusedWrites, "totals_errors": r.Sinks.TotalsErrors} {
		want := map[string]int64{"completed": 4, "failed": 1, "row_writes": 32, "retries": 0, "refused_writes": 1, "totals_errors": 0}[name]
		if got == nil || *got != want {
			t.Errorf("%s: got %v, want %d", name, got, want)
		}
	}
	// New's sample saw checkpoint 41 after the failed attempt.
	if got := r.Checkpoints.FailedSinceLast; got == nil || *got != 0 {
		t.Errorf("failed_since_last: got %v, want 0", got)
	}
	if r.Sinks.DynamoThrottles != nil {
		t.Errorf("dynamo_throttles: got %d, want null (no DynamoDB metrics)", *r.Sinks.DynamoThrottles)
	}
	if r.Sinks.ValkeyUp == nil || *r.Sinks.ValkeyUp || r.Sinks.TotalsStoreUp == nil || !*r.Sinks.TotalsStoreUp {
		t.Errorf("valkey_up, totals_store_up: got %v, %v, want false, true", r.Sinks.ValkeyUp, r.Sinks.TotalsStoreUp)
	}
	if len(r.Hints) != 1 || !strings.HasPrefix(r.Hints[0], "Valkey does not answer") {
		t.Errorf("hints: got %q, want the Valkey one", r.Hints)
	}

	// Without a gatherer every metric is null, not 0.
	s = newTestServer(t, f, Options{AdminToken: adminTok})
	rec = do(t, s, "GET", "/v1/status", "", "")
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["verdicts"] != nil || raw["late_rate"] != nil {
		t.Errorf("without metrics: verdicts %v, late_rate %v, want null", raw["verdicts"], raw["late_rate"])
	}
	for k, v := range raw["sinks"].(map[string]any) {
		if v != nil {
			t.Errorf("without metrics: sinks.%s = %v, want null", k, v)
		}
	}
}

func TestAllIdleHint(t *testing.T) {
	for _, c := range []struct {
		name   string
		shards []ingest.ShardWatermark
		done   bool
		want   bool
	}{
		{"none", nil, false, false},
		{"one active", []ingest.ShardWatermark{{ID: "a", Idle: true}, {ID: "b"}}, false, false},
		{"all idle", []ingest.ShardWatermark{{ID: "a", Idle: true}, {ID: "b", Idle: true}}, false, true},
		{"idle and closed", []ingest.ShardWatermark{{ID: "a", Idle: true}, {ID: "b", Closed: true}}, false, true},
		{"all closed", []ingest.ShardWatermark{{ID: "a", Closed: true}}, false, false},
		{"all idle, stopped", []ingest.ShardWatermark{{ID: "a", Idle: true}}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeJob(t)
			f.st.Shards, f.st.Done = c.shards, c.done
			s := newTestServer(t, f, Options{AdminToken: adminTok})
			r := s.statusOf(f.Status(), jobMetrics{})
			hinted := strings.Contains(strings.Join(r.Hints, "\n"), "all shards idle: the watermark cannot advance")
			if r.AllIdle != c.want || hinted != c.want {
				t.Errorf("all_idle %v, hint %v: want %v", r.AllIdle, hinted, c.want)
			}
		})
	}
}

func TestLateRate(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	s := func(at, counted, late int64) Sample { return Sample{AtMs: at, Counted: n(counted), Late: n(late)} }
	for _, c := range []struct {
		name     string
		hist     []Sample
		now      Sample
		wantNil  bool
		perSec   float64
		fraction float64 // -1 = null
	}{
		{"no metrics", []Sample{{AtMs: 0}}, Sample{AtMs: 5000}, true, 0, 0},
		{"one sample, now", nil, s(5000, 10, 1), true, 0, 0},
		{"too close", []Sample{s(4500, 0, 0)}, s(5000, 10, 1), true, 0, 0},
		{"ten seconds", []Sample{s(0, 0, 0), s(5000, 50, 5)}, s(10_000, 90, 10), false, 1, 0.1},
		{"window drops the old", []Sample{s(0, 0, 0), s(50_000, 1000, 0)}, s(110_000, 1000, 30), false, 0.5, 1},
		{"no clicks", []Sample{s(0, 7, 7)}, s(2000, 7, 7), false, 0, -1},
		{"counts went back", []Sample{s(0, 100, 50)}, s(2000, 10, 4), false, 0, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lateRate(c.hist, c.now)
			if (r == nil) != c.wantNil {
				t.Fatalf("got %+v, want nil %v", r, c.wantNil)
			}
			if r == nil {
				return
			}
			if r.LatePerSecond != c.perSec {
				t.Errorf("late per second: got %v, want %v", r.LatePerSecond, c.perSec)
			}
			switch {
			case c.fraction < 0 && r.Fraction != nil:
				t.Errorf("fraction: got %v, want null", *r.Fraction)
			case c.fraction >= 0 && (r.Fraction == nil || *r.Fraction != c.fraction):
				t.Errorf("fraction: got %v, want %v", r.Fraction, c.fraction)
			}
		})
	}
}

func TestCheckpointLog(t *testing.T) {
	l := newCkptLog(3)
	n := func(v int64) *int64 { return &v }
	l.see(nil, n(0))
	l.see(&runtime.Meta{ID: 1}, n(0))
	l.see(&runtime.Meta{ID: 1}, n(2)) // the same checkpoint: no record
	l.see(&runtime.Meta{ID: 2}, n(3))
	if got := l.failedAtLast(); got != 3 {
		t.Errorf("failed at last: got %d, want 3", got)
	}
	l.see(&runtime.Meta{ID: 3}, n(3))
	l.see(&runtime.Meta{ID: 4, Final: true}, n(4))
	recs := l.records()
	var got []string
	for _, r := range recs {
		got = append(got, itoa(r.ID)+":"+itoa(*r.FailedBefore))
	}
	if want := "2:3 3:0 4:1"; strings.Join(got, " ") != want {
		t.Errorf("records (id:failed_before): got %q, want %q", strings.Join(got, " "), want)
	}
	if !recs[2].Final {
		t.Errorf("checkpoint 4 is not final")
	}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

func TestBilling(t *testing.T) {
	wm := ms(t, "2026-11-29T13:15:00.999Z")
	for _, c := range []struct {
		name                            string
		wm                              int64
		ckpt                            *runtime.Meta
		recounted                       *int64
		closed, open, ready, recountedH string // "" = null
		notes                           int
	}{
		{"no watermark", eventtime.NoWatermark, nil, nil, "", "", "", "", 2},
		{"no checkpoint", wm, nil, nil, "2026-11-29T12Z", "2026-11-29T13Z", "", "", 2},
		// 13:15 - 2 h - 10 min - 1 h = 10:05: hour 10 is ready.
		{"ready", wm, &runtime.Meta{Watermark: wm, Settings: "format=3 window_ms=60000 horizon_ms=7200000 dedup=true"}, nil,
			"2026-11-29T12Z", "2026-11-29T13Z", "2026-11-29T10Z", "", 1},
		// Hour 10 is ready at 10:00 + 1 h + 2 h + 10 min = 13:10.
		{"one ms short", wm, &runtime.Meta{Watermark: ms(t, "2026-11-29T13:09:59.999Z"), Settings: "horizon_ms=7200000"}, nil,
			"2026-11-29T12Z", "2026-11-29T13Z", "2026-11-29T09Z", "", 1},
		{"exactly ready", wm, &runtime.Meta{Watermark: ms(t, "2026-11-29T13:10:00Z"), Settings: "horizon_ms=7200000"}, new(ms(t, "2026-11-29T09:00:00Z")),
			"2026-11-29T12Z", "2026-11-29T13Z", "2026-11-29T10Z", "2026-11-29T09Z", 0},
		{"recount idle", wm, &runtime.Meta{Watermark: wm, Settings: "horizon_ms=7200000"}, new(int64(0)),
			"2026-11-29T12Z", "2026-11-29T13Z", "2026-11-29T10Z", "", 1},
		{"nothing ready", wm, &runtime.Meta{Watermark: 1000, Settings: "horizon_ms=7200000"}, nil,
			"2026-11-29T12Z", "2026-11-29T13Z", "", "", 1},
		{"watermark at hour end", ms(t, "2026-11-29T12:59:59.999Z"), nil, nil, "2026-11-29T12Z", "2026-11-29T13Z", "", "", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := billingOf(runtime.Status{WatermarkMs: c.wm, LastCheckpoint: c.ckpt}, jobMetrics{recountLastHourMs: c.recounted})
			str := func(p *string) string {
				if p == nil {
					return ""
				}
				return *p
			}
			if str(b.ClosedThrough) != c.closed || str(b.OpenFrom) != c.open || str(b.ReadyThrough) != c.ready || str(b.RecountedThrough) != c.recountedH {
				t.Errorf("closed %q open %q ready %q recounted %q: want %q %q %q %q", str(b.ClosedThrough), str(b.OpenFrom),
					str(b.ReadyThrough), str(b.RecountedThrough), c.closed, c.open, c.ready, c.recountedH)
			}
			if len(b.Notes) != c.notes {
				t.Errorf("notes: got %q, want %d", b.Notes, c.notes)
			}
		})
	}
}
