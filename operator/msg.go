package operator

import (
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
)

// Kind is the kind of a Msg.
type Kind uint8

// Message kinds.
const (
	// Clicks carries clicks to a pre-aggregator, or partial sums and late
	// clicks to a window subtask.
	Clicks Kind = iota + 1
	// Tick says processing time moved to ProcMs.
	Tick
	// Watermark carries a new watermark Wm (and processing time).
	Watermark
	// Barrier carries checkpoint barrier Ckpt.
	Barrier
	// End ends the input: every subtask flushes and stops.
	End
	// Rewrite asks the window subtasks to write again every hour row and
	// late total their state holds (after a sweep).
	Rewrite
	// TotalsLost says the running-total store lost its data: every total
	// state holds is written again.
	TotalsLost
)

var kindNames = [...]string{Clicks: "clicks", Tick: "tick", Watermark: "watermark", Barrier: "barrier",
	End: "end", Rewrite: "rewrite", TotalsLost: "totals-lost"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(?)"
}

// Cause says why a pre-aggregator forwarded its partial sums.
type Cause uint8

// Causes of a forward.
const (
	CauseInterval  Cause = iota + 1 // the pre-aggregation buffer's interval passed
	CauseWatermark                  // a watermark closes their windows
	CauseBarrier                    // a barrier: the buffer goes before it
	CauseEnd                        // the end of input
)

var causeNames = [...]string{CauseInterval: "interval", CauseWatermark: "watermark", CauseBarrier: "barrier", CauseEnd: "end"}

func (c Cause) String() string {
	if int(c) < len(causeNames) && causeNames[c] != "" {
		return causeNames[c]
	}
	return "cause(?)"
}

// LateClick is a late click on its way to the window subtask owning its ad.
type LateClick struct {
	Ad                   string
	EventMs, SpendMicros int64
}

// Msg is a message between subtasks.
type Msg struct {
	Kind Kind
	// From is the index of the sending subtask (a window subtask keeps a
	// watermark and a processing time per input).
	From   int
	ProcMs int64
	Wm     int64 // Watermark
	Ckpt   int64 // Barrier: the checkpoint id
	// Clicks, to a pre-aggregator. The machine keeps no reference to the
	// slice or into it once Step returns.
	Clicks []ingest.Click
	// Partials and Late, to a window subtask; Cause says why they were
	// forwarded. The machine keeps no reference to either slice.
	Partials []preagg.Partial
	Late     []LateClick
	Cause    Cause
}

// Send is a message and the index of the subtask it goes to.
type Send struct {
	To  int
	Msg Msg
}

// Record returns the exceptions-log record of click c with verdict v (a
// latepath.Verdict*, or InvalidPrefix + reason).
func Record(c *ingest.Click, v string) latepath.Record {
	return latepath.Record{Verdict: v, ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID, DeviceID: c.DeviceID,
		ImpressionMs: c.ImpressionMs, DeviceMs: c.DeviceMs, EventMs: c.EventMs, ArrivalMs: c.ArrivalMs,
		SpendMicros: c.SpendMicros, Shard: c.Shard, Seq: c.Seq}
}

// broadcast appends m to every one of n destinations.
func broadcast(sends []Send, n int, m Msg) []Send {
	for i := 0; i < n; i++ {
		sends = append(sends, Send{To: i, Msg: m})
	}
	return sends
}
