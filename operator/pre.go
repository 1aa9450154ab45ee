package operator

import (
	"fmt"

	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/windowing"
)

// Prefetcher is an optional capability of a pre-aggregator's dedup store:
// told the ids of a batch before they are judged, it can start reading them
// (state.Dedup warms its block cache).
type Prefetcher interface {
	Prefetch(kg int, ad, id string, expiryMs int64)
}

// PreOptions configures a Pre.
type PreOptions struct {
	Index int // this subtask
	// Windows is the number of window subtasks partials are routed to.
	Windows int
	// HorizonMs is the acceptance horizon: a dedup id expires at its
	// impression plus the horizon (what a Prefetcher is told).
	HorizonMs int64
	// Epoch is the epoch of the first lake records: the checkpoint the job
	// restored from.
	Epoch int64
	// NewPartials, if set, returns an empty slice for partials on their way
	// to a window subtask (the runtime recycles them); nil allocates.
	NewPartials func() []preagg.Partial
}

// PreAck is a pre-aggregator's acknowledgement of a barrier.
type PreAck struct {
	Ckpt      int64
	Floor     int64 // the floor candidate the checkpoint saves
	Forgotten int64 // dedup: ids with expiry below it are gone (preagg.PreAgg.Forgotten)
	// PrevEpoch is the epoch of every lake record judged before the
	// barrier: they must be flushed before the acknowledgement.
	PrevEpoch int64
}

// PreReady is what a Pre decided in one Step.
type PreReady struct {
	// Sends are the messages for the window subtasks, in order.
	Sends []Send
	// Lake holds the record of every click judged, in the order of the
	// batch, with epoch LakeEpoch.
	Lake      []latepath.Record
	LakeEpoch int64
	// Verdicts counts the verdicts, by preagg.Verdict.
	Verdicts [preagg.GuardExpired + 1]int
	// LateByMs holds, for every late click, how far its event time lies
	// behind the judge time (for the lateness histogram).
	LateByMs []int64
	// Partials is the number of partial sums forwarded.
	Partials int
	// Ack is set by a barrier.
	Ack *PreAck
	// Done is set at the end of input: flush the lake (epoch LakeEpoch) and
	// stop.
	Done bool
}

// Pre is a pre-aggregator subtask as a machine. Create it with NewPre.
type Pre struct {
	o     PreOptions
	pa    *preagg.PreAgg
	pf    Prefetcher
	epoch int64
	kgs   []int
	parts [][]preagg.Partial
	late  [][]LateClick
	rd    PreReady
	ack   PreAck
}

// NewPre returns a Pre judging with pa, whose dedup store is d (nil when
// dedup is off).
func NewPre(o PreOptions, pa *preagg.PreAgg, d preagg.Dedup) (*Pre, error) {
	if o.Windows < 1 || o.Windows > windowing.MaxParallelism {
		return nil, fmt.Errorf("operator: %d window subtasks out of range", o.Windows)
	}
	p := &Pre{o: o, pa: pa, epoch: o.Epoch, parts: make([][]preagg.Partial, o.Windows), late: make([][]LateClick, o.Windows)}
	p.pf, _ = d.(Prefetcher)
	p.rd.LakeEpoch = o.Epoch
	return p, nil
}

// PreAgg returns the pre-aggregator the machine drives.
func (p *Pre) PreAgg() *preagg.PreAgg { return p.pa }

// Ready returns what the Steps since the last Advance decided.
func (p *Pre) Ready() *PreReady { return &p.rd }

// Advance tells the machine its Ready was carried out.
func (p *Pre) Advance() {
	rd := &p.rd
	clear(rd.Sends)
	rd.Sends = rd.Sends[:0]
	clear(rd.Lake)
	rd.Lake = rd.Lake[:0]
	rd.LateByMs = rd.LateByMs[:0]
	rd.Verdicts = [len(rd.Verdicts)]int{}
	rd.Partials = 0
	rd.Ack = nil
	rd.Done = false
	rd.LakeEpoch = p.epoch
}

// Step handles one message from the source.
func (p *Pre) Step(m Msg) error {
	switch m.Kind {
	case Clicks:
		return p.clicks(m)
	case Tick:
		if err := p.tick(m.ProcMs); err != nil {
			return err
		}
		p.broadcast(Msg{Kind: Tick, ProcMs: m.ProcMs})
	case Watermark:
		// A due interval flush and the watermark's own flush both go out
		// before the watermark (rule 3: every buffered partial before it).
		if err := p.tick(m.ProcMs); err != nil {
			return err
		}
		parts, err := p.pa.Watermark(m.Wm)
		if err != nil {
			return err
		}
		p.forward(parts, CauseWatermark, m.ProcMs)
		p.broadcast(Msg{Kind: Watermark, Wm: m.Wm, ProcMs: m.ProcMs})
	case Barrier:
		parts, floor := p.pa.Barrier()
		p.forward(parts, CauseBarrier, m.ProcMs)
		p.broadcast(Msg{Kind: Barrier, Ckpt: m.Ckpt, ProcMs: m.ProcMs})
		p.ack = PreAck{Ckpt: m.Ckpt, Floor: floor, Forgotten: p.pa.Forgotten(), PrevEpoch: p.epoch}
		p.rd.Ack = &p.ack
		p.epoch = m.Ckpt
	case Rewrite, TotalsLost:
		p.broadcast(Msg{Kind: m.Kind, ProcMs: m.ProcMs})
	case End:
		p.forward(p.pa.Flush(), CauseEnd, m.ProcMs)
		p.broadcast(Msg{Kind: End, ProcMs: m.ProcMs})
		p.rd.Done = true
	default:
		return fmt.Errorf("operator: pre-aggregator %d: unexpected %v message", p.o.Index, m.Kind)
	}
	return nil
}

func (p *Pre) clicks(m Msg) error {
	kgs := p.kgs[:0]
	for i := range m.Clicks {
		c := &m.Clicks[i]
		kgs = append(kgs, windowing.KeyGroup(c.ClickID))
		if p.pf != nil {
			p.pf.Prefetch(kgs[i], c.AdID, c.ClickID, c.ImpressionMs+p.o.HorizonMs)
		}
	}
	p.kgs = kgs
	rd := &p.rd
	for i := range m.Clicks {
		c := &m.Clicks[i]
		v, err := p.pa.Add(c, kgs[i])
		if err != nil {
			return err
		}
		if v == preagg.Late {
			rd.LateByMs = append(rd.LateByMs, p.pa.Judge()-c.EventMs)
			o := windowing.Owner(windowing.KeyGroup(c.AdID), p.o.Windows)
			p.late[o] = append(p.late[o], LateClick{Ad: c.AdID, EventMs: c.EventMs, SpendMicros: c.SpendMicros})
		}
		if int(v) < len(rd.Verdicts) {
			rd.Verdicts[v]++
		}
		rd.Lake = append(rd.Lake, Record(c, v.String()))
	}
	return p.tick(m.ProcMs)
}

// tick forwards what the pre-aggregation interval lets go.
func (p *Pre) tick(procMs int64) error {
	parts, err := p.pa.Tick(procMs)
	if err != nil {
		return err
	}
	p.forward(parts, CauseInterval, procMs)
	return nil
}

// forward routes partials by their ad's key group, with the late clicks
// pending, to the window subtasks.
func (p *Pre) forward(parts []preagg.Partial, cause Cause, procMs int64) {
	p.rd.Partials += len(parts)
	for _, pt := range parts {
		o := windowing.Owner(windowing.KeyGroup(pt.Ad), p.o.Windows)
		if p.parts[o] == nil {
			if p.o.NewPartials != nil {
				p.parts[o] = p.o.NewPartials()
			} else {
				p.parts[o] = make([]preagg.Partial, 0, 16)
			}
		}
		p.parts[o] = append(p.parts[o], pt)
	}
	for o := range p.parts {
		if len(p.parts[o]) == 0 && len(p.late[o]) == 0 {
			continue
		}
		p.rd.Sends = append(p.rd.Sends, Send{To: o, Msg: Msg{Kind: Clicks, From: p.o.Index, ProcMs: procMs,
			Partials: p.parts[o], Late: p.late[o], Cause: cause}})
		p.parts[o], p.late[o] = nil, nil
	}
}

func (p *Pre) broadcast(m Msg) {
	m.From = p.o.Index
	p.rd.Sends = broadcast(p.rd.Sends, p.o.Windows, m)
}
