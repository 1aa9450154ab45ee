package recount

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the recount's Prometheus metrics. Safe for concurrent use.
type Metrics struct {
	hours      *prometheus.CounterVec
	rowsRead   prometheus.Counter
	lastHour   prometheus.Gauge
	reconcile  *prometheus.GaugeVec
	unbalanced prometheus.Gauge
	refused    prometheus.Counter
}

// NewMetrics returns the metrics, registered with r (nil = not registered).
func NewMetrics(r prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		hours: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_recount_hours_total",
			Help: "Hours recounted, by outcome: final (written), not_final (refused: not ready), checked (reconciled without writing)."}, []string{"outcome"}),
		rowsRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_recount_rows_read_total",
			Help: "Lake rows read by the recount (including neighbour hours read for de-duplication)."}),
		lastHour: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_recount_last_hour_ms",
			Help: "Start (Unix ms) of the last hour recounted."}),
		reconcile: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_reconcile_clicks",
			Help: "Reconciliation of the last hour recounted, summed over its ads: fast, late, final, a (counted by the stream, rejected by the recount), b (accepted by the recount, not counted by the stream), unexplained (final - (fast + late - a + b))."},
			[]string{"result"}),
		unbalanced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_reconcile_unbalanced_ads",
			Help: "Ads of the last hour recounted whose reconciliation does not balance."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_recount_final_refused_total",
			Help: "final_* writes refused because a newer generation had already written the row."}),
	}
	for _, res := range []string{"fast", "late", "final", "a", "b", "unexplained"} {
		m.reconcile.WithLabelValues(res)
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.hours, m.rowsRead, m.lastHour, m.reconcile, m.unbalanced, m.refused} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("recount: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
