package ingest

import "unicode/utf8"

// MaxIDBytes is the longest id (click_id, ad_id, campaign_id, device_id,
// shard) accepted, in bytes of its decoded UTF-8 form. Longer ids are
// rejected with id_too_long:<field>; real ids (UUIDs, short names) are far
// shorter, and the cap bounds the state a hostile producer can make the job
// keep per click.
const MaxIDBytes = 256

// MaxSpendMicros is the largest spend_micros accepted for one click: one
// thousand currency units. A larger value is rejected with spend_too_large.
// The cap keeps sums of spend far from int64 overflow: it takes more than
// nine billion clicks at the cap to overflow one (ad, hour) total.
const MaxSpendMicros int64 = 1_000_000_000

// MaxTimeMs is the latest impression or arrival time accepted, Unix ms
// (9999-12-31T23:59:59.999Z): later values are rejected
// (impression_out_of_range, arrival_out_of_range), so that time arithmetic
// (impression + horizon, window ends) cannot overflow.
const MaxTimeMs int64 = 253_402_300_799_999

// Click is one ad click. Strings are owned copies (safe to keep): Decode
// gives the four ids (and Shard, when the input carries it) one shared
// allocation, so keeping any one of them keeps all of them alive; clone an id
// with strings.Clone if only it is kept for long.
//
// A Click is a plain value; it is not safe for concurrent mutation.
type Click struct {
	ClickID, AdID, CampaignID, DeviceID string

	// ImpressionMs is the time the ad was shown, Unix ms.
	ImpressionMs int64
	// DeviceMs is the device's time of the click as sent, Unix ms. It is
	// kept unchanged for fraud analysis; EventMs is what the job counts by.
	DeviceMs int64
	// SpendMicros is the click's spend in millionths of the currency unit.
	SpendMicros int64
	// ArrivalMs is the arrival time, Unix ms: the Kinesis
	// ApproximateArrivalTimestamp, or the file line's arrival_ms. Finish sets
	// it; Decode sets it only from an arrival_ms field.
	ArrivalMs int64
	// EventMs is the event time, Unix ms:
	// Clamp(DeviceMs, ImpressionMs, ArrivalMs). Finish sets it.
	EventMs int64
	// Shard is the id of the shard the click was read from: the "shard"
	// field of a file line, or set by the Kinesis reader after Decode.
	Shard string
	// Seq is the record's position in its source, for the exceptions log
	// and the recount's tie-break: "<sequence>/<sub-sequence>" for Kinesis,
	// the line's byte offset (20 digits, so positions sort as strings) for a
	// file, the click's index for the generator. The reader sets it.
	Seq string
	// HasArrival reports that the decoded JSON carried arrival_ms (the file
	// source).
	HasArrival bool
}

// Reason says why a click is invalid; "" means valid. Invalid clicks go to
// the exceptions log with the verdict "invalid:<reason>" and never stop the
// job. The set of reasons is closed (see AllReasons), so a reason is safe to
// use as a metric label.
//
// The reasons, in the order a click is checked:
//
//	malformed_json           the input is not exactly one JSON value (syntax
//	                         error, truncation, trailing bytes, nesting deeper
//	                         than 10,000 levels, as encoding/json)
//	not_object               the input is valid JSON but not an object
//	bad_type:<field>         a known field holds a value of the wrong JSON
//	                         type (a number for an id, a string or bool for a
//	                         time, ...), or a time/spend that is not an
//	                         integer that fits int64 (1.5, 1e3, 2^63)
//	bad_utf8:<field>         an id is not valid Unicode: raw bytes that are
//	                         not UTF-8, or an escaped lone surrogate (\ud800).
//	                         encoding/json would replace these with U+FFFD,
//	                         which can make two different ids equal
//	id_too_long:<field>      an id is longer than MaxIDBytes bytes
//	missing_field:<field>    a required field is absent, null, or an empty
//	                         string (click_id, ad_id, campaign_id,
//	                         device_id, impression_ms, device_ms,
//	                         spend_micros; FinishLine also requires shard and
//	                         arrival_ms)
//	negative_spend           spend_micros < 0
//	spend_too_large          spend_micros > MaxSpendMicros
//	impression_not_positive  impression_ms <= 0
//	impression_out_of_range  impression_ms > MaxTimeMs (year 9999)
//	arrival_not_positive     the arrival time is <= 0 (Finish)
//	arrival_out_of_range     the arrival time is > MaxTimeMs (Finish)
//	impression_after_arrival impression_ms > arrival time (Finish): the click
//	                         reached the stream before the ad was shown, so
//	                         the impression time is false
//
// The first five are found while scanning, in input order; the first problem
// found wins. A type, Unicode or length problem in any occurrence of a
// duplicated key rejects the click, even when a later occurrence is fine.
type Reason string

// The reasons that name no field. Field reasons are built by BadType,
// BadUTF8, IDTooLong and MissingField.
const (
	ReasonMalformedJSON          Reason = "malformed_json"
	ReasonNotObject              Reason = "not_object"
	ReasonNegativeSpend          Reason = "negative_spend"
	ReasonSpendTooLarge          Reason = "spend_too_large"
	ReasonImpressionNotPositive  Reason = "impression_not_positive"
	ReasonArrivalNotPositive     Reason = "arrival_not_positive"
	ReasonImpressionOutOfRange   Reason = "impression_out_of_range"
	ReasonArrivalOutOfRange      Reason = "arrival_out_of_range"
	ReasonImpressionAfterArrival Reason = "impression_after_arrival"
)

// Field indexes. String fields come first.
const (
	fClickID = iota
	fAdID
	fCampaignID
	fDeviceID
	fShard
	numStringFields
)

const (
	fImpression = numStringFields + iota
	fDevice
	fSpend
	fArrival
	numFields
)

// fieldNames are the JSON names of the known fields, by field index.
var fieldNames = [numFields]string{
	"click_id", "ad_id", "campaign_id", "device_id", "shard",
	"impression_ms", "device_ms", "spend_micros", "arrival_ms",
}

// Per-field reasons, built once so the hot path never allocates them.
var (
	badTypeReasons  = fieldReasons("bad_type:", 0, numFields)
	badUTF8Reasons  = fieldReasons("bad_utf8:", 0, numStringFields)
	tooLongReasons  = fieldReasons("id_too_long:", 0, numStringFields)
	missingReasons  = fieldReasons("missing_field:", 0, numFields)
	requiredStrings = [...]int{fClickID, fAdID, fCampaignID, fDeviceID}
	requiredInts    = [...]int{fImpression, fDevice, fSpend}
)

func fieldReasons(prefix string, from, to int) []Reason {
	out := make([]Reason, to-from)
	for f := from; f < to; f++ {
		out[f-from] = Reason(prefix + fieldNames[f])
	}
	return out
}

// fieldReason returns the reason prefix+name, from table when name is a
// known field, without allocating in that case.
func fieldReason(table []Reason, prefix, name string) Reason {
	for f, r := range table {
		if fieldNames[f] == name {
			return r
		}
	}
	return Reason(prefix + name)
}

// MissingField returns the reason "missing_field:<name>". An empty string
// counts as missing.
func MissingField(name string) Reason {
	return fieldReason(missingReasons, "missing_field:", name)
}

// BadType returns the reason "bad_type:<name>".
func BadType(name string) Reason { return fieldReason(badTypeReasons, "bad_type:", name) }

// BadUTF8 returns the reason "bad_utf8:<name>".
func BadUTF8(name string) Reason { return fieldReason(badUTF8Reasons, "bad_utf8:", name) }

// IDTooLong returns the reason "id_too_long:<name>".
func IDTooLong(name string) Reason { return fieldReason(tooLongReasons, "id_too_long:", name) }

// AllReasons returns every reason Decode, Validate, Finish and FinishLine can
// return, for example to pre-register metric label values. The slice is new
// on every call.
func AllReasons() []Reason {
	out := []Reason{ReasonMalformedJSON, ReasonNotObject}
	out = append(out, badTypeReasons...)
	out = append(out, badUTF8Reasons...)
	out = append(out, tooLongReasons...)
	out = append(out, missingReasons...)
	return append(out,
		ReasonNegativeSpend, ReasonSpendTooLarge, ReasonImpressionNotPositive,
		ReasonImpressionOutOfRange, ReasonArrivalNotPositive, ReasonArrivalOutOfRange,
		ReasonImpressionAfterArrival)
}

// CheckID returns "" if s is a value Decode accepts for the required id
// field name (click_id, ad_id, campaign_id or device_id), or the reason it
// would give: valid UTF-8, 1 to MaxIDBytes bytes, anything else allowed
// (control characters included). The HTTP API applies the same rule to the
// ad ids it is asked for, so that it serves every id the job counted.
func CheckID(name, s string) Reason {
	switch {
	case !utf8.ValidString(s):
		return BadUTF8(name)
	case len(s) > MaxIDBytes:
		return IDTooLong(name)
	case s == "":
		return MissingField(name)
	}
	return ""
}

// Validate checks the fields of a click built in code (the generator source,
// tests) the way Decode checks decoded JSON: the ids (and Shard, if set) are
// valid UTF-8 and at most MaxIDBytes long, the required ids are non-empty,
// and spend and impression time are in range. It returns "" or the first
// problem. Decode already applies these checks; Validate need not follow it.
func (c *Click) Validate() Reason {
	ids := [numStringFields]string{c.ClickID, c.AdID, c.CampaignID, c.DeviceID, c.Shard}
	for f, s := range ids {
		switch {
		case !utf8.ValidString(s):
			return badUTF8Reasons[f]
		case len(s) > MaxIDBytes:
			return tooLongReasons[f]
		}
	}
	for _, f := range requiredStrings {
		if ids[f] == "" {
			return missingReasons[f]
		}
	}
	return c.checkValues()
}

// checkValues applies the range checks that follow the missing-field checks.
func (c *Click) checkValues() Reason {
	switch {
	case c.SpendMicros < 0:
		return ReasonNegativeSpend
	case c.SpendMicros > MaxSpendMicros:
		return ReasonSpendTooLarge
	case c.ImpressionMs <= 0:
		return ReasonImpressionNotPositive
	case c.ImpressionMs > MaxTimeMs:
		return ReasonImpressionOutOfRange
	}
	return ""
}

// Finish validates a decoded click against its arrival time (Unix ms): it
// sets c.ArrivalMs = arrivalMs, rejects an arrival time <= 0
// (arrival_not_positive) and an impression after arrival
// (impression_after_arrival), and otherwise sets
// c.EventMs = Clamp(c.DeviceMs, c.ImpressionMs, arrivalMs) and returns "".
// c.DeviceMs keeps the raw device time. Finish assumes the click passed
// Decode or Validate; it does not repeat those checks.
func (c *Click) Finish(arrivalMs int64) Reason {
	c.ArrivalMs = arrivalMs
	c.EventMs = 0
	switch {
	case arrivalMs <= 0:
		return ReasonArrivalNotPositive
	case arrivalMs > MaxTimeMs:
		return ReasonArrivalOutOfRange
	case c.ImpressionMs > arrivalMs:
		return ReasonImpressionAfterArrival
	}
	c.EventMs = Clamp(c.DeviceMs, c.ImpressionMs, arrivalMs)
	return ""
}

// FinishLine is Finish for a line of the file source, whose arrival time and
// shard come from the line itself: it requires arrival_ms
// (missing_field:arrival_ms) and a non-empty shard (missing_field:shard),
// then returns c.Finish(c.ArrivalMs).
func (c *Click) FinishLine() Reason {
	switch {
	case !c.HasArrival:
		return missingReasons[fArrival]
	case c.Shard == "":
		return missingReasons[fShard]
	}
	return c.Finish(c.ArrivalMs)
}

// Clamp returns deviceMs clamped into [impressionMs, arrivalMs], all Unix ms,
// so that impression ≤ event time ≤ arrival (seed 001 Part 2): a phone whose
// clock runs fast (say, in 2031) cannot lift its shard's watermark past the
// arrival time, and one whose clock runs slow cannot put the click before the
// ad was shown. If impressionMs > arrivalMs (which Finish rejects) the
// interval is empty and the result is arrivalMs: the upper bound wins, so
// event time never passes arrival.
func Clamp(deviceMs, impressionMs, arrivalMs int64) int64 {
	return min(max(deviceMs, impressionMs), arrivalMs)
}
