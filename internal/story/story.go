package story

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/operator"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// Options configures a Story. All times are milliseconds; a zero field
// takes the runtime's default, noted per field.
type Options struct {
	Parallelism         int   // pre-aggregator and window subtasks; default 1
	BatchSize           int   // clicks per message to a pre-aggregator; default 1
	AllowanceMs         int64 // out-of-orderness allowance; default 5,000
	WatermarkIntervalMs int64 // watermark emission; default 200
	IdleMs              int64 // shard idleness; default 30,000
	WindowMs            int64 // window size; default 60,000
	HorizonMs           int64 // acceptance horizon; default 7,200,000
	GuardMs             int64 // dedup guard; default 93,600,000
	PreaggFlushMs       int64 // pre-aggregation buffer; default 500
	EarlyFiringMs       int64 // running totals; default 1,000
	// FirstCheckpoint is the id of the first checkpoint; default 1. Sink tags
	// start at FirstCheckpoint − 1.
	FirstCheckpoint int64
	NoDedup         bool
}

func (o *Options) ensureDefaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Parallelism == 0 {
		o.Parallelism = 1
	}
	if o.BatchSize == 0 {
		o.BatchSize = 1
	}
	def(&o.AllowanceMs, ingest.DefaultAllowanceMs)
	def(&o.WatermarkIntervalMs, ingest.DefaultIntervalMs)
	def(&o.IdleMs, ingest.DefaultIdleMs)
	def(&o.WindowMs, 60_000)
	def(&o.HorizonMs, preagg.DefaultHorizonMs)
	def(&o.GuardMs, preagg.DefaultGuardMs)
	def(&o.PreaggFlushMs, 500)
	def(&o.EarlyFiringMs, 1_000)
	def(&o.FirstCheckpoint, 1)
}

// Kind is the kind of an Event.
type Kind uint8

// Event kinds.
const (
	EvWatermark  Kind = iota + 1 // the job watermark advanced (Ms = tick time, Wm)
	EvVerdict                    // a click was judged (Click, Verdict)
	EvPartial                    // a pre-aggregator forwarded a partial (Row, Cause)
	EvRow                        // a window subtask emitted a closed minute or hour row (Row)
	EvLate                       // a late total was written (Row, with Late set)
	EvRunning                    // a running total was written (Row)
	EvRefused                    // a minute-row write was refused by the closed-row condition (Row)
	EvCheckpoint                 // a barrier passed (Ckpt, Wm = floor, Verdict "complete" or "aborted")
	EvRestore                    // a checkpoint was restored and the sink flushed (Ckpt, Wm = floor)
)

// RowOut is a row or a total as the harness reports it.
type RowOut struct {
	Ad          string
	StartMs     int64 // start of the window or hour, Unix ms
	Hour        bool  // an hour row (or hour total)
	Late        bool  // a late total (always an hour)
	Valid       int64
	SpendMicros int64
	Epoch       int64 // the sink tag written with it
}

// Event is one thing the core did, in order. Ms is the processing time
// (Unix ms) at which it happened.
type Event struct {
	Kind    Kind
	Ms      int64
	Wm      int64
	Click   *ingest.Click
	Verdict string // "counted", "late", "duplicate", "beyond_horizon", "invalid:<reason>"
	Row     RowOut
	Cause   string // why a partial was forwarded: "interval", "watermark", "barrier", "end"
	Ckpt    int64
}

// Checkpoint is what a completed checkpoint saved.
type Checkpoint struct {
	ID       int64
	Position int // clicks consumed before the barrier
	Floors   []int64
	// Forgotten are the pre-aggregators' dedup bookkeeping
	// (preagg.PreAgg.Forgotten), restored as the runtime restores it.
	Forgotten []int64
	Win       map[int][]byte
	Late      map[int][]byte
	Dedup     map[dedupKey]int64
	TakenMs   int64
	// Partials forwarded before the barrier by each cause, for tests.
	Parallelism int
}

// Floor returns the minimum of the saved floor candidates.
func (c *Checkpoint) Floor() int64 {
	f := int64(math.MaxInt64)
	for _, v := range c.Floors {
		f = min(f, v)
	}
	return f
}

// Story drives the operator machines the runtime runs, one step after
// another on one goroutine. Create it with New.
type Story struct {
	o        Options
	src      *operator.Source
	pres     []*operator.Pre
	dedups   []*snapDedup
	wins     []*operator.Win
	shards   []string
	nextID   int64
	restored int64 // the checkpoint restored from (the sink's :c), or FirstCheckpoint−1
	position int
	ckpts    map[int64]*Checkpoint
	ck       *Checkpoint // the checkpoint being taken
	crashed  bool
	events   []Event
	sink     *Sink
}

// New returns a Story with options o, no shards and an empty sink.
func New(o Options) (*Story, error) {
	o.ensureDefaults()
	s := &Story{o: o, nextID: o.FirstCheckpoint, restored: o.FirstCheckpoint - 1,
		ckpts: make(map[int64]*Checkpoint), sink: newSink()}
	if err := s.build(o.Parallelism, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Options returns the options in use, defaults filled in.
func (s *Story) Options() Options { return s.o }

// Sink returns the model of the row store and running totals.
func (s *Story) Sink() *Sink { return s.sink }

// ProcMs returns the current processing time, Unix ms.
func (s *Story) ProcMs() int64 { return s.src.ProcMs() }

// Watermark returns the job watermark (the source's), Unix ms.
func (s *Story) Watermark() int64 { return s.src.Watermarks().Current() }

// Judge returns the judge time of pre-aggregator subtask i.
func (s *Story) Judge(i int) int64 { return s.pres[i].PreAgg().Judge() }

// Buffered returns the number of partials buffered in all pre-aggregators.
func (s *Story) Buffered() int {
	n := 0
	for _, p := range s.pres {
		n += p.PreAgg().Buffered()
	}
	return n
}

// Position returns the number of clicks consumed so far in this run
// (restored from the checkpoint at a restore).
func (s *Story) Position() int { return s.position }

// Checkpoint returns the checkpoint with the given id, or nil.
func (s *Story) Checkpoint(id int64) *Checkpoint { return s.ckpts[id] }

// Events returns the events since the last call and forgets them.
func (s *Story) Events() []Event {
	ev := s.events
	s.events = nil
	return ev
}

// build makes the machines of parallelism par, with the state of ck (nil:
// empty) and the sink tag s.restored.
func (s *Story) build(par int, ck *Checkpoint) error {
	o := s.o
	if par < 1 || par > windowing.MaxParallelism {
		return fmt.Errorf("story: parallelism %d out of range", par)
	}
	src, err := operator.NewSource(operator.SourceOptions{Pres: par, BatchSize: o.BatchSize,
		Watermarks: ingest.WatermarkOptions{AllowanceMs: o.AllowanceMs, IntervalMs: o.WatermarkIntervalMs, IdleMs: o.IdleMs}})
	if err != nil {
		return fmt.Errorf("story: %w", err)
	}
	s.src, s.pres, s.dedups, s.wins = src, nil, nil, nil
	for i := 0; i < par; i++ {
		m, err := windowing.NewMinutes(o.WindowMs)
		if err != nil {
			return fmt.Errorf("story: %w", err)
		}
		w, err := operator.NewWin(operator.WinOptions{Index: i, Inputs: par, EarlyFiringMs: o.EarlyFiringMs,
			Epoch: s.restored, Restored: s.restored, Gen: 1}, m, latepath.New(o.HorizonMs))
		if err != nil {
			return fmt.Errorf("story: %w", err)
		}
		s.wins = append(s.wins, w)
	}
	for i := 0; i < par; i++ {
		from, to := windowing.Range(i, par)
		var d preagg.Dedup
		var dd *snapDedup
		if !o.NoDedup {
			dd = newSnapDedup()
			if ck != nil {
				for k, exp := range ck.Dedup {
					if k.kg >= from && k.kg < to {
						if err := dd.load(k.kg, k.ad, k.id, exp); err != nil {
							return err
						}
					}
				}
			}
			d = dd
		}
		pa, err := preagg.New(preagg.Options{WindowMs: o.WindowMs, HorizonMs: o.HorizonMs, GuardMs: o.GuardMs,
			FlushIntervalMs: o.PreaggFlushMs, AllowanceMs: o.AllowanceMs, NoDedup: o.NoDedup}, d, from, to)
		if err != nil {
			return fmt.Errorf("story: %w", err)
		}
		p, err := operator.NewPre(operator.PreOptions{Index: i, Windows: par, HorizonMs: o.HorizonMs, Epoch: s.restored}, pa, d)
		if err != nil {
			return fmt.Errorf("story: %w", err)
		}
		s.pres = append(s.pres, p)
		s.dedups = append(s.dedups, dd)
	}
	return nil
}

// AddShard registers shard id at processing time procMs (a source that lists
// its shards). Shards are also added by their first click. The shards are
// registered again at every restore.
func (s *Story) AddShard(id string, procMs int64) {
	if !slices.Contains(s.shards, id) {
		s.shards = append(s.shards, id)
	}
	if !s.src.Started() {
		s.src.Start(procMs)
	}
	s.src.AddShard(id, procMs)
}

var errCrashed = errors.New("story: the job has crashed; restore a checkpoint first")

// Click reads one click at processing time readMs: processing time advances
// to readMs first (running every watermark tick on the way), then the click
// is validated and finished with its ArrivalMs (0 means readMs), observed by
// the shard's watermark and routed to the pre-aggregator that owns its click
// id's key group. Its verdict is reported when the pre-aggregator receives
// it (with BatchSize 1, at once).
func (s *Story) Click(c ingest.Click, readMs int64) error {
	if s.crashed {
		return errCrashed
	}
	if !s.src.Started() {
		s.src.Start(readMs - 1)
	}
	if err := s.Advance(readMs); err != nil {
		return err
	}
	s.position++
	if c.ArrivalMs == 0 {
		c.ArrivalMs = readMs
	}
	reason := c.Validate()
	if reason == "" {
		reason = c.Finish(c.ArrivalMs)
	}
	if reason != "" {
		cc := c
		s.src.Reject(&cc, reason, nil)
		s.events = append(s.events, Event{Kind: EvVerdict, Ms: s.ProcMs(), Click: &cc, Verdict: latepath.InvalidPrefix + string(reason)})
		return s.deliver()
	}
	if !slices.Contains(s.shards, c.Shard) {
		s.shards = append(s.shards, c.Shard)
	}
	s.src.Click(&c)
	return s.deliver()
}

// Advance moves processing time to procMs, running every watermark emission
// tick (every WatermarkIntervalMs, aligned to multiples of it) on the way.
func (s *Story) Advance(procMs int64) error {
	if s.crashed {
		return errCrashed
	}
	if !s.src.Started() {
		s.src.Start(procMs)
	}
	for s.src.NextTick() <= procMs {
		s.src.Tick()
		if err := s.deliver(); err != nil {
			return err
		}
	}
	s.src.Move(procMs)
	return nil
}

// deliver carries out the source's Ready: each message to its
// pre-aggregator, at once, and everything that follows from it.
func (s *Story) deliver() error {
	rd := s.src.Ready()
	defer s.src.Advance()
	for _, snd := range rd.Sends {
		if snd.Msg.Kind == operator.Watermark && snd.To == 0 {
			s.events = append(s.events, Event{Kind: EvWatermark, Ms: snd.Msg.ProcMs, Wm: snd.Msg.Wm})
		}
		if err := s.stepPre(snd.To, snd.Msg); err != nil {
			return err
		}
	}
	return nil
}

func (s *Story) stepPre(i int, m operator.Msg) error {
	p := s.pres[i]
	if err := p.Step(m); err != nil {
		return err
	}
	defer p.Advance()
	rd := p.Ready()
	for k := range rd.Lake {
		c := m.Clicks[k]
		s.events = append(s.events, Event{Kind: EvVerdict, Ms: s.ProcMs(), Click: &c, Verdict: rd.Lake[k].Verdict})
	}
	if rd.Ack != nil && s.ck != nil {
		s.ck.Floors[i] = rd.Ack.Floor
		s.ck.Forgotten[i] = rd.Ack.Forgotten
		if dd := s.dedups[i]; dd != nil {
			maps.Copy(s.ck.Dedup, dd.shadow)
		}
	}
	for _, snd := range rd.Sends {
		for _, pt := range snd.Msg.Partials {
			s.events = append(s.events, Event{Kind: EvPartial, Ms: s.ProcMs(), Cause: snd.Msg.Cause.String(),
				Row: RowOut{Ad: pt.Ad, StartMs: pt.WindowStart, Valid: pt.Count, SpendMicros: pt.SpendMicros}})
		}
		if err := s.stepWin(snd.To, snd.Msg); err != nil {
			return err
		}
	}
	return nil
}

// stepWin steps window subtask i and writes what it decided to the sink
// model at once.
func (s *Story) stepWin(i int, m operator.Msg) error {
	w := s.wins[i]
	if err := w.Step(m); err != nil {
		return err
	}
	defer w.Advance()
	rd := w.Ready()
	at := s.ProcMs()
	for _, puts := range rd.Puts {
		for _, p := range puts {
			ro, err := rowOf(p)
			if err != nil {
				return err
			}
			switch {
			case p.Writer == sink.Late:
				s.events = append(s.events, Event{Kind: EvLate, Ms: at, Row: ro})
			default:
				s.events = append(s.events, Event{Kind: EvRow, Ms: at, Row: ro})
			}
			if !s.sink.put(p, ro) {
				s.events = append(s.events, Event{Kind: EvRefused, Ms: at, Row: ro})
			}
		}
	}
	for _, t := range rd.Totals {
		ro := RowOut{Ad: t.Ad, StartMs: t.StartMs, Hour: t.Hour, Valid: t.Valid, SpendMicros: t.SpendMicros, Epoch: t.Epoch}
		s.events = append(s.events, Event{Kind: EvRunning, Ms: at, Row: ro})
		s.sink.setTotal(ro)
	}
	if rd.Ack != nil && s.ck != nil {
		for _, b := range rd.Ack.Win {
			s.ck.Win[b.KG] = b.Data
		}
		for _, b := range rd.Ack.Late {
			s.ck.Late[b.KG] = b.Data
		}
	}
	return nil
}

// rowOf returns the row a put writes.
func rowOf(p sink.Put) (RowOut, error) {
	start, hour, err := sink.ParseBucket(p.Bucket)
	if err != nil {
		return RowOut{}, fmt.Errorf("story: %w", err)
	}
	return RowOut{Ad: p.Entity, StartMs: start, Hour: hour, Late: p.Writer == sink.Late, Valid: p.Valid,
		SpendMicros: p.SpendMicros, Epoch: p.Epoch}, nil
}

// Barrier takes an aligned checkpoint at the current processing time: every
// pre-aggregator forwards its buffer and saves its floor candidate and its
// dedup ids, every window subtask flushes its late totals (tagged with the
// previous epoch) and snapshots its state, then takes the new id as its tag.
// It returns the checkpoint id.
func (s *Story) Barrier() (int64, error) { return s.barrier(true) }

// AbortedBarrier sends a barrier through the graph, with every effect it has
// on the operators (buffers forwarded, sink tags moved to its id), but the
// checkpoint never completes (it cannot be restored): a crash came first.
func (s *Story) AbortedBarrier() (int64, error) { return s.barrier(false) }

func (s *Story) barrier(complete bool) (int64, error) {
	if s.crashed {
		return 0, errCrashed
	}
	id := s.nextID
	s.nextID++
	par := len(s.pres)
	s.ck = &Checkpoint{ID: id, Position: s.position, Floors: make([]int64, par), Forgotten: make([]int64, par),
		Win: map[int][]byte{}, Late: map[int][]byte{}, Dedup: map[dedupKey]int64{}, TakenMs: s.ProcMs(), Parallelism: par}
	ck := s.ck
	defer func() { s.ck = nil }()
	s.src.Barrier(id)
	if err := s.deliver(); err != nil {
		return 0, err
	}
	if complete {
		s.ckpts[id] = ck
	}
	s.events = append(s.events, Event{Kind: EvCheckpoint, Ms: s.ProcMs(), Ckpt: id, Wm: ck.Floor(), Verdict: map[bool]string{true: "complete", false: "aborted"}[complete]})
	return id, nil
}

// Crash loses everything in memory: watermarks, buffers, operator state.
// Only completed checkpoints and the sink survive.
func (s *Story) Crash() { s.crashed = true }

// RestoreOptions says how a checkpoint is restored.
type RestoreOptions struct {
	// NoFloor restores without the watermark floor (seed 001 branch W).
	NoFloor bool
	// Parallelism is the new number of subtasks; 0 keeps the checkpoint's.
	Parallelism int
}

// Restore restarts the job from checkpoint id at processing time procMs, as
// the runtime's Open does: new watermarks (none until every shard has one or
// is idle; the known shards are added again at procMs), new pre-aggregators
// with the floors (the minimum) unless NoFloor and the dedup bookkeeping,
// their dedup ids copied from the checkpoint, and window subtasks with the
// checkpoint's window and late state by key group. Then the sink is flushed
// by the full flush's rule (flush.Decide: every row value tagged ≥ id is
// removed or rewritten from restored state) and
// the sink tag becomes id. The caller replays the clicks after the
// checkpoint's Position.
func (s *Story) Restore(id, procMs int64, ro RestoreOptions) error {
	ck, ok := s.ckpts[id]
	if !ok {
		return fmt.Errorf("story: no checkpoint %d", id)
	}
	par := ro.Parallelism
	if par == 0 {
		par = ck.Parallelism
	}
	was := s.src.ProcMs()
	s.restored = id
	if err := s.build(par, ck); err != nil {
		return err
	}
	s.crashed = false
	s.src.Start(max(procMs, was))
	for _, sh := range s.shards {
		s.src.AddShard(sh, s.src.ProcMs())
	}
	for _, p := range s.pres {
		if !ro.NoFloor {
			p.PreAgg().Restore(ck.Floors)
		}
		p.PreAgg().RestoreForgotten(ck.Forgotten)
	}
	for kg, d := range ck.Win {
		if err := s.wins[windowing.Owner(kg, par)].Minutes().Restore(d); err != nil {
			return fmt.Errorf("story: restore window state: %w", err)
		}
	}
	for kg, d := range ck.Late {
		if err := s.wins[windowing.Owner(kg, par)].Late().Restore(d); err != nil {
			return fmt.Errorf("story: restore late state: %w", err)
		}
	}
	s.position = ck.Position
	s.sink.flush(id, restoredState{late: s.lateState, hour: s.hourState}, s.totalsState)
	floor := int64(eventtime.NoWatermark)
	if !ro.NoFloor {
		floor = ck.Floor()
	}
	s.events = append(s.events, Event{Kind: EvRestore, Ms: s.ProcMs(), Ckpt: id, Wm: floor})
	return nil
}

func (s *Story) lateState(ad string, hourMs int64) (int64, int64, bool) {
	return s.wins[windowing.Owner(windowing.KeyGroup(ad), len(s.wins))].Late().Get(ad, hourMs)
}

func (s *Story) hourState(ad string, hourMs int64) (int64, int64, bool) {
	return s.wins[windowing.Owner(windowing.KeyGroup(ad), len(s.wins))].Minutes().HourClosed(ad, hourMs)
}

func (s *Story) totalsState(fn func(RowOut)) {
	for _, w := range s.wins {
		w.Minutes().Totals(func(r windowing.Running) {
			fn(RowOut{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.Epoch()})
		})
	}
}

// Final ends bounded input as the runtime's end of input does: the final
// watermark (the end of time) fires every window; then the pre-aggregators
// flush and the window subtasks write their running and late totals.
func (s *Story) Final() error {
	if s.crashed {
		return errCrashed
	}
	s.src.Final()
	if err := s.deliver(); err != nil {
		return err
	}
	s.src.Broadcast(operator.Msg{Kind: operator.End})
	return s.deliver()
}

// OpenWindows returns the number of open (ad, window) pairs over all window
// subtasks.
func (s *Story) OpenWindows() int {
	n := 0
	for _, w := range s.wins {
		n += w.Minutes().OpenWindows()
	}
	return n
}
