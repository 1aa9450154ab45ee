package kinesis

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the source's Prometheus metrics.
type metrics struct {
	records  prometheus.Counter
	bad      prometheus.Counter
	calls    prometheus.Counter
	throttle prometheus.Counter
	expired  prometheus.Counter
	errs     prometheus.Counter
	behind   *prometheus.GaugeVec
	// Per shard: throttles, and whether the reader is throttled now.
	shardThrottles *prometheus.CounterVec
	shardThrottled *prometheus.GaugeVec
	shards         prometheus.Gauge

	// Enhanced fan-out.
	subs   prometheus.Counter
	resubs prometheus.Counter
	inUse  prometheus.Counter
	events prometheus.Counter
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_records_total",
			Help: "User records (after KPL de-aggregation) handed to the job by the Kinesis source."}),
		bad: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_bad_aggregates_total",
			Help: "KPL aggregated records with a bad checksum or body."}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_getrecords_calls_total",
			Help: "GetRecords calls made by the shard readers."}),
		throttle: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_throttles_total",
			Help: "Kinesis calls refused for throughput (ProvisionedThroughputExceeded, LimitExceeded)."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_expired_iterators_total",
			Help: "Shard iterators that expired and were re-acquired."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_errors_total",
			Help: "Failed Kinesis calls other than throttling and expired iterators."}),
		behind: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_kinesis_millis_behind_latest",
			Help: "Consumer lag: MillisBehindLatest of the shard's last GetRecords call or subscription event, ms."}, []string{"shard"}),
		shardThrottles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adclick_kinesis_shard_throttles_total",
			Help: "Reads of the shard refused for throughput (GetRecords or SubscribeToShard)."}, []string{"shard"}),
		shardThrottled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adclick_kinesis_shard_throttled",
			Help: "1 while the shard's last read was refused for throughput: the shard holds the watermark (it is not idle) until its reader catches up."}, []string{"shard"}),
		shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "adclick_kinesis_shards_reading",
			Help: "Shards with a running reader."}),
		subs: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_subscriptions_total",
			Help: "SubscribeToShard subscriptions started (enhanced fan-out)."}),
		resubs: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_resubscriptions_total",
			Help: "Subscriptions that renew an earlier one on the same shard: after its 5-minute lifetime, a takeover or an error."}),
		inUse: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_subscriptions_in_use_total",
			Help: "ResourceInUseException on subscriptions: refused (another one within 5 s) or taken over; retried."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "adclick_kinesis_subscription_events_total",
			Help: "SubscribeToShard events received."}),
	}
	if r == nil {
		return m
	}
	m.records = register(r, m.records)
	m.bad = register(r, m.bad)
	m.calls = register(r, m.calls)
	m.throttle = register(r, m.throttle)
	m.expired = register(r, m.expired)
	m.errs = register(r, m.errs)
	m.behind = register(r, m.behind)
	m.shardThrottles = register(r, m.shardThrottles)
	m.shardThrottled = register(r, m.shardThrottled)
	m.shards = register(r, m.shards)
	m.subs = register(r, m.subs)
	m.resubs = register(r, m.resubs)
	m.inUse = register(r, m.inUse)
	m.events = register(r, m.events)
	return m
}

// register registers c, or returns the collector already registered under
// its name (a source opened again with the same registerer).
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
