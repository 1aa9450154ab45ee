package runtime

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/state"
)

// metrics are the runtime's Prometheus metrics. Every known label
// combination is created at start, so an absent series never hides a
// problem from an alert.
type metrics struct {
	records        *prometheus.CounterVec
	counted        prometheus.Counter
	late           prometheus.Counter
	duplicate      prometheus.Counter
	beyond         prometheus.Counter
	guard          prometheus.Counter
	invalid        prometheus.Counter
	notOwned       prometheus.Counter
	lateness       prometheus.Histogram
	partials       prometheus.Counter
	firings        *prometheus.CounterVec
	watermark      prometheus.Gauge
	watermarkLag   prometheus.Gauge
	shardWatermark *prometheus.GaugeVec
	shardIdle      *prometheus.GaugeVec
	ckptDuration   prometheus.Histogram
	ckpts          *prometheus.CounterVec
	ckptSize       prometheus.Gauge
	ckptUploaded   prometheus.Gauge
	lastCkptID     prometheus.Gauge
	lastCkptTime   prometheus.Gauge
	writes         *prometheus.CounterVec
	refused        *prometheus.CounterVec
	sinkRetries    *prometheus.CounterVec
	totalsErrors   prometheus.Counter
	totalsUp       prometheus.Gauge
	restores       prometheus.Counter
	sweeps         *prometheus.CounterVec
	sweepsOwed     prometheus.Gauge
	restoreSecs    prometheus.Gauge
	blocked        *prometheus.CounterVec
	dedupBytes     *prometheus.GaugeVec
	dedupVain      prometheus.Counter
	dedupGets      prometheus.Counter
	dedupFolds     prometheus.Counter
}

func newMetrics(r prometheus.Registerer) *metrics {
	records := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_clicks_total", Help: "Clicks read, by verdict (counted, late, duplicate, beyond_horizon, guard_expired, invalid)."}, []string{"verdict"})
	m := &metrics{
		records:   records,
		counted:   records.WithLabelValues(preagg.Counted.String()),
		late:      records.WithLabelValues(preagg.Late.String()),
		duplicate: records.WithLabelValues(preagg.Duplicate.String()),
		beyond:    records.WithLabelValues(preagg.BeyondHorizon.String()),
		guard:     records.WithLabelValues(preagg.GuardExpired.String()),
		invalid:   records.WithLabelValues(latepath.VerdictInvalid),
		notOwned: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_clicks_not_owned_total",
			Help: "Records read whose ad belongs to another key-group range: they moved the watermark and were left to their range (0 for a job owning every key group)."}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "adclick_lateness_seconds",
			Help:    "How late late clicks were: the judge time (max of floor and watermark) minus the click's event time.",
			Buckets: []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 7200}}),
		partials: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_preagg_partials_total", Help: "Partial sums forwarded by the pre-aggregators."}),
		firings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_window_firings_total",
			Help: "Window output: closed minutes (minute), hour roll-up rows (hour) and early running totals (early)."}, []string{"kind"}),
		watermark:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_watermark_seconds", Help: "The job watermark, Unix seconds (0 before the first)."}),
		watermarkLag:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_watermark_lag_seconds", Help: "Processing time minus the job watermark (data_complete_through lag)."}),
		shardWatermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_shard_watermark_seconds", Help: "Each shard's watermark, Unix seconds (0 before its first)."}, []string{"shard"}),
		shardIdle:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_shard_idle", Help: "1 while a shard is idle (left out of the watermark minimum)."}, []string{"shard"}),
		ckptDuration:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "adclick_checkpoint_duration_seconds", Help: "Time from barrier injection to a completed checkpoint.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		ckpts:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_checkpoints_total", Help: "Checkpoints by result (completed, failed)."}, []string{"result"}),
		ckptSize:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_size_bytes", Help: "Size of the last completed checkpoint."}),
		ckptUploaded:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_uploaded_bytes", Help: "Bytes the last checkpoint added to checkpoint storage (incremental)."}),
		lastCkptID:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_last_id", Help: "Id of the last completed checkpoint."}),
		lastCkptTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_checkpoint_last_completed_timestamp_seconds",
			Help: "When the last checkpoint completed, Unix seconds of the wall clock (0 before the first of this process); time() minus it is the checkpoint age."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_sink_writes_total", Help: "Row writes sent to the ad_metrics store, by writer."}, []string{"writer"}),
		sinkRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_sink_retries_total",
			Help: "Row write batches sent again while the row store was unavailable (waited out up to --sink-outage-ms), by writer."}, []string{"writer"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_sink_refused_writes_total",
			Help: "Row writes refused by their condition (closed row or job_gen), by writer; the recount repairs them."}, []string{"writer", "reason"}),
		totalsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_totals_errors_total", Help: "Failed running-total writes; dashboards are stale until the store answers and totals are rewritten from state."}),
		totalsUp:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_totals_store_up", Help: "1 while the running-total store accepts writes."}),
		restores:     prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_restores_total", Help: "Starts from a checkpoint or savepoint (each followed by the full flush)."}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_fence_sweeps_total",
			Help: "Fence sweeps of a taken-over predecessor's epochs, by result (done, failed: retried at the next checkpoint)."}, []string{"result"}),
		sweepsOwed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_fence_sweeps_owed",
			Help: "Fence sweeps this range still owes (recorded in its lease item), due or waiting for the signature window."}),
		restoreSecs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_restore_flush_seconds", Help: "Duration of the last restore and full flush."}),
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_backpressure_seconds_total",
			Help: "Time senders spent blocked on a full channel (backpressure), by stage."}, []string{"stage"}),
		dedupBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_dedup_filter_bytes",
			Help: "Memory of each pre-aggregator's dedup filters (bounded by --dedup-memory-mb), as of its last checkpoint."}, []string{"subtask"}),
		dedupVain: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_dedup_vain_lookups_total",
			Help: "New click ids a dedup filter could not answer (a false positive: looked up in the state store in vain); rises when the filters are folded to fit their budget."}),
		dedupGets: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_dedup_state_gets_total", Help: "Point lookups of click ids in the state store."}),
		dedupFolds: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_dedup_filter_folds_total",
			Help: "Dedup filters halved to stay within --dedup-memory-mb."}),
	}
	for _, k := range []string{"minute", "hour", "early"} {
		m.firings.WithLabelValues(k)
	}
	for _, w := range sink.TaggedWriters {
		m.writes.WithLabelValues(w.String())
		m.refused.WithLabelValues(w.String(), "condition")
		m.sinkRetries.WithLabelValues(w.String())
	}
	for _, s := range []string{"source", "preagg"} {
		m.blocked.WithLabelValues(s)
	}
	m.totalsUp.Set(1)
	if r != nil {
		for _, c := range []prometheus.Collector{m.records, m.notOwned, m.lateness, m.partials, m.firings, m.watermark, m.watermarkLag,
			m.shardWatermark, m.shardIdle, m.ckptDuration, m.ckpts, m.ckptSize, m.ckptUploaded, m.lastCkptID, m.lastCkptTime, m.writes,
			m.refused, m.sinkRetries, m.totalsErrors, m.totalsUp, m.restores, m.sweeps, m.sweepsOwed, m.restoreSecs, m.blocked,
			m.dedupBytes, m.dedupVain, m.dedupGets, m.dedupFolds} {
			r.MustRegister(c)
		}
	}
	m.ckpts.WithLabelValues("completed")
	m.ckpts.WithLabelValues("failed")
	m.sweeps.WithLabelValues("done")
	m.sweeps.WithLabelValues("failed")
	return m
}

// dedup publishes a pre-aggregator's dedup counters: now since was
// published last.
func (m *metrics) dedup(subtask int, now, since state.DedupStats) {
	m.dedupBytes.WithLabelValues(strconv.Itoa(subtask)).Set(float64(now.FilterBytes))
	m.dedupVain.Add(float64(now.VainLookups - since.VainLookups))
	m.dedupGets.Add(float64(now.Gets - since.Gets))
	m.dedupFolds.Add(float64(now.Folds - since.Folds))
}

// verdict counts n verdicts v.
func (m *metrics) verdict(v preagg.Verdict, n int) {
	if n == 0 {
		return
	}
	var c prometheus.Counter
	switch v {
	case preagg.Counted:
		c = m.counted
	case preagg.Late:
		c = m.late
	case preagg.Duplicate:
		c = m.duplicate
	case preagg.BeyondHorizon:
		c = m.beyond
	case preagg.GuardExpired:
		c = m.guard
	default:
		return
	}
	c.Add(float64(n))
}
