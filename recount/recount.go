package recount

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
)

// Options configures Run. Zero fields take the defaults noted.
type Options struct {
	Store Store     // the lake; required
	Rows  sink.Rows // the ad_metrics rows; required
	// Hours are the starts (Unix ms, whole hours) of the hours to recount.
	Hours []int64
	// Gen is the recount's generation, written as final_gen: a row's final
	// attributes are replaced only by a generation at least as new.
	Gen int64
	// NowMs is written as final_at, Unix ms; 0 = the wall clock.
	NowMs int64
	// Watermark returns the job watermark (Unix ms) of the last completed
	// checkpoint: everything the job read before it is in the lake. Required
	// unless Force.
	Watermark func(ctx context.Context) (int64, error)
	// Force recounts hours that are not final yet.
	Force bool
	// Judge sets the horizon and allowance (defaults 2 h, 5 s).
	Judge Judge
	// MarginMs is added to hour end + horizon before an hour counts as
	// final; default 600,000 (10 min).
	MarginMs int64
	// AcceptUnbalanced, if set, says who accepts an unexplained difference
	// and why: an hour that does not balance is then finalised anyway, and
	// the acceptance is logged with the hour and the difference. Empty (the
	// default) holds such an hour: no final_* is written.
	AcceptUnbalanced string
	// NoWrite reconciles without writing final_* (adclick reconcile).
	NoWrite bool
	// MaxLoggedIDs bounds the click ids kept and logged per (ad, hour) for
	// A and for B; default 20.
	MaxLoggedIDs int
	// Logger receives one line per hour and per unbalanced or non-zero
	// A/B (ad, hour); nil = discard.
	Logger *slog.Logger
	// Progress, if set, is called as rows are read (every 65,536 rows and at
	// the end of each hour).
	Progress func(Progress)
	// Registerer, if set, registers the recount's metrics
	// (adclick_recount_*, adclick_reconcile_*) and they are updated; a later
	// recount given the same registerer adds to the same series. nil = no
	// metrics.
	Registerer prometheus.Registerer

	m *metrics // from Registerer, by Run or NewFinalizer
}

// DefaultMarginMs is Options.MarginMs's default: ten minutes past hour
// end + horizon before an hour counts as ready.
const DefaultMarginMs = 600_000

// Progress reports how far Run is.
type Progress struct {
	HourMs     int64 // the hour being recounted
	HoursDone  int   // hours finished
	HoursTotal int
	Rows       int64 // lake rows read so far (all hours)
}

func (o *Options) ensureDefaults() {
	o.Judge.ensureDefaults()
	if o.MarginMs <= 0 {
		o.MarginMs = DefaultMarginMs
	}
	if o.MaxLoggedIDs <= 0 {
		o.MaxLoggedIDs = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// ensureMetrics creates and registers the metrics once, if there is a
// Registerer.
func (o *Options) ensureMetrics() error {
	if o.m != nil || o.Registerer == nil {
		return nil
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return err
	}
	o.m = m
	return nil
}

func (o *Options) validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("a lake store is required"))
	}
	if o.Rows == nil {
		errs = append(errs, errors.New("a row store is required"))
	}
	if o.Watermark == nil && !o.Force {
		errs = append(errs, errors.New("a job watermark is required unless forced"))
	}
	for _, h := range o.Hours {
		if h%eventtime.HourMs != 0 {
			errs = append(errs, fmt.Errorf("hour %d ms is not the start of an hour", h))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("recount: options: %w", err)
	}
	return nil
}

// ReadyAt returns the job watermark (Unix ms) from which the hour starting
// at hourMs is final: hour end + horizon + margin. A click of the hour that
// the batch accepts arrived before hour end + horizon + allowance + 1 ms, and
// once the watermark has passed that every shard has been read past it.
func ReadyAt(hourMs, horizonMs, marginMs int64) int64 {
	return hourMs + eventtime.HourMs + horizonMs + marginMs
}

// NotFinalError is the refusal of an hour that is not final yet.
type NotFinalError struct {
	HourMs, WatermarkMs, ReadyAtMs int64
	HorizonMs, MarginMs            int64
}

func (e *NotFinalError) Error() string {
	wm := "none yet"
	if e.WatermarkMs > 0 {
		wm = time.UnixMilli(e.WatermarkMs).UTC().Format(time.RFC3339)
	}
	toGo := ""
	if e.WatermarkMs > 0 {
		toGo = fmt.Sprintf(" (%s to go)", time.Duration(e.ReadyAtMs-e.WatermarkMs)*time.Millisecond)
	}
	return fmt.Sprintf("recount: hour %s is not final yet: the job watermark (%s) has not passed hour end + horizon %s + margin %s = %s%s; clicks of the hour can still arrive; use --force to recount it anyway",
		FormatHour(e.HourMs), wm, time.Duration(e.HorizonMs)*time.Millisecond, time.Duration(e.MarginMs)*time.Millisecond,
		time.UnixMilli(e.ReadyAtMs).UTC().Format(time.RFC3339), toGo)
}

// ErrRefused is wrapped by Run's error when some final_* writes were
// refused because a newer generation had already written them.
var ErrRefused = errors.New("recount: final writes refused: a newer generation already finalised these rows")

// UnbalancedError is the refusal to finalise an hour whose reconciliation
// leaves an unexplained difference: its final_* are not written, so billing
// keeps reading its rows as provisional.
type UnbalancedError struct {
	HourMs                        int64
	Unexplained, UnexplainedSpend int64
}

func (e *UnbalancedError) Error() string {
	return fmt.Sprintf("recount: hour %s does not balance: unexplained difference %d clicks (%d spend micros), final = fast + late - A + B fails; final_* not written, the hour stays provisional (runbooks/recount-mismatch.md)",
		FormatHour(e.HourMs), e.Unexplained, e.UnexplainedSpend)
}

// HourResult is the outcome of one hour.
type HourResult struct {
	HourMs int64  `json:"hour_ms"`
	Hour   string `json:"hour"`
	// Status: "final" (final_* written), "checked" (NoWrite), "not_final"
	// (refused: see Reason), "held" (it does not balance: no final_*
	// written, its rows stay provisional; see Reason).
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Forced bool   `json:"forced,omitempty"`
	Gen    int64  `json:"gen"`
	// Rows is the number of lake rows of the hour's partition.
	Rows int64 `json:"rows"`
	// Accepted is the number of clicks the recount counts in the hour.
	Accepted int64 `json:"accepted"`
	// Rejected counts the partition's rows the recount does not count, by
	// reason: invalid, beyond_horizon, duplicate (a copy of a click id
	// whose earliest copy was chosen).
	Rejected map[string]int64 `json:"rejected"`
	// Refused counts final_* writes refused (a newer generation had won).
	Refused  int  `json:"refused_writes"`
	Balanced bool `json:"balanced"`
	// Unexplained and UnexplainedSpend sum the ads' unexplained
	// differences of a held hour.
	Unexplained      int64      `json:"unexplained,omitempty"`
	UnexplainedSpend int64      `json:"unexplained_spend_micros,omitempty"`
	Ads              []AdResult `json:"ads"`
}

// AdResult is the reconciliation of one (ad, hour).
//
// Fast and Late come from the hour row (what the stream wrote); Final is the
// recount. A and B compare the lake's verdicts with the recount, click id by
// click id: let S be the multiset of the hour's lake rows of the ad whose
// verdict is counted or late (what the stream counted), and R the set of
// click ids the recount accepts for the (ad, hour). Each id of R is matched
// with at most one row of S with the same id; A is the unmatched rows of S
// (counted by the stream, rejected by the recount, or counted twice by it),
// B the unmatched ids of R (accepted by the recount, while the stream's
// verdict was duplicate, beyond_horizon or invalid, or its counted copy lies
// in another hour). So Final = |S| − A + B exactly.
//
// When the rows hold what the verdicts say, Fast + Late = |S| and the check
// Final = Fast + Late − A + B holds. Unexplained = Final − (Fast + Late − A +
// B) = |S| − (Fast + Late) is what the rows lack (a write refused by its
// condition, a window lost in a crash, a missing flush; positive) or hold
// beyond the verdicts (negative); it cannot be traced to click ids from
// aggregate rows, so it is reported as a number. Balanced means Unexplained
// is 0 for clicks and for spend.
type AdResult struct {
	Ad               string   `json:"ad"`
	Fast             int64    `json:"fast"`
	Late             int64    `json:"late"`
	Final            int64    `json:"final"`
	A                int64    `json:"a"`
	B                int64    `json:"b"`
	Unexplained      int64    `json:"unexplained"`
	FastSpend        int64    `json:"fast_spend_micros"`
	LateSpend        int64    `json:"late_spend_micros"`
	FinalSpend       int64    `json:"final_spend_micros"`
	ASpend           int64    `json:"a_spend_micros"`
	BSpend           int64    `json:"b_spend_micros"`
	UnexplainedSpend int64    `json:"unexplained_spend_micros"`
	Balanced         bool     `json:"balanced"`
	AIDs             []string `json:"a_click_ids,omitempty"`
	BIDs             []string `json:"b_click_ids,omitempty"`
}

// Run recounts each hour of o.Hours (ascending): it refuses an hour that is
// not final yet (unless o.Force), reads the hour's partition and its
// neighbours (for copies of a click id whose event times fall in different
// hours), judges every row with Judge, de-duplicates by click id (the
// earliest accepted copy wins, wherever it lies), counts the accepted clicks
// and spend per ad, writes final_* with PutFinal (unless o.NoWrite) and
// reconciles each (ad, hour) with its row. It returns one result per hour;
// the error joins every refusal (*NotFinalError, ErrRefused) and stops at
// the first failure of the stores.
func Run(ctx context.Context, o Options) ([]HourResult, error) {
	o.ensureDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := o.ensureMetrics(); err != nil {
		return nil, err
	}
	hours := slices.Clone(o.Hours)
	slices.Sort(hours)
	hours = slices.Compact(hours)
	wm := int64(0)
	if o.Watermark != nil {
		var err error
		if wm, err = o.Watermark(ctx); err != nil {
			return nil, fmt.Errorf("recount: job watermark: %w", err)
		}
	}
	r := newRunner(&o, len(hours))
	for _, h := range hours {
		r.targets[h] = true
	}
	var results []HourResult
	var errs []error
	for _, h := range hours {
		ready := ReadyAt(h, o.Judge.HorizonMs, o.MarginMs)
		if o.Watermark == nil || wm < ready {
			if !o.Force {
				nf := &NotFinalError{HourMs: h, WatermarkMs: wm, ReadyAtMs: ready, HorizonMs: o.Judge.HorizonMs, MarginMs: o.MarginMs}
				results = append(results, HourResult{HourMs: h, Hour: FormatHour(h), Status: "not_final", Reason: nf.Error(), Gen: o.Gen})
				errs = append(errs, nf)
				o.Logger.Warn("recount refused", "hour", FormatHour(h), "reason", nf.Error())
				if o.m != nil {
					o.m.hours.WithLabelValues("not_final").Inc()
				}
				r.done++
				continue
			}
		}
		res, err := r.hour(ctx, h)
		if err != nil {
			return results, err
		}
		res.Forced = o.Watermark == nil || wm < ready
		if res.Refused > 0 {
			errs = append(errs, fmt.Errorf("hour %s: %d rows: %w", res.Hour, res.Refused, ErrRefused))
		}
		if res.Status == "held" {
			errs = append(errs, &UnbalancedError{HourMs: h, Unexplained: res.Unexplained, UnexplainedSpend: res.UnexplainedSpend})
			o.Logger.Error("recount held the hour: it does not balance", "hour", res.Hour, "unexplained", res.Unexplained, "unexplained_spend_micros", res.UnexplainedSpend)
		}
		results = append(results, res)
		r.done++
	}
	return results, errors.Join(errs...)
}

func (r *runner) report(_ context.Context, res *HourResult) {
	m := r.o.m
	if m == nil {
		return
	}
	m.hours.WithLabelValues(res.Status).Inc()
	m.lastHour.Set(float64(res.HourMs))
	if res.Refused > 0 {
		m.refused.Add(float64(res.Refused))
	}
	var fast, late, final, a, b, un, unb int64
	for _, ar := range res.Ads {
		fast += ar.Fast
		late += ar.Late
		final += ar.Final
		a += ar.A
		b += ar.B
		un += ar.Unexplained
		if !ar.Balanced {
			unb++
		}
	}
	for k, v := range map[string]int64{"fast": fast, "late": late, "final": final, "a": a, "b": b, "unexplained": un} {
		m.reconcile.WithLabelValues(k).Set(float64(v))
	}
	m.unbalanced.Set(float64(unb))
	m.setHeld(res)
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
