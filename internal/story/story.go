package story

import (
	"errors"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"maps"
	"math"
	"slices"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
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
	Win      map[int][]byte
	Late     map[int][]byte
	Dedup    map[dedupKey]int64
	TakenMs  int64
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

type lateClick struct {
	ad             string
	eventMs, spend int64
}

type preSub struct {
	idx   int
	pa    *preagg.PreAgg
	dd    *snapDedup
	late  [][]lateClick
	batch []ingest.Click
}

type winSub struct {
	idx      int
	minutes  *windowing.Minutes
	late     *latepath.Late
	wms      []int64
	procs    []int64
	wm       int64
	proc     int64
	nextEarl int64
	epoch    int64
}

// Story drives the core. Create it with New.
type Story struct {
	o        Options
	wms      *ingest.Watermarks
	shards   []string
	pres     []*preSub
	wins     []*winSub
	started  bool
	procMs   int64
	nextTick int64
	nextID   int64
	restored int64 // the checkpoint restored from (the sink's :c), or FirstCheckpoint−1
	position int
	ckpts    map[int64]*Checkpoint
	crashed  bool
	final    bool
	events   []Event
	sink     *Sink
}

// New returns a Story with options o, no shards and an empty sink.
func New(o Options) (*Story, error) {
	o.ensureDefaults()
	if o.Parallelism < 1 || o.Parallelism > windowing.MaxParallelism {
		return nil, fmt.Errorf("story: parallelism %d out of range", o.Parallelism)
	}
	s := &Story{o: o, nextID: o.FirstCheckpoint, restored: o.FirstCheckpoint - 1,
		ckpts: make(map[int64]*Checkpoint), sink: newSink()}
	if err := s.build(o.Parallelism, o.FirstCheckpoint-1, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Options returns the options in use, defaults filled in.
func (s *Story) Options() Options { return s.o }

// Sink returns the model of the row store and running totals.
func (s *Story) Sink() *Sink { return s.sink }

// ProcMs returns the current processing time, Unix ms.
func (s *Story) ProcMs() int64 { return s.procMs }

// Watermark returns the job watermark (the source's), Unix ms.
func (s *Story) Watermark() int64 { return s.wms.Current() }

// Judge returns the judge time of pre-aggregator subtask i.
func (s *Story) Judge(i int) int64 { return s.pres[i].pa.Judge() }

// Buffered returns the number of partials buffered in all pre-aggregators.
func (s *Story) Buffered() int {
	n := 0
	for _, p := range s.pres {
		n += p.pa.Buffered()
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

func (s *Story) build(par int, epoch int64, ck *Checkpoint) error {
	o := s.o
	s.wms = ingest.NewWatermarks(ingest.WatermarkOptions{AllowanceMs: o.AllowanceMs, IntervalMs: o.WatermarkIntervalMs, IdleMs: o.IdleMs})
	s.pres, s.wins = nil, nil
	for i := 0; i < par; i++ {
		m, err := windowing.NewMinutes(o.WindowMs)
		if err != nil {
			return fmt.Errorf("story: %w", err)
		}
		w := &winSub{idx: i, minutes: m, late: latepath.New(o.HorizonMs), wms: make([]int64, par),
			procs: make([]int64, par), wm: eventtime.NoWatermark, epoch: epoch}
		for k := range w.wms {
			w.wms[k] = eventtime.NoWatermark
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
						if err := dd.load(k.kg, k.id, exp); err != nil {
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
		s.pres = append(s.pres, &preSub{idx: i, pa: pa, dd: dd, late: make([][]lateClick, par)})
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
	if !s.started {
		s.start(procMs)
	}
	s.wms.AddShard(id, procMs)
}

func (s *Story) start(procMs int64) {
	s.started = true
	s.procMs = procMs
	iv := s.o.WatermarkIntervalMs
	s.nextTick = eventtime.Start(procMs, iv) + iv
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
	if !s.started {
		s.start(readMs - 1)
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
		s.events = append(s.events, Event{Kind: EvVerdict, Ms: s.procMs, Click: &cc, Verdict: latepath.InvalidPrefix + string(reason)})
		return nil
	}
	if !slices.Contains(s.shards, c.Shard) {
		s.shards = append(s.shards, c.Shard)
	}
	s.wms.Observe(c.Shard, c.EventMs, s.procMs)
	o := windowing.Owner(windowing.KeyGroup(c.ClickID), len(s.pres))
	p := s.pres[o]
	p.batch = append(p.batch, c)
	if len(p.batch) >= s.o.BatchSize {
		return s.sendBatch(p)
	}
	return nil
}

// Advance moves processing time to procMs, running every watermark emission
// tick (every WatermarkIntervalMs, aligned to multiples of it) on the way.
func (s *Story) Advance(procMs int64) error {
	if s.crashed {
		return errCrashed
	}
	if !s.started {
		s.start(procMs)
	}
	for s.nextTick <= procMs {
		t := s.nextTick
		s.nextTick += s.o.WatermarkIntervalMs
		if err := s.tick(t); err != nil {
			return err
		}
	}
	s.procMs = max(s.procMs, procMs)
	return nil
}

func (s *Story) tick(t int64) error {
	s.procMs = max(s.procMs, t)
	wm, advanced := s.wms.Tick(t)
	if err := s.flushBatches(); err != nil {
		return err
	}
	if advanced {
		s.events = append(s.events, Event{Kind: EvWatermark, Ms: t, Wm: wm})
	}
	for _, p := range s.pres {
		var err error
		if advanced {
			err = s.preWatermark(p, wm, t)
		} else {
			err = s.preTick(p, t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Story) flushBatches() error {
	for _, p := range s.pres {
		if err := s.sendBatch(p); err != nil {
			return err
		}
	}
	return nil
}

// sendBatch is the pre-aggregator's handling of a batch of clicks.
func (s *Story) sendBatch(p *preSub) error {
	if len(p.batch) == 0 {
		return nil
	}
	batch := p.batch
	p.batch = nil
	for i := range batch {
		c := &batch[i]
		v, err := p.pa.Add(c, windowing.KeyGroup(c.ClickID))
		if err != nil {
			return err
		}
		if v == preagg.Late {
			o := windowing.Owner(windowing.KeyGroup(c.AdID), len(s.wins))
			p.late[o] = append(p.late[o], lateClick{ad: c.AdID, eventMs: c.EventMs, spend: c.SpendMicros})
		}
		cc := *c
		s.events = append(s.events, Event{Kind: EvVerdict, Ms: s.procMs, Click: &cc, Verdict: v.String()})
	}
	parts, err := p.pa.Tick(s.procMs)
	if err != nil {
		return err
	}
	s.forward(p, parts, "interval")
	return nil
}

func (s *Story) preTick(p *preSub, t int64) error {
	parts, err := p.pa.Tick(t)
	if err != nil {
		return err
	}
	s.forward(p, parts, "interval")
	for _, w := range s.wins {
		s.winTick(w, p.idx, t)
	}
	return nil
}

// preWatermark forwards what the interval and the watermark flush (both
// before the watermark), then the watermark.
func (s *Story) preWatermark(p *preSub, wm, t int64) error {
	parts, err := p.pa.Tick(t)
	if err != nil {
		return err
	}
	s.forward(p, parts, "interval")
	parts, err = p.pa.Watermark(wm)
	if err != nil {
		return err
	}
	s.forward(p, parts, "watermark")
	for _, w := range s.wins {
		s.winWatermark(w, p.idx, wm, t)
	}
	return nil
}

// forward sends partials (by the ad's key group) and pending late clicks to
// the window subtasks.
func (s *Story) forward(p *preSub, parts []preagg.Partial, cause string) {
	for _, pt := range parts {
		w := s.wins[windowing.Owner(windowing.KeyGroup(pt.Ad), len(s.wins))]
		s.events = append(s.events, Event{Kind: EvPartial, Ms: s.procMs, Cause: cause,
			Row: RowOut{Ad: pt.Ad, StartMs: pt.WindowStart, Valid: pt.Count, SpendMicros: pt.SpendMicros}})
		if !w.minutes.Add(pt.Ad, pt.WindowStart, pt.Count, pt.SpendMicros) {
			w.late.Add(pt.Ad, pt.WindowStart, pt.Count, pt.SpendMicros)
		}
	}
	for o, lc := range p.late {
		for _, l := range lc {
			s.wins[o].late.Add(l.ad, l.eventMs, 1, l.spend)
		}
		p.late[o] = nil
	}
}

func (s *Story) winWatermark(w *winSub, from int, wm, t int64) {
	if wm > w.wms[from] {
		w.wms[from] = wm
	}
	if m := minOf(w.wms); m > w.wm {
		w.wm = m
		if m == eventtime.EndOfTime { // as the runtime does
			w.minutes.Drain(func(r windowing.Row) { s.emitRow(w, r) })
		} else {
			w.minutes.Advance(m, func(r windowing.Row) { s.emitRow(w, r) })
			w.late.Expire(m)
		}
	}
	s.winTick(w, from, t)
}

func (s *Story) winTick(w *winSub, from int, t int64) {
	if t > w.procs[from] {
		w.procs[from] = t
	}
	p := minOf(w.procs)
	if p <= w.proc {
		return
	}
	w.proc = p
	if w.nextEarl == 0 {
		w.nextEarl = p + s.o.EarlyFiringMs
		return
	}
	if p < w.nextEarl {
		return
	}
	w.nextEarl = p + s.o.EarlyFiringMs
	w.minutes.Early(func(r windowing.Running) { s.emitRunning(w, r) })
	w.late.Flush(func(t latepath.Total) { s.emitLate(w, t) })
}

func (s *Story) emitRow(w *winSub, r windowing.Row) {
	ro := RowOut{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch}
	s.events = append(s.events, Event{Kind: EvRow, Ms: s.procMs, Row: ro})
	if r.Hour {
		s.sink.putHourFast(ro)
		return
	}
	if !s.sink.putMinute(ro, s.restored) {
		s.events = append(s.events, Event{Kind: EvRefused, Ms: s.procMs, Row: ro})
	}
	// The final minute total for dashboards goes with the row.
	s.sink.setTotal(ro)
}

func (s *Story) emitRunning(w *winSub, r windowing.Running) {
	ro := RowOut{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch}
	s.events = append(s.events, Event{Kind: EvRunning, Ms: s.procMs, Row: ro})
	s.sink.setTotal(ro)
}

func (s *Story) emitLate(w *winSub, t latepath.Total) {
	ro := RowOut{Ad: t.Ad, StartMs: t.HourMs, Hour: true, Late: true, Valid: t.Valid, SpendMicros: t.SpendMicros, Epoch: w.epoch}
	s.events = append(s.events, Event{Kind: EvLate, Ms: s.procMs, Row: ro})
	s.sink.putLate(ro)
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
	if err := s.flushBatches(); err != nil {
		return 0, err
	}
	id := s.nextID
	s.nextID++
	ck := &Checkpoint{ID: id, Position: s.position, Win: map[int][]byte{}, Late: map[int][]byte{},
		Dedup: map[dedupKey]int64{}, TakenMs: s.procMs, Parallelism: len(s.pres)}
	for _, p := range s.pres {
		parts, floor := p.pa.Barrier()
		s.forward(p, parts, "barrier")
		ck.Floors = append(ck.Floors, floor)
		if p.dd != nil {
			maps.Copy(ck.Dedup, p.dd.shadow)
		}
	}
	for _, w := range s.wins {
		w.late.Flush(func(t latepath.Total) { s.emitLate(w, t) })
		w.epoch = id
		if err := w.minutes.Snapshot(func(kg int, d []byte) error { ck.Win[kg] = slices.Clone(d); return nil }); err != nil {
			return 0, err
		}
		if err := w.late.Snapshot(func(kg int, d []byte) error { ck.Late[kg] = slices.Clone(d); return nil }); err != nil {
			return 0, err
		}
	}
	if complete {
		s.ckpts[id] = ck
	}
	s.events = append(s.events, Event{Kind: EvCheckpoint, Ms: s.procMs, Ckpt: id, Wm: ck.Floor(), Verdict: map[bool]string{true: "complete", false: "aborted"}[complete]})
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

// Restore restarts the job from checkpoint id at processing time procMs:
// new watermarks (none until every shard has one or is idle; the known shards
// are added again at procMs), new pre-aggregators with the floors (the
// minimum) unless NoFloor, their dedup ids copied from the checkpoint, and
// window subtasks with the checkpoint's window and late state by key group.
// Then the sink is flushed (every value tagged ≥ id is removed or rewritten
// from restored state) and the sink tag becomes id. The caller replays the
// clicks after the checkpoint's Position.
func (s *Story) Restore(id, procMs int64, ro RestoreOptions) error {
	ck, ok := s.ckpts[id]
	if !ok {
		return fmt.Errorf("story: no checkpoint %d", id)
	}
	par := ro.Parallelism
	if par == 0 {
		par = ck.Parallelism
	}
	if par < 1 || par > windowing.MaxParallelism {
		return fmt.Errorf("story: parallelism %d out of range", par)
	}
	if err := s.build(par, id, ck); err != nil {
		return err
	}
	s.crashed, s.final, s.started = false, false, false
	s.start(max(procMs, s.procMs))
	for _, sh := range s.shards {
		s.wms.AddShard(sh, s.procMs)
	}
	if !ro.NoFloor {
		for _, p := range s.pres {
			p.pa.Restore(ck.Floors)
		}
	}
	for kg, d := range ck.Win {
		if err := s.wins[windowing.Owner(kg, par)].minutes.Restore(d); err != nil {
			return fmt.Errorf("story: restore window state: %w", err)
		}
	}
	for kg, d := range ck.Late {
		if err := s.wins[windowing.Owner(kg, par)].late.Restore(d); err != nil {
			return fmt.Errorf("story: restore late state: %w", err)
		}
	}
	s.restored = id
	s.position = ck.Position
	s.sink.flush(id, s.lateState, s.totalsState)
	floor := int64(eventtime.NoWatermark)
	if !ro.NoFloor {
		floor = ck.Floor()
	}
	s.events = append(s.events, Event{Kind: EvRestore, Ms: s.procMs, Ckpt: id, Wm: floor})
	return nil
}

func (s *Story) lateState(ad string, hourMs int64) (int64, int64, bool) {
	return s.wins[windowing.Owner(windowing.KeyGroup(ad), len(s.wins))].late.Get(ad, hourMs)
}

func (s *Story) totalsState(fn func(RowOut)) {
	for _, w := range s.wins {
		w.minutes.Totals(func(r windowing.Running) {
			fn(RowOut{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch})
		})
	}
}

// Final ends bounded input: the final watermark (math.MaxInt64) fires every
// window; then the pre-aggregators flush and the window subtasks write their
// running and late totals, as the runtime's end of input does.
func (s *Story) Final() error {
	if s.crashed {
		return errCrashed
	}
	if err := s.flushBatches(); err != nil {
		return err
	}
	wm := s.wms.Final()
	s.events = append(s.events, Event{Kind: EvWatermark, Ms: s.procMs, Wm: wm})
	for _, p := range s.pres {
		if err := s.preWatermark(p, wm, s.procMs); err != nil {
			return err
		}
	}
	for _, p := range s.pres {
		s.forward(p, p.pa.Flush(), "end")
	}
	for _, w := range s.wins {
		w.minutes.Early(func(r windowing.Running) { s.emitRunning(w, r) })
		w.late.Flush(func(t latepath.Total) { s.emitLate(w, t) })
	}
	s.final = true
	return nil
}

// OpenWindows returns the number of open (ad, window) pairs over all window
// subtasks.
func (s *Story) OpenWindows() int {
	n := 0
	for _, w := range s.wins {
		n += w.minutes.OpenWindows()
	}
	return n
}

func minOf(v []int64) int64 {
	m := int64(math.MaxInt64)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}
