package flush

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the drivers' Prometheus metrics, labelled by run kind
// ("flush", "sweep" or "rebuild"). Safe for concurrent use.
type metrics struct {
	items   *prometheus.CounterVec   // kind, outcome
	totals  *prometheus.CounterVec   // outcome
	runs    *prometheus.CounterVec   // kind, result
	seconds *prometheus.HistogramVec // kind
	retries *prometheus.CounterVec   // kind, op
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "flush", Name: "items_total",
			Help: "Items the flush, sweep or rebuild handled, by outcome (scanned, deleted, removed, rewritten, refused, superseded).",
		}, []string{"kind", "outcome"}),
		totals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "flush", Name: "totals_total",
			Help: "Running totals the flush rewrote or deleted, or the rebuild rewrote from the rows (rebuilt).",
		}, []string{"outcome"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "flush", Name: "runs_total",
			Help: "Flush, sweep and rebuild runs, by result (ok, error).",
		}, []string{"kind", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "adclick", Subsystem: "flush", Name: "duration_seconds",
			Help:    "Duration of flush, sweep and rebuild runs, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 8),
		}, []string{"kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "flush", Name: "retries_total",
			Help: "Row-store calls the flush, sweep or rebuild sent again after a transient error (throttling, 5xx, timeout), by call.",
		}, []string{"kind", "op"}),
	}
	if r == nil {
		return m
	}
	m.items = register(r, m.items)
	m.totals = register(r, m.totals)
	m.runs = register(r, m.runs)
	m.seconds = register(r, m.seconds)
	m.retries = register(r, m.retries)
	return m
}

// register registers c, or returns the collector an earlier run registered
// under the same name. If registration fails otherwise, c stays unregistered
// and still counts.
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

func (m *metrics) observe(kind string, rep Report, err error) {
	m.items.WithLabelValues(kind, "scanned").Add(float64(rep.ItemsScanned))
	m.items.WithLabelValues(kind, "deleted").Add(float64(rep.ItemsDeleted))
	m.items.WithLabelValues(kind, "removed").Add(float64(rep.AttrsRemoved))
	m.items.WithLabelValues(kind, "rewritten").Add(float64(rep.LateRewritten + rep.FastRewritten))
	m.items.WithLabelValues(kind, "refused").Add(float64(rep.Refused))
	m.items.WithLabelValues(kind, "superseded").Add(float64(rep.Superseded))
	m.totals.WithLabelValues("rewritten").Add(float64(rep.TotalsRewritten))
	m.totals.WithLabelValues("deleted").Add(float64(rep.TotalsDeleted))
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.runs.WithLabelValues(kind, result).Inc()
	m.seconds.WithLabelValues(kind).Observe(rep.Duration.Seconds())
}
