package latepath

// Verdicts as written in the exceptions log. Invalid clicks are written as
// "invalid:<reason>".
const (
	VerdictCounted       = "counted"
	VerdictLate          = "late"
	VerdictDuplicate     = "duplicate"
	VerdictBeyondHorizon = "beyond_horizon"
	VerdictGuardExpired  = "guard_expired"
	// VerdictInvalid is the verdict of every malformed or impossible
	// click, counted under it; its records carry InvalidPrefix + reason.
	VerdictInvalid = "invalid"
	InvalidPrefix  = VerdictInvalid + ":"
)

// MaxRaw is the largest raw payload kept in a record of a click that could
// not be decoded.
const MaxRaw = 1024

// Record is one entry of the exceptions log (a row of the raw-click lake): a
// click with its verdict, its raw device time and its arrival time. Every
// click the job reads gets one, so a recount can replay the verdicts and
// never raw input alone.
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
