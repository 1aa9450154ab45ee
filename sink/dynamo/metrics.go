package dynamo

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Store's Prometheus metrics, labelled by operation (put,
// put_final, get, query, query_bucket, scan, remove, delete, create_table,
// describe_table, update_table, describe_ttl, update_ttl, get_fence_mark,
// raise_fence_mark) and carrying
// the table name as a constant label.
type metrics struct {
	writes    *prometheus.CounterVec   // writes applied
	refused   *prometheus.CounterVec   // writes refused by their condition
	retries   *prometheus.CounterVec   // requests sent again after a retryable error
	throttles *prometheus.CounterVec   // throttling errors received
	latency   *prometheus.HistogramVec // seconds per request attempt
}

func newMetrics(r prometheus.Registerer, table string) (*metrics, error) {
	cl := prometheus.Labels{"table": table}
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "dynamo", Name: "writes_total", ConstLabels: cl,
			Help: "Writes applied to the ad_metrics table, by operation.",
		}, []string{"op"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "dynamo", Name: "refused_writes_total", ConstLabels: cl,
			Help: "Writes refused by their condition (job_gen, closed row, final_gen, ckpt), by operation; never retried.",
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "dynamo", Name: "retries_total", ConstLabels: cl,
			Help: "Requests sent again after throttling, a 5xx response or a transport error, by operation.",
		}, []string{"op"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "dynamo", Name: "throttles_total", ConstLabels: cl,
			Help: "Throttling errors received, by operation.",
		}, []string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "adclick", Subsystem: "dynamo", Name: "request_duration_seconds", ConstLabels: cl,
			Help:    "Duration of one request attempt, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to about 8 s
		}, []string{"op"}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.writes, m.refused, m.retries, m.throttles, m.latency} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("dynamo: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
