package recount

import (
	"context"
	"fmt"
	"math"

	"github.com/adclick/adclick/eventtime"
)

// MaxSelectHours is the most hours a range of a Selection may hold (a
// leap year's).
const MaxSelectHours = 24*366 + 1

// Selection names the hours to recount: every hour of the lake that is
// final (AllReady), or the hours FromMs through ToMs, both included (one
// hour: FromMs == ToMs).
type Selection struct {
	// FromMs and ToMs are hour starts, Unix ms (as ParseHour returns
	// them); ignored with AllReady.
	FromMs, ToMs int64
	// AllReady selects every hour of the lake, in order, up to the first
	// that is not final under the watermark (ReadyAt with HorizonMs and
	// MarginMs); with Force, every hour of the lake.
	AllReady bool
	Force    bool
	// HorizonMs and MarginMs say when an hour is final, for AllReady.
	HorizonMs, MarginMs int64
}

// RangeError is a range of hours SelectHours refuses: not hour starts,
// from after to, or more than MaxSelectHours.
type RangeError struct {
	FromMs, ToMs int64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("recount: hours %s to %s: want hour starts, from <= to, at most a year apart", FormatHour(e.FromMs), FormatHour(e.ToMs))
}

// SelectHours returns the hours s names, ascending. For AllReady it lists
// the hours of store and reads the job watermark with watermark (not with
// Force, or if watermark is nil: then every hour is taken); a range is
// checked (*RangeError) but not looked up in the store, so an hour of it
// may have no click.
func SelectHours(ctx context.Context, store Store, s Selection, watermark func(context.Context) (int64, error)) ([]int64, error) {
	if !s.AllReady {
		if s.FromMs%eventtime.HourMs != 0 || s.ToMs%eventtime.HourMs != 0 || s.ToMs < s.FromMs ||
			(s.ToMs-s.FromMs)/eventtime.HourMs >= MaxSelectHours {
			return nil, &RangeError{FromMs: s.FromMs, ToMs: s.ToMs}
		}
		var hs []int64
		for h := s.FromMs; h <= s.ToMs; h += eventtime.HourMs {
			hs = append(hs, h)
		}
		return hs, nil
	}
	var wm int64 = math.MaxInt64
	if watermark != nil && !s.Force {
		var err error
		if wm, err = watermark(ctx); err != nil {
			return nil, fmt.Errorf("recount: job watermark: %w", err)
		}
	}
	var hs []int64
	err := Hours(ctx, store, 0, func(h int64) error {
		if ReadyAt(h, s.HorizonMs, s.MarginMs) > wm {
			return ErrStopList
		}
		hs = append(hs, h)
		return nil
	})
	return hs, err
}
