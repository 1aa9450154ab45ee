package api

import (
	"math"
	"net/http"
	"sync"

	"github.com/adclick/adclick/runtime"
)

// StatusResponse answers GET /v1/status. Times are given twice: as RFC 3339
// (UTC, ms) and as Unix ms; null means "none yet".
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
}

func (s *Server) statusOf(st runtime.Status) StatusResponse {
	r := StatusResponse{JobGen: st.JobGen, Parallelism: st.Parallelism, Source: st.Source, Ready: st.Ready,
		Done: st.Done, RestoredCheckpoint: st.Restored, Records: st.Records, Invalid: st.Invalid,
		Shards: []ShardStatus{}}
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
	for _, sh := range st.Shards {
		ss := ShardStatus{ID: sh.ID, Watermark: timeOrNil(sh.Watermark), WatermarkMs: msOrNil(sh.Watermark),
			MaxEventMs: msOrNil(sh.MaxEventMs), LastRecordMs: msOrNil(sh.LastRecordMs), Idle: sh.Idle, Closed: sh.Closed}
		if l, ok := lags[sh.ID]; ok {
			ss.ConsumerLagMs = &l
		}
		r.Shards = append(r.Shards, ss)
	}
	if c := st.LastCheckpoint; c != nil {
		r.LastCheckpoint = &CheckpointInfo{ID: c.ID, JobGen: c.JobGen, TakenAt: fmtTime(c.TakenAtMs), TakenAtMs: c.TakenAtMs,
			DurationMs: c.DurationMs, SizeBytes: c.SizeBytes, Parallelism: c.Parallelism, Final: c.Final}
	}
	return r
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.statusOf(s.job.Status()))
}

// Sample is one point of the status history: when it was taken (wall
// clock, Unix ms), the job watermark and the watermark lag (null before the
// first watermark).
type Sample struct {
	AtMs        int64  `json:"at_ms"`
	WatermarkMs *int64 `json:"watermark_ms"`
	LagMs       *int64 `json:"lag_ms"`
}

func sampleOf(atMs int64, st runtime.Status) Sample {
	s := Sample{AtMs: atMs, WatermarkMs: msOrNil(st.WatermarkMs)}
	if s.WatermarkMs != nil {
		s.LagMs = msOrNil(st.WatermarkLagMs)
	}
	return s
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

// HistoryResponse answers GET /v1/status/history.
type HistoryResponse struct {
	Samples []Sample `json:"samples"`
}

func (s *Server) history(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, HistoryResponse{Samples: s.hist.samples()})
}
