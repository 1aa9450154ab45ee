package operator

import (
	"fmt"
	"slices"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// WinOptions configures a Win.
type WinOptions struct {
	Index  int // this subtask
	Inputs int // the number of pre-aggregator subtasks sending to it
	// EarlyFiringMs is the processing-time interval of running totals.
	EarlyFiringMs int64
	// Epoch is the tag of the first writes, and Restored the checkpoint the
	// closed-row condition compares with: both the checkpoint the job
	// restored from (or the id before its first).
	Epoch, Restored int64
	Gen             int64 // job_gen of every write
	// WriteAt is how many row writes may wait for a batch before a
	// watermark makes them due; default 2048.
	WriteAt int
}

// Blob is one key group's snapshot.
type Blob struct {
	KG   int
	Data []byte
}

// WinAck is a window subtask's acknowledgement of an aligned barrier.
type WinAck struct {
	Ckpt int64
	Wm   int64 // the subtask's watermark at the barrier
	Win  []Blob
	Late []Blob
}

// Firings counts what fired.
type Firings struct{ Minute, Hour, Early int }

// WinReady is what a Win decided since the last Advance.
type WinReady struct {
	// Puts are the row writes, by writer: Puts[i] are
	// sink.TaggedWriters[i]'s.
	Puts [len(sink.TaggedWriters)][]sink.Put
	// Totals are the running totals to set, when TotalsDue.
	Totals    []sink.Total
	TotalsDue bool
	// Write says the puts and totals must be written now, before the
	// acknowledgement and the next Step.
	Write   bool
	Firings Firings
	Ack     *WinAck
	// Done is set once every input has ended.
	Done bool
}

// Win is a window subtask as a machine. Create it with NewWin.
type Win struct {
	o        WinOptions
	minutes  *windowing.Minutes
	late     *latepath.Late
	wms      []int64
	procs    []int64
	wm       int64
	proc     int64
	nextEarl int64
	barriers int
	ended    int
	rewrites int
	lost     int
	epoch    int64
	// The running-total store: totalsOK is false after a failed write or a
	// loss of its data; unsent holds the totals that failed (the latest per
	// key), and rewriteT asks for every total state holds.
	totalsOK bool
	rewriteT bool
	unsent   map[sink.TotalKey]sink.Total
	tots     []sink.Total // decided since the last Advance
	failed   bool         // ReportTotalsFailed since the last Advance
	rd       WinReady
	ack      WinAck
}

var fastIdx, lateIdx = slices.Index(sink.TaggedWriters[:], sink.Fast), slices.Index(sink.TaggedWriters[:], sink.Late)

// NewWin returns a Win over the minute windows m and late totals l (empty,
// or restored for the key groups it owns).
func NewWin(o WinOptions, m *windowing.Minutes, l *latepath.Late) (*Win, error) {
	if o.Inputs < 1 || o.Inputs > windowing.MaxParallelism {
		return nil, fmt.Errorf("operator: %d inputs out of range", o.Inputs)
	}
	if o.EarlyFiringMs <= 0 {
		return nil, fmt.Errorf("operator: early firing %d ms must be positive", o.EarlyFiringMs)
	}
	if o.WriteAt == 0 {
		o.WriteAt = 2048
	}
	w := &Win{o: o, minutes: m, late: l, wms: make([]int64, o.Inputs), procs: make([]int64, o.Inputs),
		wm: eventtime.NoWatermark, epoch: o.Epoch, totalsOK: true}
	for i := range w.wms {
		w.wms[i] = eventtime.NoWatermark
	}
	return w, nil
}

// Minutes returns the minute windows the machine drives.
func (w *Win) Minutes() *windowing.Minutes { return w.minutes }

// Late returns the late totals the machine drives.
func (w *Win) Late() *latepath.Late { return w.late }

// Epoch returns the tag of the writes being decided.
func (w *Win) Epoch() int64 { return w.epoch }

// TotalsOK reports whether the last write of running totals succeeded (and
// the store has not lost data since).
func (w *Win) TotalsOK() bool { return w.totalsOK }

// Ready returns what the Steps since the last Advance decided. Row writes
// accumulate until Write; so do running totals while the store is
// unreachable (they are then replayed with everything state holds).
func (w *Win) Ready() *WinReady {
	rd := &w.rd
	rd.Totals, rd.TotalsDue = nil, false
	switch {
	case w.totalsOK:
		if len(w.tots) > 0 {
			rd.Totals, rd.TotalsDue = w.tots, true
		}
	case rd.Write && (len(w.tots) > 0 || len(w.unsent) > 0 || w.rewriteT):
		rd.Totals, rd.TotalsDue = w.replay(), true
	}
	return rd
}

// replay returns, after an outage or a loss of data, every total state
// holds, then the totals that failed and state no longer holds (minutes
// that closed meanwhile) with the epoch of their row, so that a flush keeps
// them exactly when it keeps the row, then the pending ones.
func (w *Win) replay() []sink.Total {
	var all []sink.Total
	held := make(map[sink.TotalKey]bool)
	w.minutes.Totals(func(r windowing.Running) {
		t := w.total(r)
		held[t.Key()] = true
		all = append(all, t)
	})
	for k, t := range w.unsent {
		if !held[k] {
			all = append(all, t)
		}
	}
	return append(all, w.tots...)
}

// ReportTotalsFailed tells the machine that writing the Ready's totals
// failed: the pending ones are kept (the latest per key: a minute that
// closes now is gone from state by the time the store answers again), and
// the next write sets every total state holds. Call it before Advance.
func (w *Win) ReportTotalsFailed() {
	w.totalsOK, w.failed = false, true
	if w.unsent == nil {
		w.unsent = make(map[sink.TotalKey]sink.Total)
	}
	for _, t := range w.tots {
		w.unsent[t.Key()] = t
	}
}

// Advance tells the machine its Ready was carried out: the row writes, and
// the totals if TotalsDue (successfully, unless ReportTotalsFailed said
// otherwise).
func (w *Win) Advance() {
	rd := &w.rd
	if rd.TotalsDue {
		if !w.failed {
			w.totalsOK, w.rewriteT = true, false
			clear(w.unsent)
		}
		clear(w.tots)
		w.tots = w.tots[:0]
	}
	w.failed = false
	for i := range rd.Puts {
		clear(rd.Puts[i])
		rd.Puts[i] = rd.Puts[i][:0]
	}
	rd.Totals, rd.TotalsDue = nil, false
	rd.Write, rd.Done = false, false
	rd.Firings = Firings{}
	rd.Ack = nil
}

// Step handles one message from a pre-aggregator.
func (w *Win) Step(m Msg) error {
	if m.From < 0 || m.From >= w.o.Inputs {
		return fmt.Errorf("operator: window subtask %d: a message from input %d of %d", w.o.Index, m.From, w.o.Inputs)
	}
	rd := &w.rd
	switch m.Kind {
	case Clicks:
		for _, p := range m.Partials {
			if !w.minutes.Add(p.Ad, p.WindowStart, p.Count, p.SpendMicros) {
				// Cannot happen with partials flushed before watermarks; if
				// it did, the clicks are kept as late rather than lost.
				w.late.Add(p.Ad, p.WindowStart, p.Count, p.SpendMicros)
			}
		}
		for _, l := range m.Late {
			w.late.Add(l.Ad, l.EventMs, 1, l.SpendMicros)
		}
	case Tick:
		w.tick(m.From, m.ProcMs)
	case Watermark:
		if m.Wm > w.wms[m.From] {
			w.wms[m.From] = m.Wm
		}
		if wm := slices.Min(w.wms); wm > w.wm {
			w.wm = wm
			if wm == eventtime.EndOfTime {
				// The end of input or a drained stop: every window fires,
				// but state stays as the last real watermark left it, so a
				// later start after more input finds it intact.
				w.minutes.Drain(w.emit)
			} else {
				w.minutes.Advance(wm, w.emit)
				w.late.Expire(wm)
			}
		}
		if w.puts() >= w.o.WriteAt {
			rd.Write = true
		}
		w.tick(m.From, m.ProcMs)
	case Barrier:
		w.barriers++
		if w.barriers < w.o.Inputs {
			return nil
		}
		w.barriers = 0
		// Everything decided before the barrier is written, tagged with the
		// epoch before it, before the checkpoint can complete.
		w.late.Flush(w.emitLate)
		rd.Write = true
		w.epoch = m.Ckpt
		w.ack = WinAck{Ckpt: m.Ckpt, Wm: w.wm}
		if err := w.minutes.Snapshot(func(kg int, d []byte) error { w.ack.Win = append(w.ack.Win, Blob{kg, d}); return nil }); err != nil {
			return err
		}
		if err := w.late.Snapshot(func(kg int, d []byte) error { w.ack.Late = append(w.ack.Late, Blob{kg, d}); return nil }); err != nil {
			return err
		}
		rd.Ack = &w.ack
	case Rewrite:
		// One message per input arrives; rewriting once is enough.
		w.rewrites++
		if w.rewrites%w.o.Inputs == 1 || w.o.Inputs == 1 {
			w.minutes.HourRows(w.emit)
			w.late.MarkAllDirty()
			w.late.Flush(w.emitLate)
			rd.Write = true
		}
	case TotalsLost:
		// One message per input arrives; rewriting once is enough.
		w.lost++
		if w.lost%w.o.Inputs == 1 || w.o.Inputs == 1 {
			w.totalsOK, w.rewriteT = false, true
			rd.Write = true
		}
	case End:
		w.ended++
		if w.ended < w.o.Inputs {
			return nil
		}
		w.minutes.Early(w.emitRunning)
		w.late.Flush(w.emitLate)
		rd.Write, rd.Done = true, true
	default:
		return fmt.Errorf("operator: window subtask %d: unexpected %v message", w.o.Index, m.Kind)
	}
	return nil
}

func (w *Win) puts() int {
	n := 0
	for _, p := range w.rd.Puts {
		n += len(p)
	}
	return n
}

// tick runs the processing-time trigger: running totals every
// EarlyFiringMs of the slowest input's processing time, with the late
// totals and the pending row writes.
func (w *Win) tick(from int, procMs int64) {
	if procMs > w.procs[from] {
		w.procs[from] = procMs
	}
	p := slices.Min(w.procs)
	if p <= w.proc {
		return
	}
	w.proc = p
	if w.nextEarl == 0 {
		w.nextEarl = p + w.o.EarlyFiringMs
		return
	}
	if p < w.nextEarl {
		return
	}
	w.nextEarl = p + w.o.EarlyFiringMs
	w.minutes.Early(w.emitRunning)
	w.late.Flush(w.emitLate)
	w.rd.Write = true
}

func (w *Win) total(r windowing.Running) sink.Total {
	return sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch}
}

// emit writes a closed minute (with the closed-row condition) or an hour's
// fast roll-up, and its running total in the same epoch: a minute's final
// total, and an hour's total as of this row.
func (w *Win) emit(r windowing.Row) {
	k := sink.Key{Entity: r.Ad, Bucket: sink.MinuteBucket(r.StartMs)}
	if r.Hour {
		k.Bucket = sink.HourBucket(r.StartMs)
		w.rd.Firings.Hour++
	} else {
		w.rd.Firings.Minute++
	}
	w.tots = append(w.tots, sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.RunValid, SpendMicros: r.RunSpend, Epoch: w.epoch})
	w.rd.Puts[fastIdx] = append(w.rd.Puts[fastIdx], sink.Put{Key: k, Writer: sink.Fast, Valid: r.Valid, SpendMicros: r.SpendMicros,
		Epoch: w.epoch, Gen: w.o.Gen, ClosedRow: !r.Hour, RestoredCkpt: w.o.Restored})
}

func (w *Win) emitRunning(r windowing.Running) {
	w.rd.Firings.Early++
	w.tots = append(w.tots, w.total(r))
}

func (w *Win) emitLate(t latepath.Total) {
	w.rd.Puts[lateIdx] = append(w.rd.Puts[lateIdx], sink.Put{Key: sink.Key{Entity: t.Ad, Bucket: sink.HourBucket(t.HourMs)},
		Writer: sink.Late, Valid: t.Valid, SpendMicros: t.SpendMicros, Epoch: w.epoch, Gen: w.o.Gen})
}
