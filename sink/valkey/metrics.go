package valkey

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation labels of the metrics.
const (
	opSet    = "set"
	opGet    = "get"
	opList   = "list"
	opDelete = "delete"
	opForget = "forget"
	opPing   = "ping"
	opMarker = "marker"
)

type metrics struct {
	up     prometheus.Gauge
	errors *prometheus.CounterVec
	// staleRetries counts round trips sent again after a stale connection
	// failed.
	staleRetries *prometheus.CounterVec
	written      prometheus.Counter
	deleted      prometheus.Counter
	// refused counts totals a script refused: the key holds a higher
	// (gen, fence) than the write's.
	refused  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "adclick_valkey_up",
			Help: "1 if the last round trip to Valkey succeeded, 0 if it failed to reach the server.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_valkey_errors_total",
			Help: "Failed Valkey store calls, by operation.",
		}, []string{"op"}),
		staleRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_valkey_stale_retries_total",
			Help: "Round trips sent again because a pooled connection the server had closed (a restart) failed, by operation.",
		}, []string{"op"}),
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_valkey_totals_written_total",
			Help: "Running totals written to Valkey.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_valkey_totals_deleted_total",
			Help: "Running totals deleted from Valkey (by the flush).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_valkey_totals_refused_total",
			Help: "Running-total writes (op set) and deletes (op delete) refused because the total holds a higher (job_gen, fence): an older holder's late write.",
		}, []string{"op"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "adclick_valkey_call_duration_seconds",
			Help:    "Duration of Valkey store calls, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"op"}),
	}
	for _, op := range []string{opSet, opGet, opList, opDelete, opForget, opPing, opMarker} {
		m.errors.WithLabelValues(op)
	}
	for _, op := range []string{opSet, opGet, opList, opDelete, opForget, opPing, opMarker} {
		m.staleRetries.WithLabelValues(op)
	}
	m.refused.WithLabelValues(opSet)
	m.refused.WithLabelValues(opDelete)
	if r != nil {
		for _, c := range []prometheus.Collector{m.up, m.errors, m.staleRetries, m.written, m.deleted, m.refused, m.duration} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("valkey: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
