package preagg

import (
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"math"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
)

// eventtime.EndOfTime, the watermark of the end of bounded input or of a
// drained stop, fires every window. It is never a real watermark here: it
// never becomes a floor and never expires dedup ids, so a start after it
// (more input appended to a finished file, a restart after
// stop-with-drain) judges clicks against the last real watermark and still
// knows every id.

// Verdict is what the pre-aggregator decided about one valid click.
type Verdict uint8

const (
	// Counted: on time; folded into a partial for its (ad, minute).
	Counted Verdict = iota + 1
	// Late: its minute had closed by the judge time; it goes, alone, to the
	// late path.
	Late
	// Duplicate: its click id was already seen with the same ad within the
	// horizon.
	Duplicate
	// BeyondHorizon: its impression is more than the acceptance horizon
	// before the judge time; it is rejected as stale.
	BeyondHorizon
	// GuardExpired: within the horizon, but its id may have been forgotten
	// by the processing-time guard (the watermark was stuck for a day): it
	// is rejected, because a copy of a forgotten id cannot be told from a
	// first click.
	GuardExpired
)

// String returns the verdict as written in the exceptions log.
func (v Verdict) String() string {
	switch v {
	case Counted:
		return latepath.VerdictCounted
	case Late:
		return latepath.VerdictLate
	case Duplicate:
		return latepath.VerdictDuplicate
	case BeyondHorizon:
		return latepath.VerdictBeyondHorizon
	case GuardExpired:
		return latepath.VerdictGuardExpired
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Dedup holds clicks, identified by (ad, click id), until their event-time
// expiry. Implementations: MemDedup here, and the Pebble-backed store in
// package state.
type Dedup interface {
	// Insert records the click (ad, id), whose click id is in key group
	// kg, with its expiry (Unix ms) and reports whether it was new. The
	// same id with another ad is another click.
	Insert(kg int, ad, id string, expiryMs int64) (inserted bool, err error)
	// Expire forgets the clicks of key groups [kgFrom, kgTo) whose expiry
	// lies before beforeMs. It may keep them slightly longer (whole
	// buckets), never shorter.
	Expire(kgFrom, kgTo int, beforeMs int64) error
}

// Options configures a PreAgg. Zero fields take the defaults noted.
type Options struct {
	WindowMs        int64 // window size; default 60,000 (one minute)
	HorizonMs       int64 // acceptance horizon after the impression; default 7,200,000 (2 h)
	GuardMs         int64 // processing-time guard on dedup ids; default 93,600,000 (26 h)
	FlushIntervalMs int64 // partial buffer interval (processing time); default 500
	// AllowanceMs is the job's out-of-orderness allowance, taken as given
	// (zero is zero). The horizon check judges a click against
	// max(floor, watermark, arrival − AllowanceMs − 1 ms): the rule the
	// batch recount uses, so the stream rejects what the recount rejects
	// even before its watermark has formed (a cold start, a catch-up, the
	// first records after a restore).
	AllowanceMs int64
	// NoDedup turns duplicate detection off (benchmarks only: a billing job
	// must dedup).
	NoDedup bool
}

// The defaults of Options: the job's, in one place (the command line, the
// runtime, the recount and the scenario harness take them from here).
const (
	DefaultWindowMs        = eventtime.MinuteMs
	DefaultHorizonMs       = 2 * eventtime.HourMs  // seed 001's acceptance horizon
	DefaultGuardMs         = 26 * eventtime.HourMs // the processing-time guard on dedup ids
	DefaultFlushIntervalMs = 500
)

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.WindowMs == 0 {
		o.WindowMs = DefaultWindowMs
	}
	if o.HorizonMs == 0 {
		o.HorizonMs = DefaultHorizonMs
	}
	if o.GuardMs == 0 {
		o.GuardMs = DefaultGuardMs
	}
	if o.FlushIntervalMs == 0 {
		o.FlushIntervalMs = DefaultFlushIntervalMs
	}
}

// Validate reports every problem with the options.
func (o *Options) Validate() error {
	var errs []error
	if o.WindowMs <= 0 || 3_600_000%o.WindowMs != 0 {
		errs = append(errs, fmt.Errorf("window %d ms must be positive and divide an hour", o.WindowMs))
	}
	if o.HorizonMs <= 0 {
		errs = append(errs, fmt.Errorf("horizon %d ms must be positive", o.HorizonMs))
	}
	if o.GuardMs < o.HorizonMs {
		errs = append(errs, fmt.Errorf("guard %d ms must be at least the horizon %d ms", o.GuardMs, o.HorizonMs))
	}
	if o.AllowanceMs < 0 {
		errs = append(errs, fmt.Errorf("allowance %d ms must not be negative", o.AllowanceMs))
	}
	if o.FlushIntervalMs <= 0 {
		errs = append(errs, fmt.Errorf("flush interval %d ms must be positive", o.FlushIntervalMs))
	}
	return joinErrs("preagg: options", errs)
}

// Partial is the buffered sum of counted clicks for one ad and one window.
type Partial struct {
	Ad          string
	WindowStart int64 // Unix ms
	Count       int64
	SpendMicros int64
}

// Stats counts what a PreAgg decided. Plain counters: the runtime exports
// them as metrics.
type Stats struct {
	Counted, Late, Duplicate, BeyondHorizon, GuardExpired int64
	PartialsOut                                           int64
}

type partialKey struct {
	ad  string
	win int64
}

// PreAgg is one pre-aggregator subtask. It is not safe for concurrent use.
type PreAgg struct {
	o             Options
	dedup         Dedup
	kgFrom, kgTo  int
	wm            int64 // the current watermark
	floor         int64 // the restored floor
	candidate     int64 // floor_candidate: the latest watermark
	index         map[partialKey]int
	buf           []Partial
	out           []Partial
	lastFlushMs   int64
	lastGuardMs   int64
	procMs        int64 // the latest processing time (Tick)
	wmMovedMs     int64 // processing time the watermark last advanced
	expiredBefore int64
	// forgotten is the expiry (impression + horizon) below which the
	// processing-time guard may have forgotten ids: monotone, saved with
	// every checkpoint and restored as the maximum, so no restart and no
	// move of the watermark makes a forgotten id look new.
	forgotten int64
	stats     Stats
	started   bool
}

// New returns a pre-aggregator owning the dedup key groups [kgFrom, kgTo).
// d may be nil only when o.NoDedup is set.
func New(o Options, d Dedup, kgFrom, kgTo int) (*PreAgg, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if d == nil && !o.NoDedup {
		return nil, fmt.Errorf("preagg: a dedup store is required")
	}
	return &PreAgg{
		o: o, dedup: d, kgFrom: kgFrom, kgTo: kgTo,
		wm: eventtime.NoWatermark, floor: eventtime.NoWatermark, candidate: eventtime.NoWatermark,
		expiredBefore: eventtime.NoWatermark, forgotten: eventtime.NoWatermark,
		index: make(map[partialKey]int),
	}, nil
}

// Judge returns max(floor, watermark): the time every click is judged
// against.
func (p *PreAgg) Judge() int64 { return max(p.floor, p.wm) }

// Watermark returns the latest watermark received.
func (p *PreAgg) CurrentWatermark() int64 { return p.wm }

// ArrivalJudge is the least judge a click that arrived at arrivalMs meets:
// the watermark its own arrival would make if it were the newest click
// (arrival − allowance − 1). The horizon is checked against the larger of
// it and the watermark, so a click is judged by when it arrived even on a
// shard whose watermark lags; the recount judges with it alone, and
// adclick put warns with it, the put's time standing in for the arrival.
func ArrivalJudge(arrivalMs, allowanceMs int64) int64 { return arrivalMs - allowanceMs - 1 }

// PastHorizon reports whether a click of that impression is beyond the
// acceptance horizon for judge (impression < judge − horizon): the one rule
// of the stream, the recount and put's warning.
func PastHorizon(impressionMs, judge, horizonMs int64) bool {
	return judge != eventtime.NoWatermark && impressionMs < judge-horizonMs
}

// Floor returns the restored floor (NoWatermark when none).
func (p *PreAgg) Floor() int64 { return p.floor }

// Stats returns the counters so far.
func (p *PreAgg) Stats() Stats { return p.stats }

// WindowStart returns the start of the window holding t.
func (p *PreAgg) WindowStart(t int64) int64 {
	return eventtime.Start(t, p.o.WindowMs)
}

// Add judges one valid click (its EventMs already clamped) whose click id is
// in key group kg. The checks run in this order:
//
//  1. horizon: impression + horizon < max(judge, arrival − allowance − 1)
//     → BeyondHorizon (not remembered, so it can never shadow a later
//     copy); then, if impression + horizon is below the bound under which
//     the processing-time guard may have forgotten ids → GuardExpired;
//  2. dedup: (ad, click id) is inserted with expiry impression + horizon;
//     if it was present → Duplicate, whatever the copy's other fields (the
//     first copy read wins; late copies of a late click are duplicates
//     too). A copy with another ad is another click, counted for its ad:
//     the ads' owners may be different workers, which cannot know of each
//     other's copies (docs/scale-out.md §3.2);
//  3. lateness: if its window's last millisecond (end − 1) ≤ judge → Late;
//     the caller sends it, alone, to the late path — it is never folded
//     into a partial;
//  4. otherwise it is added to the buffered partial of (ad, window) → Counted.
//
// judge = max(floor, watermark), so a restored job never judges a click
// against a watermark below the checkpoint's (WATERMARK FLOOR).
func (p *PreAgg) Add(c *ingest.Click, kg int) (Verdict, error) {
	judge := p.Judge()
	hj := judge
	if c.ArrivalMs > 0 {
		hj = max(hj, ArrivalJudge(c.ArrivalMs, p.o.AllowanceMs))
	}
	if PastHorizon(c.ImpressionMs, hj, p.o.HorizonMs) {
		p.stats.BeyondHorizon++
		return BeyondHorizon, nil
	}
	if p.forgotten != eventtime.NoWatermark && c.ImpressionMs < p.forgotten-p.o.HorizonMs ||
		p.guardActive() && c.ImpressionMs < p.procMs-p.o.GuardMs {
		p.stats.GuardExpired++
		return GuardExpired, nil
	}
	if !p.o.NoDedup {
		ok, err := p.dedup.Insert(kg, c.AdID, c.ClickID, c.ImpressionMs+p.o.HorizonMs)
		if err != nil {
			return 0, fmt.Errorf("preagg: dedup insert: %w", err)
		}
		if !ok {
			p.stats.Duplicate++
			return Duplicate, nil
		}
	}
	start := p.WindowStart(c.EventMs)
	if eventtime.Closed(start, p.o.WindowMs, judge) {
		p.stats.Late++
		return Late, nil
	}
	k := partialKey{c.AdID, start}
	if i, ok := p.index[k]; ok {
		p.buf[i].Count++
		p.buf[i].SpendMicros += c.SpendMicros
	} else {
		p.index[k] = len(p.buf)
		p.buf = append(p.buf, Partial{Ad: c.AdID, WindowStart: start, Count: 1, SpendMicros: c.SpendMicros})
	}
	p.stats.Counted++
	return Counted, nil
}

// Tick tells the pre-aggregator that processing time is procMs. Every
// FlushIntervalMs it returns the buffered partials to forward (nil
// otherwise); it also applies the processing-time guard on dedup ids.
// The returned slice is valid until the next call that returns partials.
func (p *PreAgg) Tick(procMs int64) ([]Partial, error) {
	if !p.started {
		p.started = true
		p.lastFlushMs, p.lastGuardMs, p.wmMovedMs = procMs, procMs, procMs
	}
	p.procMs = max(p.procMs, procMs)
	if !p.o.NoDedup && p.guardActive() && procMs-p.lastGuardMs >= 60_000 {
		p.lastGuardMs = procMs
		// The guard: with the watermark stuck, ids whose impression is more
		// than GuardMs before processing time go (their expiry lies before
		// procMs - GuardMs + HorizonMs). The bound is remembered for good
		// (and checkpointed), and Add rejects every click below it as
		// guard_expired, so no copy of a forgotten id is counted, whatever
		// the watermark or the guard does next.
		before := procMs - p.o.GuardMs + p.o.HorizonMs
		p.forgotten = max(p.forgotten, before)
		if err := p.expire(before); err != nil {
			return nil, err
		}
	}
	if procMs-p.lastFlushMs < p.o.FlushIntervalMs {
		return nil, nil
	}
	p.lastFlushMs = procMs
	return p.Flush(), nil
}

// Watermark receives a new watermark. It returns every buffered partial,
// which the caller must forward BEFORE forwarding the watermark (rule 3 of
// PRE-AGGREGATE), then updates the watermark and the floor candidate and
// expires dedup ids that the horizon can no longer accept. A watermark
// lower than the current one is ignored (watermarks never go back).
//
// EndOfTime is not a real watermark: it flushes the partials and is passed
// on, but it changes neither the watermark, nor the floor candidate, nor
// the dedup ids. A checkpoint after it saves the last real watermark as the
// floor, so a later start (more input) judges clicks as the run before the
// end did, and still knows every id it counted.
func (p *PreAgg) Watermark(wm int64) ([]Partial, error) {
	out := p.Flush()
	if wm <= p.wm || wm == eventtime.EndOfTime {
		return out, nil
	}
	p.wm = wm
	p.wmMovedMs = p.procMs
	// Never below what was restored: after a restore the first watermarks
	// can lie under the floor, and saving one of them at the next barrier
	// would lower the floor a later restore judges by.
	p.candidate = max(p.candidate, wm)
	if !p.o.NoDedup && wm != eventtime.NoWatermark {
		// Any copy of an id whose expiry (impression + horizon) is before
		// wm has impression < wm - horizon ≤ judge - horizon: it is beyond
		// the horizon, so the id is no longer needed.
		if err := p.expire(wm); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (p *PreAgg) expire(before int64) error {
	if before <= p.expiredBefore {
		return nil
	}
	// Expire whole minutes only: cheap, and a bucket boundary is where the
	// store can drop anything.
	if eventtime.FloorDiv(before, 60_000) == eventtime.FloorDiv(p.expiredBefore, 60_000) && p.expiredBefore != eventtime.NoWatermark {
		return nil
	}
	p.expiredBefore = before
	if err := p.dedup.Expire(p.kgFrom, p.kgTo, before); err != nil {
		return fmt.Errorf("preagg: dedup expire: %w", err)
	}
	return nil
}

// guardActive reports whether the processing-time guard on dedup ids is in
// force: only while the watermark is stuck, that is, has not advanced for
// GuardMs − HorizonMs (24 h by default) of processing time. A job that is
// far behind but progressing (a long catch-up) keeps every id until the
// watermark expires it; a guard anchored to processing time alone would
// forget ids whose copies the horizon still accepts.
func (p *PreAgg) guardActive() bool {
	return p.started && p.procMs-p.wmMovedMs >= p.o.GuardMs-p.o.HorizonMs
}

// Barrier is called when a checkpoint barrier arrives. It returns the
// buffered partials, which the caller must forward before the barrier (the
// buffer is memory, not state: rule 3 at the barrier, seed 001 branch P2),
// and the floor candidate to save with the checkpoint (always a real
// watermark, or NoWatermark).
func (p *PreAgg) Barrier() (partials []Partial, floorCandidate int64) {
	return p.Flush(), p.candidate
}

// Forgotten returns the guard's bound to save with the checkpoint: ids whose
// expiry (impression + horizon) lies below it may have been forgotten.
// NoWatermark when the guard has never expired anything.
func (p *PreAgg) Forgotten() int64 { return p.forgotten }

// RestoreForgotten sets the guard's bound from the values every subtask
// saved at the restored checkpoint: the maximum, so that no id any subtask
// may have forgotten is taken for new, whatever key groups this subtask now
// owns.
func (p *PreAgg) RestoreForgotten(saved []int64) {
	for _, v := range saved {
		p.forgotten = max(p.forgotten, v)
	}
}

// Restore sets the floor from the candidates saved by every subtask at the
// restored checkpoint: the minimum, which is safe whatever keys this subtask
// now owns (the saved values are union list state).
//
// EndOfTime values (saved by older versions at the end of input) are not
// floors and are skipped; if every value is one, no floor is restored.
func (p *PreAgg) Restore(saved []int64) {
	f, ok := int64(math.MaxInt64), false
	for _, v := range saved {
		if v != eventtime.EndOfTime {
			f, ok = min(f, v), true
		}
	}
	if !ok {
		return
	}
	p.floor = f
	p.candidate = max(p.candidate, f)
}

// Flush returns and clears every buffered partial, in the order they were
// first buffered. The returned slice is valid until the next call that
// returns partials.
func (p *PreAgg) Flush() []Partial {
	if len(p.buf) == 0 {
		return nil
	}
	p.out, p.buf = p.buf, p.out[:0]
	clear(p.index)
	p.stats.PartialsOut += int64(len(p.out))
	return p.out
}

// Buffered returns the number of buffered partials.
func (p *PreAgg) Buffered() int { return len(p.buf) }
