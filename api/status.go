package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/runtime"
)

// StatusResponse answers GET /v1/status. Times are given twice: as RFC 3339
// (UTC, ms) and as Unix ms; null means "none yet" or, for what the server
// reads from the job's metrics, "this job does not report it".
type StatusResponse struct {
	JobGen      int64  `json:"job_gen"`
	Parallelism int    `json:"parallelism"`
	Source      string `json:"source"`
	Ready       bool   `json:"ready"`
	Done        bool   `json:"done"`
	// RestoredCheckpoint is the checkpoint or savepoint the job started
	// from (0 = empty state).
	RestoredCheckpoint int64   `json:"restored_checkpoint"`
	ProcessingTime     *string `json:"processing_time"`
	ProcessingMs       *int64  `json:"processing_ms"`
	// Watermark is the job watermark: the minimum over the active shards.
	Watermark   *string `json:"watermark"`
	WatermarkMs *int64  `json:"watermark_ms"`
	// DataCompleteThrough is the event time up to which every minute is
	// complete: the watermark's own millisecond is the last one covered.
	DataCompleteThrough *string `json:"data_complete_through"`
	// WatermarkLagSeconds is processing time minus the watermark.
	WatermarkLagSeconds *float64        `json:"watermark_lag_seconds"`
	Records             int64           `json:"records"`
	Invalid             int64           `json:"invalid"`
	Shards              []ShardStatus   `json:"shards"`
	LastCheckpoint      *CheckpointInfo `json:"last_checkpoint"`
	Flush               *FlushReport    `json:"flush,omitempty"`
	// AllIdle is true when the job has shards and every one not read to
	// its end is idle: the watermark holds until one of them reads again.
	AllIdle bool `json:"all_idle"`
	// Hints are one-line explanations of conditions an operator should
	// know about (all shards idle, checkpoints failing, a store down).
	Hints []string `json:"hints"`
	// Verdicts counts the clicks read since the process started, by
	// verdict (counted, late, duplicate, beyond_horizon, guard_expired,
	// invalid); null when the job reports no metrics to the server.
	Verdicts map[string]int64 `json:"verdicts"`
	// LateRate is the late clicks of about the last minute; null until the
	// server has two samples of the counts.
	LateRate    *LateRate        `json:"late_rate"`
	Checkpoints CheckpointCounts `json:"checkpoints"`
	Sinks       SinkHealth       `json:"sinks"`
	Billing     Billing          `json:"billing"`
}

// ShardStatus is one shard's reader.
type ShardStatus struct {
	ID           string  `json:"id"`
	Watermark    *string `json:"watermark"`
	WatermarkMs  *int64  `json:"watermark_ms"`
	MaxEventMs   *int64  `json:"max_event_ms"`
	LastRecordMs *int64  `json:"last_record_ms"`
	// Idle shards are left out of the job watermark.
	Idle   bool `json:"idle"`
	Closed bool `json:"closed"`
	// Reader is what the shard's reader last reported: caught_up, behind,
	// throttled or failing (unknown for a source that reports nothing).
	// Only a caught-up shard may be idle; a throttled one holds the job
	// watermark.
	Reader string `json:"reader"`
	// ConsumerLagMs is how far the reader is behind the stream's tip
	// (Kinesis MillisBehindLatest); null when the source does not say.
	ConsumerLagMs *int64 `json:"consumer_lag_ms"`
}

// CheckpointInfo is the last completed checkpoint.
type CheckpointInfo struct {
	ID          int64  `json:"id"`
	JobGen      int64  `json:"job_gen"`
	TakenAt     string `json:"taken_at"`
	TakenAtMs   int64  `json:"taken_at_ms"`
	DurationMs  int64  `json:"duration_ms"`
	SizeBytes   int64  `json:"size_bytes"`
	Parallelism int    `json:"parallelism"`
	Final       bool   `json:"final"`
	// Watermark is the job watermark the checkpoint holds: what the
	// recount may rely on.
	Watermark   *string `json:"watermark"`
	WatermarkMs *int64  `json:"watermark_ms"`
	// AgeMs is the job's processing time minus TakenAtMs (processing time
	// is the wall clock, or a replay's virtual clock); null before the
	// first record.
	AgeMs *int64 `json:"age_ms"`
}

// LateRate is the late clicks over the last LateRateWindowMs of samples.
type LateRate struct {
	// WindowSeconds is the span measured (at most a minute).
	WindowSeconds float64 `json:"window_seconds"`
	// LatePerSecond is late clicks per second over the window.
	LatePerSecond float64 `json:"late_per_second"`
	// Fraction is late / (counted + late) over the window: the share of
	// valid clicks that arrived after their window closed; null when no
	// valid click came in the window.
	Fraction *float64 `json:"fraction"`
}

// CheckpointCounts are the checkpoint attempts since the process started
// (adclick_checkpoints_total); each null when the job does not report it.
type CheckpointCounts struct {
	Completed *int64 `json:"completed"`
	Failed    *int64 `json:"failed"`
	// FailedSinceLast is the failed attempts since the server last saw a
	// checkpoint complete: above 0, checkpoints are being retried now.
	FailedSinceLast *int64 `json:"failed_since_last"`
}

// SinkHealth is what the job's metrics say about its stores; each field
// is null when the job does not report it (a store it does not use).
type SinkHealth struct {
	// RowWrites are the row writes sent to the ad_metrics store.
	RowWrites *int64 `json:"row_writes"`
	// Retries are write batches sent again while the row store was
	// unavailable (throttling, 5xx, timeouts).
	Retries *int64 `json:"retries"`
	// RefusedWrites are row writes refused by their condition (a closed
	// row, an older job_gen); the recount repairs them.
	RefusedWrites *int64 `json:"refused_writes"`
	// DynamoThrottles are DynamoDB requests refused by throttling (each
	// retried by the adapter).
	DynamoThrottles *int64 `json:"dynamo_throttles"`
	// TotalsStoreUp is whether the running-total store accepts writes.
	TotalsStoreUp *bool `json:"totals_store_up"`
	// TotalsErrors are failed running-total writes.
	TotalsErrors *int64 `json:"totals_errors"`
	// ValkeyUp is whether Valkey answers (with a Valkey totals store).
	ValkeyUp *bool `json:"valkey_up"`
}

// Billing is what the server knows about which hours are billable. Only
// an hour row whose status is final (the recount wrote final_*) is
// billable; the server does not read every row to list those, so it
// reports what decides them instead.
type Billing struct {
	// ClosedThrough is the last hour whose end the job watermark has
	// passed: its rows are provisional until the recount makes them final.
	ClosedThrough *string `json:"closed_through"`
	// OpenFrom is the hour holding the watermark: it and later hours are
	// open.
	OpenFrom *string `json:"open_from"`
	// HorizonMs is the job's acceptance horizon, from the last checkpoint's
	// settings; null before the first checkpoint.
	HorizonMs *int64 `json:"horizon_ms"`
	// MarginMs is the recount's default safety margin.
	MarginMs int64 `json:"margin_ms"`
	// ReadyThrough is the last hour the recount may finalise now: hour end
	// + horizon + margin <= the last checkpoint's watermark. Null when no
	// hour is ready or the horizon is not known.
	ReadyThrough *string `json:"ready_through"`
	// RecountedThrough is the last hour the recount reported
	// (adclick_recount_last_hour_ms); null when the recount reports no
	// metrics to this server, which is then not in a position to say how
	// far it got.
	RecountedThrough *string `json:"recounted_through"`
	// HoursFinalised is the hours the recount made final since the process
	// started (adclick_recount_hours_total{outcome="final"}); null when the
	// recount reports no metrics to this server.
	HoursFinalised *int64 `json:"hours_finalised"`
	// Notes say in words what the server does not know.
	Notes []string `json:"notes"`
}

// The hints of StatusResponse.Hints.
const (
	hintAllIdle = "all shards idle: the watermark cannot advance"
)

func (s *Server) statusOf(st runtime.Status, jm jobMetrics) StatusResponse {
	r := StatusResponse{JobGen: st.JobGen, Parallelism: st.Parallelism, Source: st.Source, Ready: st.Ready,
		Done: st.Done, RestoredCheckpoint: st.Restored, Records: st.Records, Invalid: st.Invalid,
		Shards: []ShardStatus{}, Hints: []string{}, Verdicts: jm.verdicts}
	if st.Flush != nil {
		f := flushReport(*st.Flush)
		r.Flush = &f
	}
	if st.ProcessingMs != 0 {
		r.ProcessingTime, r.ProcessingMs = timeOrNil(st.ProcessingMs), msOrNil(st.ProcessingMs)
	}
	r.Watermark, r.WatermarkMs = timeOrNil(st.WatermarkMs), msOrNil(st.WatermarkMs)
	r.DataCompleteThrough = r.Watermark
	if r.WatermarkMs != nil && st.WatermarkLagMs != math.MaxInt64 {
		lag := float64(st.WatermarkLagMs) / 1000
		r.WatermarkLagSeconds = &lag
	}
	var lags map[string]int64
	if cl, ok := s.job.(ConsumerLagger); ok {
		lags = cl.ConsumerLagMs()
	}
	idle, open := 0, 0
	for _, sh := range st.Shards {
		ss := ShardStatus{ID: sh.ID, Watermark: timeOrNil(sh.Watermark), WatermarkMs: msOrNil(sh.Watermark),
			MaxEventMs: msOrNil(sh.MaxEventMs), LastRecordMs: msOrNil(sh.LastRecordMs), Idle: sh.Idle, Closed: sh.Closed,
			Reader: sh.Reader.String()}
		if l, ok := lags[sh.ID]; ok {
			ss.ConsumerLagMs = &l
		}
		r.Shards = append(r.Shards, ss)
		if !sh.Closed {
			open++
			if sh.Idle {
				idle++
			}
		}
	}
	if open > 0 && idle == open && !st.Done {
		r.AllIdle = true
		r.Hints = append(r.Hints, hintAllIdle)
	}
	if c := st.LastCheckpoint; c != nil {
		r.LastCheckpoint = &CheckpointInfo{ID: c.ID, JobGen: c.JobGen, TakenAt: fmtTime(c.TakenAtMs), TakenAtMs: c.TakenAtMs,
			DurationMs: c.DurationMs, SizeBytes: c.SizeBytes, Parallelism: c.Parallelism, Final: c.Final,
			Watermark: timeOrNil(c.Watermark), WatermarkMs: msOrNil(c.Watermark)}
		if st.ProcessingMs != 0 {
			age := max(st.ProcessingMs-c.TakenAtMs, 0)
			r.LastCheckpoint.AgeMs = &age
		}
	}
	r.Checkpoints = CheckpointCounts{Completed: jm.ckptCompleted, Failed: jm.ckptFailed}
	if jm.ckptFailed != nil {
		n := max(*jm.ckptFailed-s.ckpts.failedAtLast(), 0)
		r.Checkpoints.FailedSinceLast = &n
		if n > 0 {
			since := "the server started"
			if c := st.LastCheckpoint; c != nil {
				since = "checkpoint " + strconv.FormatInt(c.ID, 10)
			}
			r.Hints = append(r.Hints, "checkpoints are failing: "+strconv.FormatInt(n, 10)+" failed attempts since "+since+
				" (retried with backoff; the job exits once they fail for longer than its checkpoint timeout)")
		}
	}
	r.Sinks = SinkHealth{RowWrites: jm.sinkWrites, Retries: jm.sinkRetries, RefusedWrites: jm.sinkRefused,
		DynamoThrottles: jm.dynamoThrottles, TotalsStoreUp: jm.totalsUp, TotalsErrors: jm.totalsErrors, ValkeyUp: jm.valkeyUp}
	switch {
	case jm.valkeyUp != nil && !*jm.valkeyUp:
		r.Hints = append(r.Hints, "Valkey does not answer: counting goes on, dashboards are stale until it does")
	case jm.totalsUp != nil && !*jm.totalsUp:
		r.Hints = append(r.Hints, "the running-total store refuses writes: counting goes on, dashboards are stale until it accepts them")
	}
	r.Billing = billingOf(st, jm)
	return r
}

// billingOf reports which hours are closed, open and ready for the
// recount under the job watermark and the last checkpoint.
func billingOf(st runtime.Status, jm jobMetrics) Billing {
	b := Billing{MarginMs: recount.DefaultMarginMs, Notes: []string{}}
	if st.WatermarkMs != eventtime.NoWatermark {
		open := eventtime.Start(st.WatermarkMs+1, hourMs)
		b.OpenFrom = hourOrNil(open)
		b.ClosedThrough = hourOrNil(open - hourMs)
	}
	if c := st.LastCheckpoint; c != nil {
		if h, ok := c.Setting("horizon_ms"); ok {
			b.HorizonMs = &h
			if c.Watermark != eventtime.NoWatermark {
				// The last hour h with h + 1 h + horizon + margin <= watermark.
				b.ReadyThrough = hourOrNil(eventtime.Start(c.Watermark-h-recount.DefaultMarginMs-hourMs, hourMs))
			}
		}
	}
	if b.HorizonMs == nil {
		b.Notes = append(b.Notes, "the acceptance horizon is not known before the first checkpoint, so neither is which hours the recount may finalise")
	}
	b.HoursFinalised = jm.recountFinalHours
	const perRow = "which hours are final is known per row (status final in GET /v1/ads/{ad}/hours/{hour} or /v1/hours/{hour}), or from adclick reconcile"
	switch {
	case jm.recountLastHourMs == nil:
		b.Notes = append(b.Notes, "the recount reports no progress to this server (it runs outside this job, as adclick recount): "+perRow)
	case *jm.recountLastHourMs <= 0:
		b.Notes = append(b.Notes, "the recount has not recounted an hour since the job started: "+perRow)
	default:
		b.RecountedThrough = hourOrNil(*jm.recountLastHourMs)
	}
	return b
}

// hourOrNil formats the hour starting at ms, or returns nil for a time
// before 1970 (no such hour yet).
func hourOrNil(ms int64) *string {
	if ms < 0 {
		return nil
	}
	v := fmtHour(ms)
	return &v
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	st := s.job.Status()
	jm := s.jobMetrics()
	s.ckpts.see(st.LastCheckpoint, jm.ckptFailed)
	r := s.statusOf(st, jm)
	r.LateRate = lateRate(s.hist.samples(), sampleOf(s.opts.Clock.NowMs(), st, jm))
	writeJSON(w, http.StatusOK, r)
}

// Sample is one point of the status history: when it was taken (wall
// clock, Unix ms), the job watermark and the watermark lag (null before the
// first watermark), and the counts of counted and late clicks since the
// process started (null when the job reports no metrics).
type Sample struct {
	AtMs        int64  `json:"at_ms"`
	WatermarkMs *int64 `json:"watermark_ms"`
	LagMs       *int64 `json:"lag_ms"`
	Counted     *int64 `json:"counted"`
	Late        *int64 `json:"late"`
}

func sampleOf(atMs int64, st runtime.Status, jm jobMetrics) Sample {
	s := Sample{AtMs: atMs, WatermarkMs: msOrNil(st.WatermarkMs)}
	if s.WatermarkMs != nil {
		s.LagMs = msOrNil(st.WatermarkLagMs)
	}
	if c, ok := jm.verdicts[latepath.VerdictCounted]; ok {
		s.Counted = &c
	}
	if l, ok := jm.verdicts[latepath.VerdictLate]; ok {
		s.Late = &l
	}
	return s
}

// LateRateWindowMs is the span GET /v1/status measures the late rate over.
const LateRateWindowMs = 60_000

// lateRate measures the late clicks from the oldest sample of the last
// LateRateWindowMs to now; nil without two samples of the counts at least
// a second apart.
func lateRate(hist []Sample, now Sample) *LateRate {
	if now.Late == nil || now.Counted == nil {
		return nil
	}
	var from *Sample
	for i := range hist {
		h := &hist[i]
		if h.Late != nil && h.Counted != nil && h.AtMs >= now.AtMs-LateRateWindowMs && now.AtMs-h.AtMs >= 1000 {
			from = h
			break
		}
	}
	if from == nil {
		return nil
	}
	secs := float64(now.AtMs-from.AtMs) / 1000
	late := max(*now.Late-*from.Late, 0) // counters restart with the process
	counted := max(*now.Counted-*from.Counted, 0)
	r := &LateRate{WindowSeconds: secs, LatePerSecond: float64(late) / secs}
	if late+counted > 0 {
		f := float64(late) / float64(late+counted)
		r.Fraction = &f
	}
	return r
}

// history is a ring buffer of samples, safe for concurrent use.
type history struct {
	mu   sync.Mutex
	buf  []Sample
	next int
	full bool
}

func newHistory(n int) *history { return &history{buf: make([]Sample, n)} }

func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf[h.next] = s
	h.next = (h.next + 1) % len(h.buf)
	if h.next == 0 {
		h.full = true
	}
}

// samples returns the samples, oldest first.
func (h *history) samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]Sample{}, h.buf[:h.next]...)
	}
	out := make([]Sample, 0, len(h.buf))
	out = append(out, h.buf[h.next:]...)
	return append(out, h.buf[:h.next]...)
}

// CheckpointRecord is a completed checkpoint the server's sampler saw.
type CheckpointRecord struct {
	ID         int64  `json:"id"`
	TakenAt    string `json:"taken_at"`
	TakenAtMs  int64  `json:"taken_at_ms"`
	DurationMs int64  `json:"duration_ms"`
	SizeBytes  int64  `json:"size_bytes"`
	Final      bool   `json:"final"`
	// FailedBefore is the failed attempts counted between the previous
	// checkpoint seen and this one; null when the job reports no metrics.
	FailedBefore *int64 `json:"failed_before"`
}

// ckptLogSize is the number of checkpoints the server remembers.
const ckptLogSize = 20

// ckptLog remembers the last checkpoints the sampler saw, newest last,
// and the failed-attempt count when it saw the newest. Safe for
// concurrent use.
type ckptLog struct {
	mu       sync.Mutex
	recs     []CheckpointRecord
	size     int
	lastID   int64
	failedAt *int64 // the failed count when the newest was seen
}

func newCkptLog(n int) *ckptLog { return &ckptLog{size: n} }

// see records m if it is a checkpoint not seen before.
func (l *ckptLog) see(m *runtime.Meta, failed *int64) {
	if m == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m.ID == l.lastID && len(l.recs) > 0 {
		return
	}
	rec := CheckpointRecord{ID: m.ID, TakenAt: fmtTime(m.TakenAtMs), TakenAtMs: m.TakenAtMs, DurationMs: m.DurationMs,
		SizeBytes: m.SizeBytes, Final: m.Final}
	if failed != nil {
		n := *failed
		if l.failedAt != nil {
			n -= *l.failedAt
		}
		rec.FailedBefore = &n
		f := *failed
		l.failedAt = &f
	}
	l.lastID = m.ID
	l.recs = append(l.recs, rec)
	if len(l.recs) > l.size {
		l.recs = append(l.recs[:0], l.recs[len(l.recs)-l.size:]...)
	}
}

// failedAtLast returns the failed count when the newest checkpoint was
// seen, or 0 if none was (or without metrics then).
func (l *ckptLog) failedAtLast() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failedAt == nil {
		return 0
	}
	return *l.failedAt
}

// records returns the checkpoints seen, oldest first.
func (l *ckptLog) records() []CheckpointRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]CheckpointRecord{}, l.recs...)
}

// HistoryResponse answers GET /v1/status/history: the samples behind the
// status page's charts, oldest first, and the last checkpoints the server
// saw complete (at most 20), oldest first.
type HistoryResponse struct {
	Samples     []Sample           `json:"samples"`
	Checkpoints []CheckpointRecord `json:"checkpoints"`
}

func (s *Server) history(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, HistoryResponse{Samples: s.hist.samples(), Checkpoints: s.ckpts.records()})
}
