package lease

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a lease's Prometheus metrics, carrying the lease key as a
// constant label.
type metrics struct {
	renewals  prometheus.Counter // renewals that succeeded
	failures  prometheus.Counter // renewal attempts that failed (and were retried, or lost the lease)
	takeovers prometheus.Counter // leases this process took over from a holder that stopped renewing
	lost      prometheus.Counter // leases this process lost (taken over, or not renewed in time)
}

func newMetrics(r prometheus.Registerer, key string) (*metrics, error) {
	cl := prometheus.Labels{"lease": key}
	m := &metrics{
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "renewals_total", ConstLabels: cl,
			Help: "Lease renewals that succeeded.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "renewal_failures_total", ConstLabels: cl,
			Help: "Lease renewal attempts that failed (retried within the lease's validity, or the lease is lost).",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "takeovers_total", ConstLabels: cl,
			Help: "Leases taken over from a holder whose counter did not move for one lease duration.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "lost_total", ConstLabels: cl,
			Help: "Leases this process lost: taken over by another process, or not renewed within their validity; it must stop writing.",
		}),
	}
	if r == nil {
		return m, nil
	}
	for _, p := range []*prometheus.Counter{&m.renewals, &m.failures, &m.takeovers, &m.lost} {
		if err := r.Register(*p); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("lease: register metrics: %w", err)
			}
			existing, ok := are.ExistingCollector.(prometheus.Counter)
			if !ok {
				return nil, fmt.Errorf("lease: register metrics: %w", err)
			}
			*p = existing
		}
	}
	return m, nil
}

// workerMetrics are a multi-worker job's lease metrics (Worker and its
// Claims), carrying the job as a constant label. Their names differ from
// the job lease's, whose constant label is the lease key.
type workerMetrics struct {
	takes     *prometheus.CounterVec // leases taken, by kind and how (free, takeover, handoff, lapsed, new)
	renewals  *prometheus.CounterVec // renewals that succeeded, by kind
	failures  *prometheus.CounterVec // renewal attempts that failed, by kind
	lost      *prometheus.CounterVec // claims lost (taken over, or not renewed in time), by kind
	releases  *prometheus.CounterVec // claims released (or retired), by kind
	refused   *prometheus.CounterVec // writes refused because the item changed since it was read, by operation
	asks      prometheus.Counter     // handoffs this worker asked for
	cancelled prometheus.Counter     // handoff requests this worker removed (lapsed, or from a worker no longer live)
	malformed prometheus.Gauge       // items of the job the last scan left out because they cannot be decoded
}

func newWorkerMetrics(r prometheus.Registerer, job string) (*workerMetrics, error) {
	cl := prometheus.Labels{"job": job}
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: name, ConstLabels: cl, Help: help,
		}, labels)
	}
	m := &workerMetrics{
		takes:    vec("claim_takes_total", "Range, slot and recount leases this worker took, by how: free, takeover (after watching a dead holder), handoff (asked for), lapsed (a handoff reservation that lapsed), new (a slot never taken before).", "kind", "how"),
		renewals: vec("claim_renewals_total", "Renewals of range, slot and recount leases that succeeded.", "kind"),
		failures: vec("claim_renewal_failures_total", "Renewal attempts of range, slot and recount leases that failed (retried within the lease's validity, or the lease is lost).", "kind"),
		lost:     vec("claim_lost_total", "Range, slot and recount leases this worker lost: taken over, or not renewed within their validity; it must stop writing under them.", "kind"),
		releases: vec("claim_releases_total", "Range, slot and recount leases this worker released or retired.", "kind"),
		refused:  vec("refused_writes_total", "Lease-table writes refused because another worker changed the item since it was read (a lost race, not an error).", "op"),
		asks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "handoff_asks_total", ConstLabels: cl,
			Help: "Handoffs of a range this worker asked its holder for (the balancer's steal).",
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "handoff_cancels_total", ConstLabels: cl,
			Help: "Handoff requests this worker removed: its own that lapsed, or asked of it by a worker no longer live.",
		}),
		malformed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "adclick", Subsystem: "lease", Name: "malformed_items", ConstLabels: cl,
			Help: "Lease items of the job that the last scan left out because they cannot be decoded: nobody takes them until an operator repairs them (each is logged once).",
		}),
	}
	if r == nil {
		return m, nil
	}
	reg := func(c prometheus.Collector) (prometheus.Collector, error) {
		err := r.Register(c)
		if err == nil {
			return c, nil
		}
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
		return are.ExistingCollector, nil
	}
	for _, p := range []**prometheus.CounterVec{&m.takes, &m.renewals, &m.failures, &m.lost, &m.releases, &m.refused} {
		c, err := reg(*p)
		if err != nil {
			return nil, err
		}
		v, ok := c.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("lease: register metrics: %T is registered under the name of a counter vector", c)
		}
		*p = v
	}
	for _, p := range []*prometheus.Counter{&m.asks, &m.cancelled} {
		c, err := reg(*p)
		if err != nil {
			return nil, err
		}
		v, ok := c.(prometheus.Counter)
		if !ok {
			return nil, fmt.Errorf("lease: register metrics: %T is registered under the name of a counter", c)
		}
		*p = v
	}
	c, err := reg(m.malformed)
	if err != nil {
		return nil, err
	}
	g, ok := c.(prometheus.Gauge)
	if !ok {
		return nil, fmt.Errorf("lease: register metrics: %T is registered under the name of a gauge", c)
	}
	m.malformed = g
	return m, nil
}
