package recount

import (
	"context"
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"strconv"
	"strings"
	"time"
)

// FinalizerOptions configures a Finalizer. Zero fields take the defaults
// noted.
type FinalizerOptions struct {
	// Recount holds the stores, generation, judge, margin, logger and
	// registerer of every recount (its metrics are registered once, by
	// NewFinalizer); Watermark is required (the last completed
	// checkpoint's watermark). Hours, Force and NoWrite are ignored.
	Recount Options
	// Interval between rounds; default 1 minute.
	Interval time.Duration
	// HoursPerRound is the most hours finalised per round (the rate
	// limit); default 1.
	HoursPerRound int
	// FromMs is the first hour to consider when no progress is saved for
	// this generation; 0 = the lake's first hour.
	FromMs int64
}

// Finalizer finalises hours as they become ready: each round it reads the
// job watermark and recounts, in order, up to HoursPerRound hours of the lake
// whose ReadyAt it has passed. Its progress (the next hour to look at) is
// saved in the lake under _finalizer/gen-<gen>, so a restarted job goes on
// where it stopped. Run it in one goroutine; it is not safe for concurrent
// use.
type Finalizer struct {
	o      FinalizerOptions
	next   int64
	loaded bool
}

// NewFinalizer returns a finaliser.
func NewFinalizer(o FinalizerOptions) (*Finalizer, error) {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.HoursPerRound <= 0 {
		o.HoursPerRound = 1
	}
	o.Recount.ensureDefaults()
	o.Recount.Hours, o.Recount.Force, o.Recount.NoWrite = nil, false, false
	if o.Recount.Watermark == nil {
		return nil, errors.New("recount: finalizer: a watermark function is required")
	}
	if err := o.Recount.validate(); err != nil {
		return nil, err
	}
	if err := o.Recount.ensureMetrics(); err != nil {
		return nil, err
	}
	return &Finalizer{o: o}, nil
}

func (f *Finalizer) progressKey() string {
	return "_finalizer/gen-" + strconv.FormatInt(f.o.Recount.Gen, 10)
}

// Run runs rounds every Interval until ctx is done, then returns nil. A
// failed round is logged and retried at the next one.
func (f *Finalizer) Run(ctx context.Context) error {
	t := time.NewTicker(f.o.Interval)
	defer t.Stop()
	for {
		if _, err := f.Step(ctx); err != nil && ctx.Err() == nil {
			f.o.Recount.Logger.Warn("finalizer round failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step runs one round and returns the hours it finalised.
func (f *Finalizer) Step(ctx context.Context) ([]int64, error) {
	o := &f.o.Recount
	if !f.loaded {
		b, err := o.Store.Get(ctx, f.progressKey())
		switch {
		case err == nil:
			v, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if perr != nil {
				return nil, fmt.Errorf("recount: finalizer: corrupt progress %q", b)
			}
			f.next = v
		case errors.Is(err, ErrNotFound):
			f.next = f.o.FromMs - floorMod(f.o.FromMs, eventtime.HourMs)
		default:
			return nil, fmt.Errorf("recount: finalizer: %w", err)
		}
		f.loaded = true
	}
	wm, err := o.Watermark(ctx)
	if err != nil {
		return nil, fmt.Errorf("recount: finalizer: job watermark: %w", err)
	}
	var ready []int64
	err = Hours(ctx, o.Store, f.next, func(h int64) error {
		if len(ready) >= f.o.HoursPerRound || ReadyAt(h, o.Judge.HorizonMs, o.MarginMs) > wm {
			return ErrStopList
		}
		ready = append(ready, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recount: finalizer: %w", err)
	}
	var done []int64
	for _, h := range ready {
		ro := *o
		ro.Hours = []int64{h}
		ro.Watermark = func(context.Context) (int64, error) { return wm, nil }
		_, err := Run(ctx, ro)
		var ue *UnbalancedError
		if errors.As(err, &ue) {
			// Held: the hour stays provisional and is recounted every
			// round (and so stays in the metrics and the log) until it
			// balances; the hours after it wait.
			o.Logger.Error("finalizer: hour held, it does not balance", "hour", FormatHour(h), "unexplained", ue.Unexplained,
				"unexplained_spend_micros", ue.UnexplainedSpend)
			return done, nil
		}
		if err != nil && !errors.Is(err, ErrRefused) {
			return done, err
		}
		if err != nil {
			o.Logger.Warn("finalizer: a newer generation already finalised the hour", "hour", FormatHour(h), "gen", o.Gen)
		}
		f.next = h + eventtime.HourMs
		if err := o.Store.Put(ctx, f.progressKey(), []byte(strconv.FormatInt(f.next, 10))); err != nil {
			return done, fmt.Errorf("recount: finalizer: save progress: %w", err)
		}
		done = append(done, h)
		o.Logger.Info("finalised", "hour", FormatHour(h), "gen", o.Gen, "watermark", time.UnixMilli(wm).UTC().Format(time.RFC3339))
	}
	return done, nil
}
