package api

import (
	"errors"
	"github.com/adclick/adclick/eventtime"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/adclick/adclick/sink"
)

// TopAd is an ad's running total summed over the current minutes.
type TopAd struct {
	Ad          string `json:"ad"`
	Valid       int64  `json:"valid"`
	SpendMicros int64  `json:"spend_micros"`
	Minutes     int    `json:"minutes"`
}

// TopResponse answers GET /v1/top-ads.
type TopResponse struct {
	// Since is the first minute summed: the minute before the one holding
	// the watermark, so the last closed minute and every open one count.
	// Null before the first watermark (every recent minute counts).
	Since *string `json:"since"`
	// Epochs are the epochs whose written totals were examined.
	Epochs []int64 `json:"epochs"`
	// KeysExamined counts the running totals read.
	KeysExamined int `json:"keys_examined"`
	// Truncated is true when more keys were written than the server
	// examines (Options.TopKeys); the ranking is then approximate.
	Truncated bool    `json:"truncated"`
	Ads       []TopAd `json:"ads"`
}

type topCache struct {
	mu    sync.Mutex
	atMs  int64
	limit int
	resp  *TopResponse
}

var errEnough = errors.New("api: enough keys")

// topAds serves GET /v1/top-ads?limit=N (default 10, at most MaxTopAds).
//
// The totals store has no ranking, so the server lists the keys written in
// the last few epochs (the totals the job rewrote in the last checkpoint
// intervals, about a minute of processing time), keeps the minute totals
// from Since on, reads each (at most Options.TopKeys) and sums them by ad.
// Answers are reused for Options.TopCacheFor, so many open status pages cost
// the store no more than one.
func (s *Server) topAds(w http.ResponseWriter, r *http.Request) {
	limit := 10
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTopAds {
			writeError(w, errorf(http.StatusBadRequest, codeBadRequest, "limit %q: want an integer from 1 to %d", v, MaxTopAds))
			return
		}
		limit = n
	}
	totals := s.job.Totals()
	if totals == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "this job has no running-total store"))
		return
	}
	now := s.opts.Clock.NowMs()
	s.top.mu.Lock()
	defer s.top.mu.Unlock()
	if c := s.top.resp; c != nil && s.top.limit == limit && now-s.top.atMs < s.opts.TopCacheFor.Milliseconds() && now >= s.top.atMs {
		writeJSON(w, http.StatusOK, c)
		return
	}
	st := s.job.Status()
	hi := st.Restored
	if st.LastCheckpoint != nil {
		hi = max(hi, st.LastCheckpoint.ID)
	}
	resp := &TopResponse{Epochs: []int64{}, Ads: []TopAd{}}
	since := int64(-1 << 62)
	if st.WatermarkMs != eventtime.NoWatermark {
		since = eventtime.Start(st.WatermarkMs, minuteMs) - minuteMs
		m := fmtMinute(since)
		resp.Since = &m
	}
	ctx := r.Context()
	keys := map[sink.TotalKey]struct{}{}
	for e := max(hi-1, 0); e <= hi+1; e++ {
		resp.Epochs = append(resp.Epochs, e)
		err := totals.TotalsWritten(ctx, e, func(k sink.TotalKey) error {
			if k.Hour || k.StartMs < since {
				return nil
			}
			if _, ok := keys[k]; !ok && len(keys) >= s.opts.TopKeys {
				resp.Truncated = true
				return errEnough
			}
			keys[k] = struct{}{}
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			writeError(w, storeError("list running totals", err))
			return
		}
		if resp.Truncated {
			break
		}
	}
	byAd := map[string]*TopAd{}
	for k := range keys {
		t, ok, err := totals.GetTotal(ctx, k)
		if err != nil {
			writeError(w, storeError("read running total", err))
			return
		}
		resp.KeysExamined++
		if !ok {
			continue
		}
		a := byAd[k.Ad]
		if a == nil {
			a = &TopAd{Ad: k.Ad}
			byAd[k.Ad] = a
		}
		a.Valid += t.Valid
		a.SpendMicros += t.SpendMicros
		a.Minutes++
	}
	for _, a := range byAd {
		resp.Ads = append(resp.Ads, *a)
	}
	sort.Slice(resp.Ads, func(i, j int) bool {
		a, b := resp.Ads[i], resp.Ads[j]
		if a.Valid != b.Valid {
			return a.Valid > b.Valid
		}
		if a.SpendMicros != b.SpendMicros {
			return a.SpendMicros > b.SpendMicros
		}
		return a.Ad < b.Ad
	})
	if len(resp.Ads) > limit {
		resp.Ads = resp.Ads[:limit]
	}
	s.top.atMs, s.top.limit, s.top.resp = now, limit, resp
	writeJSON(w, http.StatusOK, resp)
}
