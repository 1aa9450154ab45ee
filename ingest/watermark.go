package ingest

import (
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"math"
	"slices"
	"strings"
)

// Watermark defaults, in milliseconds (DESIGN.md §4).
const (
	// DefaultAllowanceMs is the out-of-orderness allowance: how far behind the
	// newest event time of a shard a record may be and still be expected.
	DefaultAllowanceMs int64 = 5000
	// DefaultIntervalMs is the watermark emission interval in processing time
	// (Flink's pipeline.auto-watermark-interval).
	DefaultIntervalMs int64 = 200
	// DefaultIdleMs is the shard idleness timeout in processing time.
	DefaultIdleMs int64 = 30000
)

// eventtime.NoWatermark means "no watermark yet": a shard before its first
// record and first tick, or a job before every active shard has one. It is
// below every real event time, so no window fires on it.

// WatermarkOptions configures watermark generation. All values are
// milliseconds; a zero IntervalMs or IdleMs means its default (see
// EnsureDefaults). AllowanceMs is taken as given: zero is a real allowance.
type WatermarkOptions struct {
	// AllowanceMs is the bounded out-of-orderness allowance. A shard's
	// watermark is its highest event time − AllowanceMs − 1 ms. Zero means
	// zero (a watermark right behind the newest event, seed 002's bound-0
	// drill); callers that want the default pass DefaultAllowanceMs.
	AllowanceMs int64
	// IntervalMs is the processing time between two emission ticks.
	// Default 200.
	IntervalMs int64
	// IdleMs is the idleness timeout: a shard is marked idle at the first
	// tick at which more than IdleMs of processing time have passed since the
	// first tick that saw no new records from it. Default 30000.
	IdleMs int64
}

// EnsureDefaults fills a zero IntervalMs or IdleMs with its default and
// returns o; AllowanceMs is left alone (zero is meaningful). It leaves
// negative values alone so that Validate can report them. A nil o yields a
// new options value holding the defaults, with the default allowance.
func (o *WatermarkOptions) EnsureDefaults() *WatermarkOptions {
	if o == nil {
		o = &WatermarkOptions{AllowanceMs: DefaultAllowanceMs}
	}
	if o.IntervalMs == 0 {
		o.IntervalMs = DefaultIntervalMs
	}
	if o.IdleMs == 0 {
		o.IdleMs = DefaultIdleMs
	}
	return o
}

// Validate reports every problem with o, joined into one error, or nil. It
// expects EnsureDefaults to have run: a zero IntervalMs is reported.
func (o *WatermarkOptions) Validate() error {
	if o == nil {
		return errors.New("ingest: watermark options: nil options")
	}
	var errs []error
	if o.AllowanceMs < 0 {
		errs = append(errs, fmt.Errorf("ingest: watermark options: allowance %d ms is negative", o.AllowanceMs))
	}
	if o.IntervalMs <= 0 {
		errs = append(errs, fmt.Errorf("ingest: watermark options: emission interval %d ms is not positive", o.IntervalMs))
	}
	if o.IdleMs < 0 {
		errs = append(errs, fmt.Errorf("ingest: watermark options: idle timeout %d ms is negative", o.IdleMs))
	}
	return errors.Join(errs...)
}

// ReaderState is what a shard's reader last reported about its reads, as
// data delivered in order with its records (a Kinesis source reports it
// with each change: MillisBehindLatest of a successful GetRecords call or
// subscription event, or a refused call). It decides whether a quiet shard
// may be marked idle: only a reader that is caught up may be, because a
// reader that is behind, throttled or failing has records still to deliver.
type ReaderState uint8

// Reader states.
const (
	// ReaderUnknown: the source reports nothing about its reader (a file
	// replay, a generator). Idleness is quiet time alone.
	ReaderUnknown ReaderState = iota
	// ReaderCaughtUp: the last successful read found nothing more in the
	// shard (MillisBehindLatest 0).
	ReaderCaughtUp
	// ReaderBehind: the last successful read left records in the shard,
	// or the reader has not read yet.
	ReaderBehind
	// ReaderThrottled: the last read was refused for throughput
	// (ProvisionedThroughputExceededException).
	ReaderThrottled
	// ReaderFailing: the last read failed otherwise.
	ReaderFailing
)

// String returns the state's name, as the status page shows it.
func (r ReaderState) String() string {
	switch r {
	case ReaderCaughtUp:
		return "caught_up"
	case ReaderBehind:
		return "behind"
	case ReaderThrottled:
		return "throttled"
	case ReaderFailing:
		return "failing"
	}
	return "unknown"
}

// mayIdle reports whether a quiet shard whose reader is in state r may be
// marked idle.
func (r ReaderState) mayIdle() bool { return r == ReaderUnknown || r == ReaderCaughtUp }

// ShardWatermark is one shard's watermark state, as reported by Shards.
// Times are Unix milliseconds; math.MinInt64 (NoWatermark) means "none yet".
type ShardWatermark struct {
	// ID is the shard id.
	ID string
	// Watermark is the shard's watermark as of the last tick: MaxEventMs −
	// allowance − 1 ms, or eventtime.NoWatermark before its first record and tick.
	Watermark int64
	// MaxEventMs is the highest event time read from the shard so far,
	// including records read since the last tick; math.MinInt64 if none.
	MaxEventMs int64
	// Idle reports whether the last tick found the shard idle, so that it is
	// left out of the job watermark. It clears at the first tick after the
	// shard reads a record.
	Idle bool
	// Closed reports whether the shard was read to its end (CloseShard).
	Closed bool
	// LastRecordMs is the processing time of the shard's last record;
	// math.MinInt64 if none.
	LastRecordMs int64
	// Reader is what the shard's reader last reported (Reader).
	Reader ReaderState
}

// wmShard is the mutable state of one shard.
type wmShard struct {
	id         string
	maxEvent   int64 // highest event time read; valid when records > 0
	wm         int64 // watermark published at the last tick
	records    uint64
	seen       uint64 // records as of the last tick
	quietSince int64  // processing time of the first tick that saw no records
	timing     bool   // the idle timer is running (quietSince is valid)
	idle       bool
	closed     bool
	lastRecord int64
	reader     ReaderState
}

// Watermarks generates per-shard watermarks, tracks shard idleness and
// combines them into the job watermark, the way a Flink source with
// WatermarkStrategy.forBoundedOutOfOrderness(...).withIdleness(...) does per
// split. It is a deterministic state machine: processing time is always an
// argument, and it starts no goroutines and does no I/O.
//
// The driver calls Observe for every record read, and Tick whenever Due
// reports that an emission is due (every IntervalMs of processing time).
// Watermarks change only at ticks, as Flink's periodic emission makes them
// visible only every 200 ms. A replay driven by a virtual clock gets the same
// ticks as a live run by ticking at NextTickMs before each record:
//
//	for w.Due(procMs) {
//		wm, advanced := w.Tick(w.NextTickMs())
//		// forward wm downstream if advanced
//	}
//	w.Observe(shard, eventMs, procMs)
//
// Watermarks are not checkpointed: after a restore the driver starts a new
// Watermarks, which has no watermark until every shard has one or is idle
// (the lateness floor that covers this gap lives downstream).
//
// A Watermarks is not safe for concurrent use; one source driver owns it.
type Watermarks struct {
	opts     WatermarkOptions
	shards   map[string]*wmShard
	sorted   []*wmShard // the same shards, by id
	last     *wmShard   // the shard of the last Observe, to skip the map
	job      int64
	started  bool  // a shard has been added, so ticks are scheduled
	nextTick int64 // processing time at which the next tick is due
	final    bool
}

// NewWatermarks returns a Watermarks with options o. Zero fields take their
// defaults; a negative field (which Validate rejects) is also replaced by its
// default, so that a bad option never yields a broken generator. Callers that
// want to refuse bad options call o.Validate first.
func NewWatermarks(o WatermarkOptions) *Watermarks {
	if o.AllowanceMs < 0 {
		o.AllowanceMs = DefaultAllowanceMs
	}
	if o.IntervalMs < 0 {
		o.IntervalMs = DefaultIntervalMs
	}
	if o.IdleMs < 0 {
		o.IdleMs = DefaultIdleMs
	}
	o.EnsureDefaults()
	return &Watermarks{
		opts:   o,
		shards: make(map[string]*wmShard),
		job:    eventtime.NoWatermark,
	}
}

// Options returns the options in use, defaults filled in.
func (w *Watermarks) Options() WatermarkOptions { return w.opts }

// AddShard registers shard id, which starts being read at processing time
// procMs. Its watermark is NoWatermark until its first record has been read
// and a tick has run; until then the job watermark is NoWatermark (or holds
// its value, if it already had one), unless the shard goes idle first. The
// first AddShard schedules the first tick at procMs + IntervalMs. Adding a
// known id (including a closed one) does nothing.
func (w *Watermarks) AddShard(id string, procMs int64) {
	w.addShard(id, procMs)
}

func (w *Watermarks) addShard(id string, procMs int64) *wmShard {
	if s, ok := w.shards[id]; ok {
		return s
	}
	s := &wmShard{
		id:         id,
		maxEvent:   math.MinInt64,
		wm:         eventtime.NoWatermark,
		lastRecord: math.MinInt64,
	}
	w.shards[id] = s
	i, _ := slices.BinarySearchFunc(w.sorted, id, func(s *wmShard, id string) int {
		return strings.Compare(s.id, id)
	})
	w.sorted = slices.Insert(w.sorted, i, s)
	if !w.started {
		w.started = true
		w.nextTick = satAdd(procMs, w.opts.IntervalMs)
	}
	return s
}

// CloseShard marks shard id as read to its end (for example a parent shard
// after a reshard). It leaves the job watermark's minimum for good: it is
// never idle and never rejoins, even if records for it are still observed
// (they update its statistics only). Unknown ids are ignored.
func (w *Watermarks) CloseShard(id string) {
	s, ok := w.shards[id]
	if !ok {
		return
	}
	s.closed = true
	s.idle = false
	s.timing = false
}

// Observe records one record read from shard id: eventMs is its event time
// (already clamped to [impression, arrival]) and procMs the processing time
// at which it was read, both Unix ms. An unknown id is added first. The
// record counts as activity for idleness and raises the shard's highest
// event time; the shard's watermark moves only at the next Tick. Observe does
// not allocate for a known shard.
func (w *Watermarks) Observe(id string, eventMs, procMs int64) {
	s := w.last
	if s == nil || s.id != id {
		var ok bool
		if s, ok = w.shards[id]; !ok {
			s = w.addShard(id, procMs)
		}
		w.last = s
	}
	s.records++
	if eventMs > s.maxEvent {
		s.maxEvent = eventMs
	}
	s.lastRecord = procMs
}

// Reader records what shard id's reader reports about its reads (an
// unknown id is added first, at procMs). It takes effect at the next tick:
// a shard whose reader is behind, throttled or failing is never marked idle,
// however long it delivers nothing, and one already idle becomes active
// again and holds the job watermark (which does not move back). A reader
// reports a state after the records of the read it describes, so a caught-up
// report means every record it fetched was observed.
func (w *Watermarks) Reader(id string, st ReaderState, procMs int64) {
	s, ok := w.shards[id]
	if !ok {
		s = w.addShard(id, procMs)
	}
	s.reader = st
}

// Due reports whether an emission tick is due at processing time procMs: at
// least IntervalMs have passed since the last Tick (or since the first
// AddShard, before any tick). It is false before any shard was added and
// after Final.
func (w *Watermarks) Due(procMs int64) bool {
	return w.started && !w.final && procMs >= w.nextTick
}

// NextTickMs returns the processing time (Unix ms) at which the next tick is
// due: IntervalMs after the last Tick, or after the first AddShard before
// any tick. It is math.MaxInt64 before any shard was added and after Final.
func (w *Watermarks) NextTickMs() int64 {
	if !w.started || w.final {
		return math.MaxInt64
	}
	return w.nextTick
}

// Tick is the periodic emission at processing time procMs. It returns the
// job watermark and whether it moved forward. For each shard, in order:
//
//   - If records were read since the previous tick, the shard is active (an
//     idle shard rejoins here), its idle timer stops, and its watermark
//     becomes max(its watermark, highest event time − AllowanceMs − 1 ms).
//   - Otherwise, if its idle timer is not running, it starts now: this is
//     the first tick that sees no records (also for a shard that has never
//     read one). If the timer is running and more than IdleMs have passed
//     since it started, the shard is marked idle, provided its reader is
//     caught up (or reports nothing, ReaderUnknown). With the defaults a
//     quiet shard is thus marked idle 30.2 s after the first quiet tick. A
//     shard whose reader is behind, throttled or failing is not idle, and
//     one that was idle becomes active again: it holds the job watermark,
//     because its records are still to come.
//
// The job watermark is then the minimum of the watermarks of the active
// (neither idle nor closed) shards, taken only if every active shard has a
// watermark, and it never moves backwards: a candidate below the current
// value (for instance when an idle shard with an old watermark rejoins, or a
// new shard has none yet) leaves it where it is.
//
// When no shard is active (all idle or closed), the job watermark holds
// where it is. It does not jump to the highest shard watermark, as recent
// Flink versions do: a stream that is merely quiet must not close windows
// that a slow shard may still feed, because every click those windows then
// receive would be late. The cost is that nothing closes during a full
// silence; the hold ends when any shard reads again, and Final fires every
// window at the end of bounded input.
//
// After Final, Tick returns math.MaxInt64 and false.
func (w *Watermarks) Tick(procMs int64) (wm int64, advanced bool) {
	w.nextTick = satAdd(procMs, w.opts.IntervalMs)
	if w.final {
		return w.job, false
	}
	cand := int64(math.MaxInt64)
	active, complete := false, true
	for _, s := range w.sorted {
		switch {
		case s.records != s.seen:
			s.seen = s.records
			s.timing = false
			s.idle = false
			m := satSub(satSub(s.maxEvent, w.opts.AllowanceMs), 1)
			if m == eventtime.NoWatermark {
				// A shard that has read a record has a watermark, even
				// for an event time this close to math.MinInt64.
				m = eventtime.NoWatermark + 1
			}
			s.wm = max(s.wm, m)
		case s.closed:
		case !s.timing:
			s.timing = true
			s.quietSince = procMs
		case !s.reader.mayIdle():
			s.idle = false
		case !s.idle && satSub(procMs, s.quietSince) > w.opts.IdleMs:
			s.idle = true
		}
		if s.closed || s.idle {
			continue
		}
		active = true
		if s.wm == eventtime.NoWatermark {
			complete = false
			continue
		}
		cand = min(cand, s.wm)
	}
	if active && complete && cand > w.job {
		w.job = cand
		return w.job, true
	}
	return w.job, false
}

// Current returns the job watermark as of the last Tick (or Final), in Unix
// ms; NoWatermark before the first one.
func (w *Watermarks) Current() int64 { return w.job }

// Final marks the end of bounded input (a file replay): the job watermark
// becomes math.MaxInt64, which fires every window, and stays there. It
// returns math.MaxInt64.
func (w *Watermarks) Final() int64 {
	w.final = true
	w.job = math.MaxInt64
	return w.job
}

// Shards returns every shard's state, sorted by id. The slice is new on
// every call.
func (w *Watermarks) Shards() []ShardWatermark {
	out := make([]ShardWatermark, len(w.sorted))
	for i, s := range w.sorted {
		out[i] = ShardWatermark{
			ID:           s.id,
			Watermark:    s.wm,
			MaxEventMs:   s.maxEvent,
			Idle:         s.idle,
			Closed:       s.closed,
			LastRecordMs: s.lastRecord,
			Reader:       s.reader,
		}
	}
	return out
}

// Lag returns the watermark lag at processing time procMs: procMs − wm, in
// ms. It is math.MaxInt64 when wm is NoWatermark (event time has not
// started, so the lag is unbounded: an alarm on it fires if the job never
// gets a watermark) and 0 when wm is at or past procMs (after Final, or
// clock skew). A gauge exporter may report math.MaxInt64 as +Inf.
func Lag(procMs, wm int64) int64 {
	if wm == eventtime.NoWatermark {
		return math.MaxInt64
	}
	if wm >= procMs {
		return 0
	}
	return satSub(procMs, wm)
}

// satAdd returns a + b, saturated at the int64 bounds; b must be >= 0.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satSub returns a − b, saturated at the int64 bounds.
func satSub(a, b int64) int64 {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		if b > 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return d
}
