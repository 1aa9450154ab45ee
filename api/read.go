package api

import (
	"context"
	"encoding/base64"
	"errors"
	"github.com/adclick/adclick/eventtime"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/sink"
)

// Hour and minute statuses. Only StatusFinal is billable.
const (
	// StatusOpen: the hour (or minute) is not over by the job watermark;
	// its numbers still grow.
	StatusOpen = "open"
	// StatusProvisional: closed by the watermark, but the recount has not
	// written final_* yet; late clicks may still add to late_*.
	StatusProvisional = "provisional"
	// StatusFinal: the recount wrote final_*; the row is billable.
	StatusFinal = "final"
)

// Part is one tagged writer's attributes on a row (fast_* or late_*).
type Part struct {
	Valid       int64 `json:"valid"`
	SpendMicros int64 `json:"spend_micros"`
	Ckpt        int64 `json:"ckpt"`
	Gen         int64 `json:"gen"`
}

// FinalPart is the recount's attributes on an hour row.
type FinalPart struct {
	Valid       int64  `json:"valid"`
	SpendMicros int64  `json:"spend_micros"`
	Gen         int64  `json:"gen"`
	At          string `json:"at"`
	AtMs        int64  `json:"at_ms"`
}

// Sum is a pair of counters.
type Sum struct {
	Valid       int64 `json:"valid"`
	SpendMicros int64 `json:"spend_micros"`
}

// HourRow is the billing view of an ad's hour row. Stream is fast + late,
// the stream's own answer; Final is the recount's, and the only billable
// number.
type HourRow struct {
	Ad       string     `json:"ad"`
	Hour     string     `json:"hour"`
	StartMs  int64      `json:"start_ms"`
	Status   string     `json:"status"`
	Billable bool       `json:"billable"`
	Fast     *Part      `json:"fast"`
	Late     *Part      `json:"late"`
	Final    *FinalPart `json:"final"`
	Stream   Sum        `json:"stream"`
	JobGen   *int64     `json:"job_gen"`
}

// MinuteTotal is an ad's running total for one minute.
type MinuteTotal struct {
	Minute      string `json:"minute"`
	StartMs     int64  `json:"start_ms"`
	Valid       int64  `json:"valid"`
	SpendMicros int64  `json:"spend_micros"`
	// Status is open (the minute is not over by the watermark), provisional
	// (over, but its hour is not final) or final (its hour row is final).
	Status string `json:"status"`
	// Provisional is true until the minute's hour is final.
	Provisional bool `json:"provisional"`
}

// MinutesResponse answers GET /v1/ads/{ad}/minutes. Minutes without a
// running total (no clicks) are absent.
type MinutesResponse struct {
	Ad      string        `json:"ad"`
	From    string        `json:"from"`
	To      string        `json:"to"`
	Minutes []MinuteTotal `json:"minutes"`
}

// HourPage answers GET /v1/hours/{hour}: one page of the hour's rows in ad
// order. NextCursor is empty on the last page.
type HourPage struct {
	Hour       string    `json:"hour"`
	Rows       []HourRow `json:"rows"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// adParam returns the {ad} path parameter, unescaped and checked with
// checkAd.
func adParam(r *http.Request) (string, *apiError) {
	ad := chi.URLParam(r, "ad")
	if r.URL.RawPath != "" {
		u, err := url.PathUnescape(ad)
		if err != nil {
			return "", errorf(http.StatusBadRequest, codeBadAd, "ad id is not a valid path segment")
		}
		ad = u
	}
	if e := checkAd(ad); e != nil {
		return "", e
	}
	return ad, nil
}

// checkAd accepts exactly the ad ids that ingest accepts as a click's ad_id
// (ingest.Decode and Click.Validate): 1 to ingest.MaxIDBytes bytes of valid
// UTF-8, any characters, control characters included. A row can exist
// under every such id, so the API must be able to name it; an id outside
// the rule can have no row, and is bad input (400 bad_ad).
// TestAdIDRuleMatchesIngest compares the two rules.
// checkAd applies ingest's rule for ad ids (ingest.CheckID): the API
// serves every id the job can have counted.
func checkAd(ad string) *apiError {
	switch ingest.CheckID("ad_id", ad) {
	case "":
		return nil
	case ingest.MissingField("ad_id"):
		return errorf(http.StatusBadRequest, codeBadAd, "empty ad id")
	case ingest.IDTooLong("ad_id"):
		return errorf(http.StatusBadRequest, codeBadAd, "ad id is %d bytes, longer than %d", len(ad), MaxAdBytes)
	default:
		return errorf(http.StatusBadRequest, codeBadAd, "ad id is not valid UTF-8")
	}
}

func hourParam(r *http.Request) (int64, *apiError) {
	h := chi.URLParam(r, "hour")
	if r.URL.RawPath != "" {
		if u, err := url.PathUnescape(h); err == nil {
			h = u
		}
	}
	ms, err := parseHour(h)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, codeBadTime, "hour: %v", err)
	}
	return ms, nil
}

// closed reports whether the window [start, start+size) is over by the
// watermark: the watermark has reached its last millisecond.
func closed(start, size, wm int64) bool {
	return eventtime.Closed(start, size, wm)
}

// hourStatus is the status of an hour row under watermark wm.
func hourStatus(it *sink.Item, startMs, wm int64) string {
	switch {
	case it != nil && it.Final.Present:
		return StatusFinal
	case closed(startMs, hourMs, wm):
		return StatusProvisional
	}
	return StatusOpen
}

func hourRow(it sink.Item, startMs, wm int64) HourRow {
	row := HourRow{Ad: it.Entity, Hour: fmtHour(startMs), StartMs: startMs, Status: hourStatus(&it, startMs, wm)}
	row.Billable = row.Status == StatusFinal
	if it.Fast.Present {
		row.Fast = &Part{Valid: it.Fast.Valid, SpendMicros: it.Fast.SpendMicros, Ckpt: it.Fast.Ckpt, Gen: it.Fast.Gen}
		row.Stream.Valid += it.Fast.Valid
		row.Stream.SpendMicros += it.Fast.SpendMicros
	}
	if it.Late.Present {
		row.Late = &Part{Valid: it.Late.Valid, SpendMicros: it.Late.SpendMicros, Ckpt: it.Late.Ckpt, Gen: it.Late.Gen}
		row.Stream.Valid += it.Late.Valid
		row.Stream.SpendMicros += it.Late.SpendMicros
	}
	if it.Final.Present {
		row.Final = &FinalPart{Valid: it.Final.Valid, SpendMicros: it.Final.SpendMicros, Gen: it.Final.Gen,
			At: fmtTime(it.Final.AtMs), AtMs: it.Final.AtMs}
	}
	if it.HasJobGen {
		g := it.JobGen
		row.JobGen = &g
	}
	return row
}

// storeError maps a store failure to 503 (or 504 when the request's time
// ran out).
func storeError(what string, err error) *apiError {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errorf(http.StatusGatewayTimeout, codeTimeout, "%s: %v", what, err)
	}
	return errorf(http.StatusServiceUnavailable, codeUnavailable, "%s: %v", what, err)
}

// minutes serves GET /v1/ads/{ad}/minutes?from=&to=: the running totals of
// the minutes that start in [from, to). Cost: one GetTotal per minute in
// the range (at most MaxMinutes) and one row Get per hour it spans.
func (s *Server) minutes(w http.ResponseWriter, r *http.Request) {
	ad, e := adParam(r)
	if e != nil {
		writeError(w, e)
		return
	}
	q := r.URL.Query()
	var bounds [2]int64
	for i, name := range []string{"from", "to"} {
		v := q.Get(name)
		if v == "" {
			writeError(w, errorf(http.StatusBadRequest, codeBadTime, "missing query parameter %q (RFC 3339, or a minute such as 2026-11-29T10:14Z)", name))
			return
		}
		ms, err := parseTime(v)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, codeBadTime, "%s: %v", name, err))
			return
		}
		bounds[i] = ms
	}
	from, to := bounds[0], bounds[1]
	if to <= from {
		writeError(w, errorf(http.StatusBadRequest, codeBadTime, "to (%s) must be after from (%s)", fmtTime(to), fmtTime(from)))
		return
	}
	first := eventtime.Start(from+minuteMs-1, minuteMs) // first minute starting at or after from
	if n := eventtime.FloorDiv(to-first+minuteMs-1, minuteMs); n > MaxMinutes {
		writeError(w, errorf(http.StatusBadRequest, codeRangeTooLarge, "range covers %d minutes, more than %d", n, MaxMinutes))
		return
	}
	totals := s.job.Totals()
	if totals == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "this job has no running-total store"))
		return
	}
	ctx := r.Context()
	wm := s.job.Status().WatermarkMs
	resp := MinutesResponse{Ad: ad, From: fmtTime(from), To: fmtTime(to), Minutes: []MinuteTotal{}}
	finalHours := map[int64]bool{}
	for m := first; m < to; m += minuteMs {
		t, ok, err := totals.GetTotal(ctx, sink.TotalKey{Ad: ad, StartMs: m})
		if err != nil {
			writeError(w, storeError("read running total", err))
			return
		}
		if !ok {
			continue
		}
		h := eventtime.Start(m, hourMs)
		fin, seen := finalHours[h]
		if !seen {
			it, ok, err := s.job.Rows().Get(ctx, sink.Key{Entity: ad, Bucket: sink.HourBucket(h)})
			if err != nil {
				writeError(w, storeError("read hour row", err))
				return
			}
			fin = ok && it.Final.Present
			finalHours[h] = fin
		}
		mt := MinuteTotal{Minute: fmtMinute(m), StartMs: m, Valid: t.Valid, SpendMicros: t.SpendMicros}
		switch {
		case fin:
			mt.Status = StatusFinal
		case closed(m, minuteMs, wm):
			mt.Status = StatusProvisional
		default:
			mt.Status = StatusOpen
		}
		mt.Provisional = !fin
		resp.Minutes = append(resp.Minutes, mt)
	}
	if len(resp.Minutes) == 0 {
		writeError(w, errorf(http.StatusNotFound, codeUnknownAd, "no running totals for ad %q in [%s, %s)", ad, fmtTime(from), fmtTime(to)))
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// adHour serves GET /v1/ads/{ad}/hours/{hour}: one Get.
func (s *Server) adHour(w http.ResponseWriter, r *http.Request) {
	ad, e := adParam(r)
	if e != nil {
		writeError(w, e)
		return
	}
	h, e := hourParam(r)
	if e != nil {
		writeError(w, e)
		return
	}
	it, ok, err := s.job.Rows().Get(r.Context(), sink.Key{Entity: ad, Bucket: sink.HourBucket(h)})
	if err != nil {
		writeError(w, storeError("read hour row", err))
		return
	}
	if !ok {
		writeError(w, errorf(http.StatusNotFound, codeUnknownAd, "no row for ad %q in hour %s", ad, fmtHour(h)))
		return
	}
	writeJSON(w, http.StatusOK, hourRow(it, h, s.job.Status().WatermarkMs))
}

// hour serves GET /v1/hours/{hour}?cursor=&limit=: the hour's rows, in ad
// order, a page at a time.
//
// Cost: a read of the store's bucket index (sink.Rows.QueryBucket: on
// DynamoDB one query per shard of the by_bucket_shard global secondary
// index, 32, merged in ad order; in the embedded store its twin), for
// limit+1 rows after the cursor. A page reads its own rows and a few per
// shard past its end, whatever the size of the table.
func (s *Server) hour(w http.ResponseWriter, r *http.Request) {
	h, e := hourParam(r)
	if e != nil {
		writeError(w, e)
		return
	}
	q := r.URL.Query()
	limit := DefaultPageLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageLimit {
			writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "limit %q: want an integer from 1 to %d", v, MaxPageLimit))
			return
		}
		limit = n
	}
	after := ""
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) == 0 || len(b) > MaxAdBytes {
			writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "cursor %q is not a cursor this API returned", v))
			return
		}
		after = string(b)
	}
	items := make([]sink.Item, 0, min(limit+1, 64))
	err := s.job.Rows().QueryBucket(r.Context(), sink.HourBucket(h), after, limit+1, func(it sink.Item) error {
		items = append(items, it)
		return nil
	})
	if err != nil {
		writeError(w, storeError("query the hour's rows", err))
		return
	}
	resp := HourPage{Hour: fmtHour(h), Rows: []HourRow{}}
	if len(items) > limit {
		items = items[:limit]
		resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(items[limit-1].Entity))
	}
	wm := s.job.Status().WatermarkMs
	for _, it := range items {
		resp.Rows = append(resp.Rows, hourRow(it, h, wm))
	}
	writeJSON(w, http.StatusOK, resp)
}

// msOrNil returns a pointer to ms, or nil for "none" (NoWatermark,
// math.MinInt64, math.MaxInt64).
func msOrNil(ms int64) *int64 {
	if ms == math.MinInt64 || ms == math.MaxInt64 {
		return nil
	}
	return &ms
}

func timeOrNil(ms int64) *string {
	if ms == math.MinInt64 || ms == math.MaxInt64 {
		return nil
	}
	s := fmtTime(ms)
	return &s
}
