package embedded

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the store's Prometheus metrics.
type Metrics struct {
	// Writes counts applied item writes, by op (put, put_final, remove,
	// delete, expire, set_total, delete_total).
	Writes *prometheus.CounterVec
	// Refused counts writes refused by their condition, by op (put,
	// put_final, remove, delete).
	Refused *prometheus.CounterVec
	// IndexEntries counts tag-index entries, by change (added, removed).
	IndexEntries *prometheus.CounterVec
	// Syncs counts write-ahead-log syncs (one per mutating call).
	Syncs prometheus.Counter
}

// NewMetrics builds the metrics and registers them with r; nil r registers
// nothing. A collector already registered with r (a second store on the same
// registry) is reused.
func NewMetrics(r prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_embedded_writes_total",
			Help: "Item writes applied by the embedded row/total store, by operation.",
		}, []string{"op"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_embedded_refused_writes_total",
			Help: "Writes refused by their condition in the embedded store, by operation.",
		}, []string{"op"}),
		IndexEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "adclick_embedded_index_entries_total",
			Help: "Tag-index entries added and removed by the embedded store.",
		}, []string{"change"}),
		Syncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "adclick_embedded_wal_syncs_total",
			Help: "Write-ahead-log syncs of the embedded store (one per mutating call).",
		}),
	}
	if r == nil {
		return m, nil
	}
	var err error
	m.Writes, err = register(r, m.Writes)
	if err != nil {
		return nil, err
	}
	m.Refused, err = register(r, m.Refused)
	if err != nil {
		return nil, err
	}
	m.IndexEntries, err = register(r, m.IndexEntries)
	if err != nil {
		return nil, err
	}
	m.Syncs, err = register(r, m.Syncs)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("embedded: register metrics: %w", err)
	}
	return c, nil
}
