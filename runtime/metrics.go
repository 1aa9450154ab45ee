package runtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/preagg"
)

// metrics are the runtime's Prometheus metrics.
type metrics struct {
	records      *prometheus.CounterVec
	counted      prometheus.Counter
	late         prometheus.Counter
	duplicate    prometheus.Counter
	beyond       prometheus.Counter
	invalid      prometheus.Counter
	watermark    prometheus.Gauge
	watermarkLag prometheus.Gauge
	ckptDuration prometheus.Histogram
	ckpts        *prometheus.CounterVec
	ckptSize     prometheus.Gauge
	lastCkptID   prometheus.Gauge
	rowsWritten  prometheus.Counter
	refused      prometheus.Counter
	totalsErrors prometheus.Counter
	restoreSecs  prometheus.Gauge
}

func newMetrics(r prometheus.Registerer) *metrics {
	records := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_clicks_total", Help: "Clicks read, by verdict (counted, late, duplicate, beyond_horizon, invalid)."}, []string{"verdict"})
	m := &metrics{
		records:      records,
		counted:      records.WithLabelValues("counted"),
		late:         records.WithLabelValues("late"),
		duplicate:    records.WithLabelValues("duplicate"),
		beyond:       records.WithLabelValues("beyond_horizon"),
		invalid:      records.WithLabelValues("invalid"),
		watermark:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_watermark_ms", Help: "The job watermark, Unix ms."}),
		watermarkLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_watermark_lag_seconds", Help: "Processing time minus the job watermark (data_complete_through lag)."}),
		ckptDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "adclick_checkpoint_duration_seconds", Help: "Time from barrier injection to a completed checkpoint.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		ckpts:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_checkpoints_total", Help: "Checkpoints by result (completed, failed)."}, []string{"result"}),
		ckptSize:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_size_bytes", Help: "Size of the last completed checkpoint."}),
		lastCkptID:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_last_id", Help: "Id of the last completed checkpoint."}),
		rowsWritten:  prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_sink_writes_total", Help: "Row writes sent to the ad_metrics store."}),
		refused:      prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_sink_refused_writes_total", Help: "Row writes refused by their condition (closed row or job_gen); the recount repairs them."}),
		totalsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_totals_errors_total", Help: "Failed running-total writes; dashboards are stale until the store answers and totals are rewritten from state."}),
		restoreSecs:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_restore_flush_seconds", Help: "Duration of the last restore and full flush."}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.records, m.watermark, m.watermarkLag, m.ckptDuration, m.ckpts, m.ckptSize, m.lastCkptID, m.rowsWritten, m.refused, m.totalsErrors, m.restoreSecs} {
			r.MustRegister(c)
		}
	}
	return m
}

func (m *metrics) verdict(v preagg.Verdict) {
	switch v {
	case preagg.Counted:
		m.counted.Inc()
	case preagg.Late:
		m.late.Inc()
	case preagg.Duplicate:
		m.duplicate.Inc()
	case preagg.BeyondHorizon:
		m.beyond.Inc()
	}
}
