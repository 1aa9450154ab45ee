package recount

import (
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/preagg"
)

// Judge is the batch's decision about one lake row, made with the stream's
// own validation code and a deterministic stand-in for its watermark.
//
// The stream judges each click against judge = max(floor, watermark); a
// batch has no watermark, so the recount judges each click against the
// watermark its own arrival would make if it were the newest click:
//
//	judge = arrival − allowance − 1
//	beyond the horizon  ⇔  impression < judge − horizon
//
// The stream's watermark trails every shard's newest event, and an event is
// never after its arrival, so the stream's judge is at most this one for a
// click read in arrival order: the batch rejects everything the stream
// rejects as beyond the horizon, and also the few clicks near the edge that
// the stream accepted because its watermark lagged (a slow shard, a long
// allowance). Those show as A in the reconciliation. The batch's other
// differences: it de-duplicates by earliest arrival (ties: shard, sequence
// number, event time), where the stream keeps the first copy it reads; it
// never expires ids (the stream expires them when its watermark passes
// impression + horizon, after which the horizon rejects any copy with the
// same impression anyway); and it does not apply the stream's 26 h
// processing-time guard. Lateness plays no part: final counts on-time and
// late clicks alike.
type Judge struct {
	HorizonMs int64 // acceptance horizon after the impression; default 7,200,000
	// AllowanceMs is the stream's out-of-orderness allowance; nil means the
	// default, 5,000. Zero is a real allowance (as in the job's Config).
	AllowanceMs *int64
}

func (j *Judge) ensureDefaults() {
	if j.HorizonMs <= 0 {
		j.HorizonMs = preagg.DefaultHorizonMs
	}
	if j.AllowanceMs == nil || *j.AllowanceMs < 0 {
		j.AllowanceMs = new(int64(5_000))
	}
}

// Outcome is the batch verdict of one row.
type Outcome uint8

const (
	// Accepted: a valid click within the horizon (a candidate for the
	// de-duplication by click id).
	Accepted Outcome = iota + 1
	// Invalid: the stream rejected it as invalid, or the stream's
	// validation code rejects it now.
	Invalid
	// BeyondHorizon: valid, but beyond the acceptance horizon.
	BeyondHorizon
)

// decide judges c (a row whose verdict is not invalid, rebuilt as a click
// without its arrival time) against arrivalMs; it sets c's event time.
func (j *Judge) decide(c *ingest.Click, arrivalMs int64) (Outcome, ingest.Reason) {
	reason := c.Validate()
	if reason == "" {
		reason = c.Finish(arrivalMs)
	}
	if reason != "" {
		return Invalid, reason
	}
	if preagg.PastHorizon(c.ImpressionMs, preagg.ArrivalJudge(c.ArrivalMs, *j.AllowanceMs), j.HorizonMs) {
		return BeyondHorizon, ""
	}
	return Accepted, ""
}
