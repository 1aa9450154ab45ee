package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/runtime"
)

// SweepRequest is the body of POST /v1/sweeps: remove what generation Gen
// wrote since savepoint Since (epochs Since..High; High 0 = the job's
// default).
type SweepRequest struct {
	Gen   *int64 `json:"gen"`
	Since *int64 `json:"since"`
	High  int64  `json:"high,omitempty"`
}

// StopRequest is the body of POST /v1/stop (optional; default no savepoint).
type StopRequest struct {
	Savepoint bool `json:"savepoint"`
}

// SavepointInfo describes a completed checkpoint or savepoint.
type SavepointInfo struct {
	ID          int64   `json:"id"`
	JobGen      int64   `json:"job_gen"`
	TakenAt     string  `json:"taken_at"`
	TakenAtMs   int64   `json:"taken_at_ms"`
	DurationMs  int64   `json:"duration_ms"`
	SizeBytes   int64   `json:"size_bytes"`
	Parallelism int     `json:"parallelism"`
	Watermark   *string `json:"watermark"`
	WatermarkMs *int64  `json:"watermark_ms"`
	Restored    int64   `json:"restored"`
	Final       bool    `json:"final"`
	// Path is where the savepoint is kept; empty when none was kept.
	Path string `json:"path,omitempty"`
}

func savepointInfo(m runtime.Meta, path string) SavepointInfo {
	return SavepointInfo{ID: m.ID, JobGen: m.JobGen, TakenAt: fmtTime(m.TakenAtMs), TakenAtMs: m.TakenAtMs,
		DurationMs: m.DurationMs, SizeBytes: m.SizeBytes, Parallelism: m.Parallelism,
		Watermark: timeOrNil(m.Watermark), WatermarkMs: msOrNil(m.Watermark), Restored: m.Restored, Final: m.Final, Path: path}
}

// StopResponse answers POST /v1/stop.
type StopResponse struct {
	Stopped bool `json:"stopped"`
	// Checkpoint is the final checkpoint; its Path is set when a savepoint
	// of it was kept.
	Checkpoint SavepointInfo `json:"checkpoint"`
}

// FlushReport is what a flush or sweep did (flush.Report in JSON).
type FlushReport struct {
	Epochs          int     `json:"epochs"`
	ItemsScanned    int     `json:"items_scanned"`
	ItemsDeleted    int     `json:"items_deleted"`
	AttrsRemoved    int     `json:"attrs_removed"`
	LateRewritten   int     `json:"late_rewritten"`
	FastRewritten   int     `json:"fast_rewritten"`
	TotalsRewritten int     `json:"totals_rewritten"`
	TotalsDeleted   int     `json:"totals_deleted"`
	Refused         int     `json:"refused"`
	Fenced          int     `json:"fenced"`
	DurationSeconds float64 `json:"duration_seconds"`
}

func flushReport(r flush.Report) FlushReport {
	return FlushReport{Epochs: r.Epochs, ItemsScanned: r.ItemsScanned, ItemsDeleted: r.ItemsDeleted, AttrsRemoved: r.AttrsRemoved,
		LateRewritten: r.LateRewritten, FastRewritten: r.FastRewritten, TotalsRewritten: r.TotalsRewritten, TotalsDeleted: r.TotalsDeleted,
		Refused: r.Refused, Fenced: r.Fenced, DurationSeconds: r.Duration.Seconds()}
}

// SweepResponse answers POST /v1/sweeps.
type SweepResponse struct {
	Gen    int64       `json:"gen"`
	Since  int64       `json:"since"`
	High   int64       `json:"high"`
	Report FlushReport `json:"report"`
}

// decodeBody reads a JSON body of at most MaxBodyBytes into v, refusing
// unknown fields and trailing data. An empty body is accepted when
// allowEmpty is set (v keeps its zero value).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) *apiError {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "request body is larger than %d bytes", MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, codeBadRequest, "read request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if allowEmpty {
			return nil
		}
		return errorf(http.StatusBadRequest, codeBadRequest, "missing JSON request body")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, codeBadRequest, "request body: %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, codeBadRequest, "request body: data after the JSON object")
	}
	return nil
}

// jobError maps an error of an operator action.
func jobError(action string, err error) *apiError {
	switch {
	case errors.Is(err, runtime.ErrNotRunning):
		return errorf(http.StatusConflict, codeConflict, "%s: the job is not running", action)
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusGatewayTimeout, codeTimeout, "%s: %v", action, err)
	}
	return errorf(http.StatusInternalServerError, codeInternal, "%s: %v", action, err)
}

func (s *Server) opContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.OperatorTimeout)
}

// savepoint serves POST /v1/savepoints (no body).
func (s *Server) savepoint(w http.ResponseWriter, r *http.Request) {
	var none struct{}
	if e := decodeBody(w, r, &none, true); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	m, path, err := s.job.Savepoint(ctx)
	if err != nil {
		s.opts.Logger.Warn("savepoint failed", "err", err)
		writeError(w, jobError("savepoint", err))
		return
	}
	s.opts.Logger.Info("savepoint taken", "id", m.ID, "path", path)
	writeJSON(w, http.StatusCreated, savepointInfo(m, path))
}

// sweep serves POST /v1/sweeps.
func (s *Server) sweep(w http.ResponseWriter, r *http.Request) {
	var req SweepRequest
	if e := decodeBody(w, r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Gen == nil || *req.Gen < 1:
		writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "gen: want the old version's job generation, an integer >= 1"))
		return
	case req.Since == nil || *req.Since < 0:
		writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "since: want the savepoint id the new version started from, an integer >= 0"))
		return
	case req.High < 0 || (req.High > 0 && req.High < *req.Since):
		writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "high: want 0 (the job's default) or an epoch >= since (%d)", *req.Since))
		return
	}
	if g := s.job.Status().JobGen; *req.Gen >= g {
		writeError(w, errorf(http.StatusConflict, codeConflict, "sweep of generation %d refused: it is not older than this job's generation %d", *req.Gen, g))
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	rep, err := s.job.Sweep(ctx, *req.Gen, *req.Since, req.High)
	if err != nil {
		s.opts.Logger.Warn("sweep failed", "gen", *req.Gen, "since", *req.Since, "err", err)
		writeError(w, jobError("sweep", err))
		return
	}
	s.opts.Logger.Info("sweep done", "gen", *req.Gen, "since", *req.Since, "report", rep)
	writeJSON(w, http.StatusOK, SweepResponse{Gen: *req.Gen, Since: *req.Since, High: req.High, Report: flushReport(rep)})
}

// stop serves POST /v1/stop.
func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	var req StopRequest
	if e := decodeBody(w, r, &req, true); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := s.opContext(r)
	defer cancel()
	m, path, err := s.job.Stop(ctx, req.Savepoint)
	if err != nil {
		s.opts.Logger.Warn("stop failed", "err", err)
		writeError(w, jobError("stop", err))
		return
	}
	s.opts.Logger.Info("stopped by operator", "checkpoint", m.ID, "savepoint", path)
	writeJSON(w, http.StatusOK, StopResponse{Stopped: true, Checkpoint: savepointInfo(m, path)})
}
