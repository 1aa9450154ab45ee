package operator

import (
	"fmt"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/windowing"
)

// SourceOptions configures a Source.
type SourceOptions struct {
	Watermarks ingest.WatermarkOptions
	// Pres is the number of pre-aggregator subtasks clicks are routed to.
	Pres int
	// BatchSize is the number of clicks per message to a pre-aggregator;
	// default 1.
	BatchSize int
	// NewBatch, if set, returns an empty slice for a batch of clicks (the
	// runtime recycles them); nil allocates.
	NewBatch func() []ingest.Click
	// KeyGroups is the range of the ads' key groups this pipeline owns (the
	// zero value: all). A click of another range's ad still moves its
	// shard's watermark, so verdicts do not depend on ownership
	// (docs/scale-out.md §9), and is then dropped: its owner counts it.
	KeyGroups windowing.KeyGroups
}

// SourceReady is what a Source decided since the last Advance.
type SourceReady struct {
	// Sends are the messages for the pre-aggregators, in order.
	Sends []Send
	// Lake holds the records of invalid clicks, in order.
	Lake []latepath.Record
}

// Source is the driver's part of the graph as a machine: watermarks, their
// emission tick, and the routing of clicks. Create it with NewSource.
type Source struct {
	o        SourceOptions
	wms      *ingest.Watermarks
	iv       int64
	started  bool
	procMs   int64
	nextTick int64
	batches  [][]ingest.Click
	rd       SourceReady
	all      bool  // o.KeyGroups is every key group
	notOwned int64 // clicks and invalid records of other ranges' ads
}

// NewSource returns a Source with no shard and no processing time yet.
func NewSource(o SourceOptions) (*Source, error) {
	wo := o.Watermarks
	wo.EnsureDefaults()
	if err := wo.Validate(); err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	if o.Pres < 1 || o.Pres > windowing.MaxParallelism {
		return nil, fmt.Errorf("operator: %d pre-aggregators out of range", o.Pres)
	}
	if !o.KeyGroups.Valid() {
		return nil, fmt.Errorf("operator: key-group range %v out of 0..%d", o.KeyGroups, windowing.MaxParallelism)
	}
	if o.BatchSize < 1 {
		o.BatchSize = 1
	}
	o.Watermarks = wo
	return &Source{o: o, wms: ingest.NewWatermarks(wo), iv: wo.IntervalMs, batches: make([][]ingest.Click, o.Pres),
		all: o.KeyGroups.All()}, nil
}

// Watermarks returns the per-shard watermarks (for status and metrics; a
// caller adds and closes shards through the Source).
func (s *Source) Watermarks() *ingest.Watermarks { return s.wms }

// Started reports whether processing time has begun.
func (s *Source) Started() bool { return s.started }

// Start sets processing time to procMs; the first watermark tick is the
// next multiple of the interval.
func (s *Source) Start(procMs int64) {
	s.started = true
	s.procMs = procMs
	s.nextTick = eventtime.Start(procMs, s.iv) + s.iv
}

// ProcMs returns processing time.
func (s *Source) ProcMs() int64 { return s.procMs }

// NextTick returns the processing time of the next watermark tick.
func (s *Source) NextTick() int64 { return s.nextTick }

// Move moves processing time to now if it is later, without running any
// tick: run every tick up to now first (while NextTick() <= now, Tick).
func (s *Source) Move(now int64) { s.procMs = max(s.procMs, now) }

// Tick runs the next watermark tick, at NextTick: the buffered batches go
// out, then a Watermark message if the watermark advanced, else a Tick.
func (s *Source) Tick() (t, wm int64, advanced bool) {
	t = s.nextTick
	s.nextTick += s.iv
	s.procMs = max(s.procMs, t)
	wm, advanced = s.wms.Tick(t)
	kind := Tick
	if advanced {
		kind = Watermark
	}
	s.Broadcast(Msg{Kind: kind, Wm: wm, ProcMs: t})
	return t, wm, advanced
}

// AddShard makes shard id take part in the watermark from processing time
// procMs.
func (s *Source) AddShard(id string, procMs int64) { s.wms.AddShard(id, procMs) }

// Reader records the state shard id's reader reports, at the current
// processing time: only a caught-up reader's shard may go idle.
func (s *Source) Reader(id string, st ingest.ReaderState) { s.wms.Reader(id, st, s.procMs) }

// CloseShard ends shard id: it no longer holds the watermark back.
func (s *Source) CloseShard(id string) { s.wms.CloseShard(id) }

// Click routes valid click c (decoded, validated and finished) at the
// current processing time: its shard's watermark observes it and, if its ad
// is in the pipeline's key groups, it joins the batch of the pre-aggregator
// owning its click id's key group; a full batch goes out.
func (s *Source) Click(c *ingest.Click) {
	s.wms.Observe(c.Shard, c.EventMs, s.procMs)
	if !s.owns(c.AdID) {
		s.notOwned++
		return
	}
	o := windowing.Owner(windowing.KeyGroup(c.ClickID), len(s.batches))
	if s.batches[o] == nil {
		s.batches[o] = s.newBatch()
	}
	s.batches[o] = append(s.batches[o], *c)
	if len(s.batches[o]) >= s.o.BatchSize {
		s.send(o)
	}
}

// Reject writes the exceptions-log record of a click that could not be
// decoded or is invalid for reason; raw is its payload as read (at most
// latepath.MaxRaw bytes are kept). Like a valid click it belongs to the
// range of its ad (as decoded; "" when it has none), so that among
// pipelines sharing a stream exactly one logs it. It reports whether the
// record was this pipeline's (and so logged).
func (s *Source) Reject(c *ingest.Click, reason ingest.Reason, raw []byte) bool {
	if !s.owns(c.AdID) {
		s.notOwned++
		return false
	}
	r := Record(c, latepath.InvalidPrefix+string(reason))
	r.EventMs = 0
	if len(raw) > 0 {
		r.Raw = string(raw[:min(len(raw), latepath.MaxRaw)])
	}
	s.rd.Lake = append(s.rd.Lake, r)
	return true
}

func (s *Source) owns(ad string) bool { return s.all || s.o.KeyGroups.Contains(windowing.KeyGroup(ad)) }

// NotOwned returns the number of clicks and invalid records dropped so far
// because their ad belongs to another range.
func (s *Source) NotOwned() int64 { return s.notOwned }

// Barrier sends checkpoint barrier ckpt after every buffered click.
func (s *Source) Barrier(ckpt int64) {
	s.Broadcast(Msg{Kind: Barrier, Ckpt: ckpt, ProcMs: s.procMs})
}

// Final sends the final watermark (the end of time), which fires every
// window, and returns it.
func (s *Source) Final() int64 {
	wm := s.wms.Final()
	s.Broadcast(Msg{Kind: Watermark, Wm: wm, ProcMs: s.procMs})
	return wm
}

// Broadcast sends m to every pre-aggregator after every buffered click. A
// zero ProcMs is the current processing time.
func (s *Source) Broadcast(m Msg) {
	if m.ProcMs == 0 {
		m.ProcMs = s.procMs
	}
	s.Flush()
	s.rd.Sends = broadcast(s.rd.Sends, len(s.batches), m)
}

// Flush sends every buffered click.
func (s *Source) Flush() {
	for o := range s.batches {
		s.send(o)
	}
}

func (s *Source) send(o int) {
	if len(s.batches[o]) == 0 {
		return
	}
	s.rd.Sends = append(s.rd.Sends, Send{To: o, Msg: Msg{Kind: Clicks, ProcMs: s.procMs, Clicks: s.batches[o]}})
	s.batches[o] = nil
}

func (s *Source) newBatch() []ingest.Click {
	if s.o.NewBatch != nil {
		return s.o.NewBatch()
	}
	return make([]ingest.Click, 0, s.o.BatchSize)
}

// Ready returns what was decided since the last Advance.
func (s *Source) Ready() *SourceReady { return &s.rd }

// Advance tells the machine its Ready was carried out.
func (s *Source) Advance() {
	clear(s.rd.Sends)
	s.rd.Sends = s.rd.Sends[:0]
	clear(s.rd.Lake)
	s.rd.Lake = s.rd.Lake[:0]
}
