package api

import (
	dto "github.com/prometheus/client_model/go"
)

// The job's metrics the status reads (registered by runtime, sink and
// recount on the registry the job shares with the server).
const (
	metricClicks          = "adclick_clicks_total"              // {verdict}
	metricCheckpoints     = "adclick_checkpoints_total"         // {result}: completed, failed
	metricSinkWrites      = "adclick_sink_writes_total"         // {writer}
	metricSinkRetries     = "adclick_sink_retries_total"        // {writer}
	metricSinkRefused     = "adclick_sink_refused_writes_total" // {writer, reason}
	metricDynamoThrottles = "adclick_dynamo_throttles_total"
	metricTotalsUp        = "adclick_totals_store_up"
	metricTotalsErrors    = "adclick_totals_errors_total"
	metricValkeyUp        = "adclick_valkey_up"
	metricRecountLastHour = "adclick_recount_last_hour_ms"
	metricRecountHours    = "adclick_recount_hours_total" // {outcome}: final, not_final, checked
)

// jobMetrics is what the status reads of the job's metrics. A nil field
// (or map) is a metric the job does not have: no Options.Gatherer, or a
// store the job does not use.
type jobMetrics struct {
	verdicts                             map[string]int64
	ckptCompleted, ckptFailed            *int64
	sinkWrites, sinkRetries, sinkRefused *int64
	dynamoThrottles                      *int64
	totalsUp                             *bool
	totalsErrors                         *int64
	valkeyUp                             *bool
	recountLastHourMs                    *int64
	recountFinalHours                    *int64
}

// jobMetrics gathers Options.Gatherer once and picks out the job's
// metrics. A failed gather leaves out what it could not collect.
func (s *Server) jobMetrics() jobMetrics {
	var jm jobMetrics
	if s.opts.Gatherer == nil {
		return jm
	}
	mfs, _ := s.opts.Gatherer.Gather() // what was gathered is still good
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	if mf := byName[metricClicks]; mf != nil {
		jm.verdicts = map[string]int64{}
		for _, m := range mf.GetMetric() {
			jm.verdicts[label(m, "verdict")] += int64(value(m))
		}
	}
	if mf := byName[metricCheckpoints]; mf != nil {
		jm.ckptCompleted, jm.ckptFailed = new(int64), new(int64)
		for _, m := range mf.GetMetric() {
			switch label(m, "result") {
			case "completed":
				*jm.ckptCompleted += int64(value(m))
			case "failed":
				*jm.ckptFailed += int64(value(m))
			}
		}
	}
	jm.sinkWrites = sum(byName[metricSinkWrites])
	jm.sinkRetries = sum(byName[metricSinkRetries])
	jm.sinkRefused = sum(byName[metricSinkRefused])
	jm.dynamoThrottles = sum(byName[metricDynamoThrottles])
	jm.totalsErrors = sum(byName[metricTotalsErrors])
	jm.totalsUp = up(byName[metricTotalsUp])
	jm.valkeyUp = up(byName[metricValkeyUp])
	if mf := byName[metricRecountLastHour]; mf != nil && len(mf.GetMetric()) > 0 {
		v := int64(value(mf.GetMetric()[0]))
		jm.recountLastHourMs = &v
	}
	if mf := byName[metricRecountHours]; mf != nil {
		n := int64(0)
		for _, m := range mf.GetMetric() {
			if label(m, "outcome") == "final" {
				n += int64(value(m))
			}
		}
		jm.recountFinalHours = &n
	}
	return jm
}

// value is a counter's, gauge's or untyped metric's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds up every series of a family; nil when the family is absent.
func sum(mf *dto.MetricFamily) *int64 {
	if mf == nil {
		return nil
	}
	var n int64
	for _, m := range mf.GetMetric() {
		n += int64(value(m))
	}
	return &n
}

// up reads a 0/1 gauge: true only if every series is 1 (one per store
// when several are registered); nil when the family is absent.
func up(mf *dto.MetricFamily) *bool {
	if mf == nil || len(mf.GetMetric()) == 0 {
		return nil
	}
	v := true
	for _, m := range mf.GetMetric() {
		v = v && value(m) == 1
	}
	return &v
}
