package latepath

import (
	"strconv"
	"unicode/utf8"
)

// Verdicts as written in the exceptions log. Invalid clicks are written as
// "invalid:<reason>".
const (
	VerdictCounted       = "counted"
	VerdictLate          = "late"
	VerdictDuplicate     = "duplicate"
	VerdictBeyondHorizon = "beyond_horizon"
	VerdictGuardExpired  = "guard_expired"
	InvalidPrefix        = "invalid:"
)

// MaxRaw is the largest raw payload kept in a record of a click that could
// not be decoded.
const MaxRaw = 1024

// Record is one line of the exceptions log: a click with its verdict, its raw
// device time and its arrival time. Every click the job reads gets one, so a
// recount can replay the verdicts and never raw input alone.
type Record struct {
	Verdict      string
	ClickID      string
	AdID         string
	CampaignID   string
	DeviceID     string
	ImpressionMs int64
	DeviceMs     int64 // raw, as the device sent it
	EventMs      int64 // clamped
	ArrivalMs    int64
	SpendMicros  int64
	Shard        string
	Seq          string // the source position of the record
	Raw          string // the payload, only for a click that could not be decoded (at most MaxRaw bytes)
}

// AppendJSON appends r as one JSON object (no newline) to dst.
func AppendJSON(dst []byte, r *Record) []byte {
	dst = append(dst, `{"verdict":`...)
	dst = appendString(dst, r.Verdict)
	dst = append(dst, `,"click_id":`...)
	dst = appendString(dst, r.ClickID)
	dst = append(dst, `,"ad_id":`...)
	dst = appendString(dst, r.AdID)
	dst = append(dst, `,"campaign_id":`...)
	dst = appendString(dst, r.CampaignID)
	dst = append(dst, `,"device_id":`...)
	dst = appendString(dst, r.DeviceID)
	dst = append(dst, `,"impression_ms":`...)
	dst = strconv.AppendInt(dst, r.ImpressionMs, 10)
	dst = append(dst, `,"device_ms":`...)
	dst = strconv.AppendInt(dst, r.DeviceMs, 10)
	dst = append(dst, `,"event_ms":`...)
	dst = strconv.AppendInt(dst, r.EventMs, 10)
	dst = append(dst, `,"arrival_ms":`...)
	dst = strconv.AppendInt(dst, r.ArrivalMs, 10)
	dst = append(dst, `,"spend_micros":`...)
	dst = strconv.AppendInt(dst, r.SpendMicros, 10)
	dst = append(dst, `,"shard":`...)
	dst = appendString(dst, r.Shard)
	dst = append(dst, `,"seq":`...)
	dst = appendString(dst, r.Seq)
	if r.Raw != "" {
		dst = append(dst, `,"raw":`...)
		raw := r.Raw
		if len(raw) > MaxRaw {
			raw = raw[:MaxRaw]
		}
		dst = appendString(dst, raw)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
