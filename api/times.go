package api

import (
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"strings"
	"time"
)

// Time formats accepted wherever the API takes a time (all UTC unless the
// RFC 3339 value carries an offset):
//
//	RFC 3339             2026-11-29T10:14:05Z, 2026-11-29T10:14:05.250+01:00
//	minute bucket        2026-11-29T10:14Z   (also M2026-11-29T10:14Z)
//	hour bucket          2026-11-29T10Z      (also H2026-11-29T10Z)
const (
	minuteLayout = "2006-01-02T15:04Z"
	hourLayout   = "2006-01-02T15Z"
	timeLayout   = "2006-01-02T15:04:05.000Z07:00"

	minuteMs = int64(eventtime.MinuteMs)
	hourMs   = int64(eventtime.HourMs)
)

// parseTime parses a time in one of the accepted formats and returns it as
// Unix ms.
func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty time")
	}
	if len(s) > 64 {
		return 0, fmt.Errorf("time %.20q... is too long", s)
	}
	v := s
	if strings.HasPrefix(v, "M") || strings.HasPrefix(v, "H") {
		v = v[1:]
	}
	for _, layout := range []string{minuteLayout, hourLayout, time.RFC3339Nano} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("time %q is not RFC 3339 (2026-11-29T10:14:05Z), a minute (2026-11-29T10:14Z) or an hour (2026-11-29T10Z)", s)
}

// parseHour parses the start of an hour.
func parseHour(s string) (int64, error) {
	ms, err := parseTime(s)
	if err != nil {
		return 0, err
	}
	if eventtime.Start(ms, hourMs) != ms {
		return 0, fmt.Errorf("time %q is not the start of an hour (want e.g. 2026-11-29T10Z)", s)
	}
	return ms, nil
}

func fmtMinute(ms int64) string { return time.UnixMilli(ms).UTC().Format(minuteLayout) }
func fmtHour(ms int64) string   { return time.UnixMilli(ms).UTC().Format(hourLayout) }
func fmtTime(ms int64) string   { return time.UnixMilli(ms).UTC().Format(timeLayout) }
