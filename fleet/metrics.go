package fleet

import "github.com/prometheus/client_golang/prometheus"

// metrics are a worker's own (its range pipelines register theirs in their
// own registries, see Fleet.Gatherer).
type metrics struct {
	held       prometheus.Gauge
	target     prometheus.Gauge
	workers    prometheus.Gauge
	starts     prometheus.Counter
	handoffs   prometheus.Counter
	failures   prometheus.Counter
	lost       prometheus.Counter
	scanErrors prometheus.Counter
}

func newMetrics(r prometheus.Registerer, job string) *metrics {
	l := prometheus.Labels{"job": job}
	m := &metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_fleet_ranges_held", ConstLabels: l,
			Help: "Key-group ranges this worker runs a pipeline for."}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_fleet_ranges_target", ConstLabels: l,
			Help: "The balancer's share per worker: ceil(active ranges / live workers)."}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_fleet_workers", ConstLabels: l,
			Help: "Live workers of the job as this worker's last read of the lease table counted them."}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_fleet_range_starts_total", ConstLabels: l,
			Help: "Ranges this worker took and started (each restores the range's latest checkpoint and flushes the range)."}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_fleet_handoffs_total", ConstLabels: l,
			Help: "Ranges this worker handed over to a worker that asked (a final checkpoint, then a release)."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_fleet_range_failures_total", ConstLabels: l,
			Help: "Range pipelines that ended with an error (their lease released for another round)."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_fleet_ranges_lost_total", ConstLabels: l,
			Help: "Ranges this worker lost while running them: its lease lapsed (a pause, DynamoDB out of reach) or another worker took it over."}),
		scanErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_fleet_scan_errors_total", ConstLabels: l,
			Help: "Reads of the lease table that failed (the round is skipped)."}),
	}
	if r != nil {
		r.MustRegister(m.held, m.target, m.workers, m.starts, m.handoffs, m.failures, m.lost, m.scanErrors)
	}
	return m
}
