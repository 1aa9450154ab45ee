package recount

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the recount's Prometheus metrics. Safe for concurrent use.
type metrics struct {
	hours      *prometheus.CounterVec
	rowsRead   prometheus.Counter
	lastHour   prometheus.Gauge
	reconcile  *prometheus.GaugeVec
	unbalanced prometheus.Gauge
	refused    prometheus.Counter
	// heldHours and heldClicks: the hours held (not finalised) because
	// they do not balance, and each one's unexplained clicks, labelled by
	// hour for at most maxHeldLabels hours.
	heldHours  prometheus.Gauge
	heldClicks *prometheus.GaugeVec
	mu         sync.Mutex
	held       map[int64]bool
}

// maxHeldLabels bounds the hour labels of adclick_recount_unbalanced_hour_clicks.
const maxHeldLabels = 48

// setHeld records whether res's hour is held.
func (m *metrics) setHeld(res *HourResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[int64]bool{}
	}
	switch res.Status {
	case "held":
		if !m.held[res.HourMs] && len(m.held) < maxHeldLabels {
			m.heldClicks.WithLabelValues(res.Hour).Set(float64(res.Unexplained))
		} else if m.held[res.HourMs] {
			m.heldClicks.WithLabelValues(res.Hour).Set(float64(res.Unexplained))
		}
		m.held[res.HourMs] = true
	case "final":
		delete(m.held, res.HourMs)
		m.heldClicks.DeleteLabelValues(res.Hour)
	}
	m.heldHours.Set(float64(len(m.held)))
}

// newMetrics returns the metrics, registered with r. A metric already
// registered with r by an earlier recount (the same name, help and labels)
// is shared, so that every recount of a process adds to the same series.
func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		hours: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_recount_hours_total",
			Help: "Hours recounted, by outcome: final (written), not_final (refused: not ready), checked (reconciled without writing), held (not written: it does not balance)."}, []string{"outcome"}),
		rowsRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_recount_rows_read_total",
			Help: "Lake rows read by the recount (including neighbour hours read for de-duplication)."}),
		lastHour: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_recount_last_hour_ms",
			Help: "Start (Unix ms) of the last hour recounted."}),
		reconcile: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_reconcile_clicks",
			Help: "Reconciliation of the last hour recounted, summed over its ads: fast, late, final, a (counted by the stream, rejected by the recount), b (accepted by the recount, not counted by the stream), unexplained (final - (fast + late - a + b))."},
			[]string{"result"}),
		unbalanced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_reconcile_unbalanced_ads",
			Help: "Ads of the last hour recounted whose reconciliation does not balance."}),
		heldHours: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_recount_unbalanced_hours",
			Help: "Hours the recount holds provisional (no final_* written) because their reconciliation leaves an unexplained difference."}),
		heldClicks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_recount_unbalanced_hour_clicks",
			Help: "Unexplained clicks (final - (fast + late - a + b)) of each held hour, by hour (at most 48 hours labelled)."}, []string{"hour"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_recount_final_refused_total",
			Help: "final_* writes refused because a newer generation had already written the row."}),
	}
	var errs []error
	m.hours = register(r, m.hours, &errs)
	m.rowsRead = register(r, m.rowsRead, &errs)
	m.lastHour = register(r, m.lastHour, &errs)
	m.reconcile = register(r, m.reconcile, &errs)
	m.unbalanced = register(r, m.unbalanced, &errs)
	m.refused = register(r, m.refused, &errs)
	m.heldHours = register(r, m.heldHours, &errs)
	m.heldClicks = register(r, m.heldClicks, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("recount: register metrics: %w", err)
	}
	for _, out := range []string{"final", "not_final", "checked", "held"} {
		m.hours.WithLabelValues(out)
	}
	for _, res := range []string{"fast", "late", "final", "a", "b", "unexplained"} {
		m.reconcile.WithLabelValues(res)
	}
	return m, nil
}

// register registers c with r, or returns the collector registered there
// before under the same description. Any other failure is appended to errs.
func register[C prometheus.Collector](r prometheus.Registerer, c C, errs *[]error) C {
	err := r.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errs = append(*errs, err)
	return c
}
