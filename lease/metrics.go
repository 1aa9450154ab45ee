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
