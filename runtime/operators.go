package runtime

import (
	"context"
	"fmt"
	"github.com/adclick/adclick/eventtime"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/state"
	"github.com/adclick/adclick/windowing"
)

type msgKind uint8

const (
	mClicks    msgKind = iota + 1
	mTick              // processing time moved
	mWatermark         // a new watermark (also carries processing time)
	mBarrier
	mEnd
	mRewrite    // rewrite the hour rows held in state (after a sweep)
	mTotalsLost // the running-total store lost its data: rewrite every total state holds
)

// toPre is a message from the driver to a pre-aggregator.
type toPre struct {
	kind    msgKind
	sentNs  int64 // when the driver sent a click batch (for latency statistics)
	clicks  []ingest.Click
	procMs  int64
	wm      int64
	barrier *barrier
}

// lateClick is a late click on its way to the window subtask owning its ad.
type lateClick struct {
	ad             string
	eventMs, spend int64
}

// toWin is a message from a pre-aggregator to a window subtask.
type toWin struct {
	kind     msgKind
	from     int
	partials []preagg.Partial
	late     []lateClick
	procMs   int64
	wm       int64
	barrier  *barrier
}

// barrier travels through the graph; resume is closed by the coordinator
// once the checkpoint is written.
type barrier struct {
	id     int64
	final  bool
	resume chan struct{}
}

// ack is an operator's answer to a barrier.
type ack struct {
	role      string // "pre" or "win"
	index     int
	floor     int64
	forgotten int64
	win       []blob
	late      []blob
	err       error
	wm        int64 // window subtasks: their watermark at the barrier
}

type blob struct {
	kg   int
	data []byte
}

// preSub is one pre-aggregator subtask.
type preSub struct {
	idx   int
	pa    *preagg.PreAgg
	dedup *state.Dedup
	in    chan toPre
	outs  []chan toWin
	acks  chan<- ack
	lake  *recount.Writer
	epoch int64 // the epoch of the lake records being buffered
	par   int
	late  [][]lateClick
	rec   latepath.Record
	m     *metrics
	lat   latencies
	free  chan<- []ingest.Click // handled click batches go back to the driver
	// kgs holds the key group of each click of the batch being handled;
	// horizonMs is the acceptance horizon (a dedup id expires at impression
	// + horizon).
	kgs       []int
	horizonMs int64
	// parts are the partials being routed to each window subtask; handled
	// slices come back through freeParts.
	parts     [][]preagg.Partial
	freeParts chan []preagg.Partial
	// dedupSeen holds the dedup's counters as last published.
	dedupSeen state.DedupStats
}

// run handles messages until the end of the graph (mEnd) or until ctx, the
// graph's context, ends: a subtask never outlives a failed graph.
func (s *preSub) run(ctx context.Context) error {
	for {
		var msg toPre
		select {
		case msg = <-s.in:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := s.handle(ctx, msg); err != nil {
			return fmt.Errorf("runtime: pre-aggregator %d: %w", s.idx, err)
		}
		if msg.kind == mEnd {
			return nil
		}
	}
}

func (s *preSub) handle(ctx context.Context, msg toPre) error {
	switch msg.kind {
	case mClicks:
		kgs := s.kgs[:0]
		for i := range msg.clicks {
			c := &msg.clicks[i]
			kgs = append(kgs, windowing.KeyGroup(c.ClickID))
			if s.dedup != nil {
				s.dedup.Prefetch(kgs[i], c.ClickID, c.ImpressionMs+s.horizonMs)
			}
		}
		s.kgs = kgs
		for i := range msg.clicks {
			c := &msg.clicks[i]
			v, err := s.pa.Add(c, kgs[i])
			if err != nil {
				return err
			}
			if v == preagg.Late {
				s.m.lateness.Observe(float64(s.pa.Judge()-c.EventMs) / 1000)
				o := windowing.Owner(windowing.KeyGroup(c.AdID), s.par)
				s.late[o] = append(s.late[o], lateClick{ad: c.AdID, eventMs: c.EventMs, spend: c.SpendMicros})
			}
			s.m.verdict(v)
			if err := s.logClick(c, v.String()); err != nil {
				return err
			}
		}
		parts, err := s.pa.Tick(msg.procMs)
		if err != nil {
			return err
		}
		if err := s.forward(ctx, parts, msg.procMs); err != nil {
			return err
		}
		// Bound the lake's buffer: write a chunk of this epoch when it is big.
		if err := s.lake.Spill(ctx, s.epoch); err != nil {
			return err
		}
		s.lat.add(time.Now().UnixNano() - msg.sentNs)
		// Nothing keeps a pointer into the batch (the strings it refers to
		// are copied by value where they are kept): hand it back, emptied
		// so it does not pin the strings.
		clear(msg.clicks)
		select {
		case s.free <- msg.clicks[:0]:
		default:
		}
		return nil
	case mTick:
		parts, err := s.pa.Tick(msg.procMs)
		if err != nil {
			return err
		}
		if err := s.forward(ctx, parts, msg.procMs); err != nil {
			return err
		}
		return s.broadcast(ctx, toWin{kind: mTick, procMs: msg.procMs})
	case mWatermark:
		// A due 500 ms flush and the watermark's own flush both go out
		// before the watermark.
		ticked, err := s.pa.Tick(msg.procMs)
		if err != nil {
			return err
		}
		if err := s.forward(ctx, ticked, msg.procMs); err != nil {
			return err
		}
		parts, err := s.pa.Watermark(msg.wm)
		if err != nil {
			return err
		}
		// Rule 3: every buffered partial goes before the watermark.
		if err := s.forward(ctx, parts, msg.procMs); err != nil {
			return err
		}
		return s.broadcast(ctx, toWin{kind: mWatermark, wm: msg.wm, procMs: msg.procMs})
	case mBarrier:
		parts, floor := s.pa.Barrier()
		if err := s.forward(ctx, parts, msg.procMs); err != nil {
			return err
		}
		var err error
		if s.dedup != nil {
			err = s.dedup.Commit()
			st := s.dedup.Stats()
			s.m.dedup(s.idx, st, s.dedupSeen)
			s.dedupSeen = st
		}
		if err == nil {
			// The lake holds every verdict the checkpoint covers.
			err = s.lake.Flush(ctx, s.epoch)
			s.epoch = msg.barrier.id
		}
		if err := s.broadcast(ctx, toWin{kind: mBarrier, barrier: msg.barrier, procMs: msg.procMs}); err != nil {
			return err
		}
		s.acks <- ack{role: "pre", index: s.idx, floor: floor, forgotten: s.pa.Forgotten(), err: err}
		if err != nil {
			return err
		}
		select {
		case <-msg.barrier.resume:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	case mRewrite, mTotalsLost:
		return s.broadcast(ctx, toWin{kind: msg.kind, procMs: msg.procMs})
	case mEnd:
		parts := s.pa.Flush()
		if err := s.forward(ctx, parts, msg.procMs); err != nil {
			return err
		}
		if err := s.lake.Flush(ctx, s.epoch); err != nil {
			return err
		}
		return s.broadcast(ctx, toWin{kind: mEnd, procMs: msg.procMs})
	}
	return nil
}

func (s *preSub) logClick(c *ingest.Click, verdict string) error {
	r := &s.rec
	*r = latepath.Record{Verdict: verdict, ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID, DeviceID: c.DeviceID,
		ImpressionMs: c.ImpressionMs, DeviceMs: c.DeviceMs, EventMs: c.EventMs, ArrivalMs: c.ArrivalMs,
		SpendMicros: c.SpendMicros, Shard: c.Shard, Seq: c.Seq}
	s.lake.Add(r)
	return nil
}

// forward sends partials (routed by the ad's key group) and pending late
// clicks to the window subtasks.
func (s *preSub) forward(ctx context.Context, parts []preagg.Partial, procMs int64) error {
	if len(parts) > 0 {
		s.m.partials.Add(float64(len(parts)))
		for _, p := range parts {
			o := windowing.Owner(windowing.KeyGroup(p.Ad), s.par)
			if s.parts[o] == nil {
				s.parts[o] = s.partsBuf()
			}
			s.parts[o] = append(s.parts[o], p)
		}
	}
	for o := 0; o < s.par; o++ {
		ps := s.parts[o]
		if len(ps) == 0 && len(s.late[o]) == 0 {
			continue
		}
		if err := sendTimed(ctx, s.outs[o], toWin{kind: mClicks, from: s.idx, partials: ps, late: s.late[o], procMs: procMs}, s.m.blocked.WithLabelValues("preagg")); err != nil {
			return err
		}
		s.parts[o] = nil
		s.late[o] = nil
	}
	return nil
}

// partsBuf returns an empty partials slice, reused if a window subtask has
// handed one back.
func (s *preSub) partsBuf() []preagg.Partial {
	select {
	case b := <-s.freeParts:
		return b
	default:
		return make([]preagg.Partial, 0, 256)
	}
}

func (s *preSub) broadcast(ctx context.Context, m toWin) error {
	m.from = s.idx
	for _, out := range s.outs {
		if err := send(ctx, out, m); err != nil {
			return err
		}
	}
	return nil
}

// sendTimed is send, counting the time spent blocked on a full channel.
func sendTimed[T any](ctx context.Context, ch chan<- T, m T, blocked prometheus.Counter) error {
	select {
	case ch <- m:
		return nil
	default:
	}
	start := time.Now()
	err := send(ctx, ch, m)
	blocked.Add(time.Since(start).Seconds())
	return err
}

func send[T any](ctx context.Context, ch chan<- T, m T) error {
	select {
	case ch <- m:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// winSub is one window subtask: minute windows, hour roll-up and late
// totals for the ads of its key groups, and their sink writes.
type winSub struct {
	idx      int
	minutes  *windowing.Minutes
	late     *latepath.Late
	in       chan toWin
	acks     chan<- ack
	inputs   int
	wms      []int64
	procs    []int64
	wm       int64
	proc     int64
	nextEarl int64
	barriers int
	ended    int
	rewrites int
	lost     int   // mTotalsLost messages received
	rewriteT bool  // rewrite every total state holds at the next flushWrites
	epoch    int64 // the last barrier this subtask passed: the sink tag
	restored int64 // c: the checkpoint the job restored from
	gen      int64
	earlyMs  int64
	outage   time.Duration // how long an unavailable row store is waited out
	rows     sink.Rows
	totals   sink.Totals
	puts     []sink.Put
	tots     []sink.Total
	totalsOK bool
	unsent   map[sink.TotalKey]sink.Total        // totals not written during an outage
	byWriter [len(sink.TaggedWriters)][]sink.Put // flushWrites' split of puts, reused
	// freeParts takes handled partial slices back to the pre-aggregators.
	freeParts chan<- []preagg.Partial
	m         *metrics
	log       *slog.Logger
}

// run handles messages until every input has ended (mEnd) or until ctx,
// the graph's context, ends.
func (w *winSub) run(ctx context.Context) error {
	for {
		var msg toWin
		select {
		case msg = <-w.in:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done, err := w.handle(ctx, msg)
		if err != nil {
			return fmt.Errorf("runtime: window subtask %d: %w", w.idx, err)
		}
		if done {
			return nil
		}
	}
}

func (w *winSub) handle(ctx context.Context, msg toWin) (bool, error) {
	switch msg.kind {
	case mClicks:
		for _, p := range msg.partials {
			if !w.minutes.Add(p.Ad, p.WindowStart, p.Count, p.SpendMicros) {
				// Cannot happen with partials flushed before watermarks; if it
				// did, the clicks are kept as late rather than lost.
				w.late.Add(p.Ad, p.WindowStart, p.Count, p.SpendMicros)
			}
		}
		for _, l := range msg.late {
			w.late.Add(l.ad, l.eventMs, 1, l.spend)
		}
		if msg.partials != nil {
			clear(msg.partials)
			select {
			case w.freeParts <- msg.partials[:0]:
			default:
			}
		}
	case mTick:
		return false, w.tick(ctx, msg.from, msg.procMs)
	case mWatermark:
		if msg.wm > w.wms[msg.from] {
			w.wms[msg.from] = msg.wm
		}
		if m := minOf(w.wms); m > w.wm {
			w.wm = m
			if m == eventtime.EndOfTime {
				// The end of input or a drained stop: every window fires,
				// but state stays as the last real watermark left it, so
				// a later start after more input finds it intact.
				w.minutes.Drain(w.emit)
			} else {
				w.minutes.Advance(m, w.emit)
				w.late.Expire(m)
			}
		}
		if len(w.puts) >= 2048 {
			if err := w.flushWrites(ctx); err != nil {
				return false, err
			}
		}
		return false, w.tick(ctx, msg.from, msg.procMs)
	case mBarrier:
		w.barriers++
		if w.barriers < w.inputs {
			return false, nil
		}
		w.barriers = 0
		// Everything decided before the barrier is written, tagged with the
		// epoch before it, before the checkpoint can complete.
		w.late.Flush(w.emitLate)
		err := w.flushWrites(ctx)
		w.epoch = msg.barrier.id
		a := ack{role: "win", index: w.idx, err: err, wm: w.wm}
		if err == nil {
			a.err = w.minutes.Snapshot(func(kg int, d []byte) error { a.win = append(a.win, blob{kg, d}); return nil })
		}
		if a.err == nil {
			a.err = w.late.Snapshot(func(kg int, d []byte) error { a.late = append(a.late, blob{kg, d}); return nil })
		}
		w.acks <- a
		if a.err != nil {
			return false, a.err
		}
		select {
		case <-msg.barrier.resume:
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	case mRewrite:
		// One message per input arrives; rewriting once is enough.
		w.rewrites++
		if w.rewrites%w.inputs == 1 || w.inputs == 1 {
			w.minutes.HourRows(w.emit)
			w.late.MarkAllDirty()
			w.late.Flush(w.emitLate)
			return false, w.flushWrites(ctx)
		}
	case mTotalsLost:
		// One message per input arrives; rewriting once is enough. The
		// outage path of flushWrites rewrites every total state holds.
		w.lost++
		if w.lost%w.inputs == 1 || w.inputs == 1 {
			w.totalsOK, w.rewriteT = false, true
			return false, w.flushWrites(ctx)
		}
	case mEnd:
		w.ended++
		if w.ended < w.inputs {
			return false, nil
		}
		w.minutes.Early(w.emitRunning)
		w.late.Flush(w.emitLate)
		return true, w.flushWrites(ctx)
	}
	return false, nil
}

// tick runs the processing-time trigger: running totals every EarlyFiringMs
// of the slowest input's processing time, with the late totals and the
// pending row writes.
func (w *winSub) tick(ctx context.Context, from int, procMs int64) error {
	if procMs > w.procs[from] {
		w.procs[from] = procMs
	}
	p := minOf(w.procs)
	if p <= w.proc {
		return nil
	}
	w.proc = p
	if w.nextEarl == 0 {
		w.nextEarl = p + w.earlyMs
		return nil
	}
	if p < w.nextEarl {
		return nil
	}
	w.nextEarl = p + w.earlyMs
	w.minutes.Early(w.emitRunning)
	w.late.Flush(w.emitLate)
	return w.flushWrites(ctx)
}

func (w *winSub) emit(r windowing.Row) {
	if r.Hour {
		w.m.firings.WithLabelValues("hour").Inc()
	} else {
		w.m.firings.WithLabelValues("minute").Inc()
	}
	k := sink.Key{Entity: r.Ad, Bucket: sink.MinuteBucket(r.StartMs)}
	if r.Hour {
		k.Bucket = sink.HourBucket(r.StartMs)
	}
	// The running total goes with the row, in the same epoch: a minute's
	// final total, and an hour's total as of this row.
	w.tots = append(w.tots, sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.RunValid, SpendMicros: r.RunSpend, Epoch: w.epoch})
	w.puts = append(w.puts, sink.Put{Key: k, Writer: sink.Fast, Valid: r.Valid, SpendMicros: r.SpendMicros,
		Epoch: w.epoch, Gen: w.gen, ClosedRow: !r.Hour, RestoredCkpt: w.restored})
}

func (w *winSub) emitRunning(r windowing.Running) {
	w.m.firings.WithLabelValues("early").Inc()
	w.tots = append(w.tots, sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch})
}

func (w *winSub) emitLate(t latepath.Total) {
	w.puts = append(w.puts, sink.Put{Key: sink.Key{Entity: t.Ad, Bucket: sink.HourBucket(t.HourMs)}, Writer: sink.Late,
		Valid: t.Valid, SpendMicros: t.SpendMicros, Epoch: w.epoch, Gen: w.gen})
}

// flushWrites writes the pending rows (billing: an error stops the job) and
// running totals (dashboards: an error is counted and the totals are
// rewritten from state once the store answers again).
func (w *winSub) flushWrites(ctx context.Context) error {
	if len(w.puts) > 0 {
		// Fast and late writes go in separate calls, so refusals are
		// counted per writer.
		byWriter := &w.byWriter
		for i := range byWriter {
			byWriter[i] = byWriter[i][:0]
		}
		for _, p := range w.puts {
			i := slices.Index(sink.TaggedWriters[:], p.Writer)
			if i < 0 {
				return fmt.Errorf("runtime: a row write by %v, which is not a tagged writer", p.Writer)
			}
			byWriter[i] = append(byWriter[i], p)
		}
		for i, puts := range byWriter {
			if len(puts) == 0 {
				continue
			}
			name := sink.TaggedWriters[i].String()
			refused, err := w.putRows(ctx, name, puts)
			if err != nil {
				return fmt.Errorf("runtime: write %s rows: %w", name, err)
			}
			w.m.writes.WithLabelValues(name).Add(float64(len(puts)))
			w.m.refused.WithLabelValues(name, "condition").Add(float64(refused))
		}
		w.puts = w.puts[:0]
	}
	if w.totals != nil && (len(w.tots) > 0 || len(w.unsent) > 0 || w.rewriteT) {
		send := w.tots
		if !w.totalsOK {
			// Back after an outage: everything state holds, then the totals
			// that failed and state no longer holds (minutes that closed
			// meanwhile) with the epoch of their row, so that a flush keeps
			// them exactly when it keeps the row, then the pending ones.
			var all []sink.Total
			held := make(map[sink.TotalKey]bool)
			w.minutes.Totals(func(r windowing.Running) {
				t := sink.Total{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid, SpendMicros: r.SpendMicros, Epoch: w.epoch}
				held[t.Key()] = true
				all = append(all, t)
			})
			for k, t := range w.unsent {
				if !held[k] {
					all = append(all, t)
				}
			}
			send = append(all, w.tots...)
		}
		if err := w.totals.SetTotals(ctx, send); err != nil {
			w.m.totalsErrors.Inc()
			if w.totalsOK {
				w.m.totalsUp.Set(0)
				w.log.Warn("running-total store unreachable: dashboards are stale, counting goes on; totals will be rewritten when it answers", "subtask", w.idx, "err", err)
			}
			w.totalsOK = false
			// Keep what could not be written (the latest value per key):
			// a minute that closes now is gone from state by the time the
			// store answers again.
			if w.unsent == nil {
				w.unsent = make(map[sink.TotalKey]sink.Total)
			}
			for _, t := range w.tots {
				w.unsent[t.Key()] = t
			}
			w.tots = w.tots[:0]
			return nil
		}
		if !w.totalsOK {
			w.m.totalsUp.Set(1)
			w.log.Info("running-total store answers again: totals rewritten", "subtask", w.idx, "totals", len(send))
		}
		w.totalsOK, w.rewriteT = true, false
		clear(w.unsent)
	}
	w.tots = w.tots[:0]
	return nil
}

// putRows writes puts, waiting out a row store that is unavailable for a
// while: a transient error (throttling, 5xx, timeouts, once the adapter's
// own retries are spent) is retried after a backoff of 1 s doubling to 30 s,
// counted in adclick_sink_retries_total, for up to Config.SinkOutageMs; then
// the job ends with the error, and a restart replays from its checkpoint.
// Every put is an absolute SET with its conditions, so sending a batch again
// is safe. Other errors end the job at once.
func (w *winSub) putRows(ctx context.Context, name string, puts []sink.Put) (int, error) {
	var start time.Time
	for attempt := 0; ; attempt++ {
		refused, err := w.rows.Put(ctx, puts)
		if err == nil || !flush.IsTransient(err) || ctx.Err() != nil {
			return refused, err
		}
		if attempt == 0 {
			start = time.Now()
			w.log.Warn("row store unavailable: waiting it out", "writer", name, "subtask", w.idx, "budget", w.outage, "err", err)
		}
		if time.Since(start) >= w.outage {
			return refused, fmt.Errorf("row store unavailable for %s: %w", time.Since(start).Round(time.Second), err)
		}
		w.m.sinkRetries.WithLabelValues(name).Inc()
		wait := time.Duration(min(int64(1000)<<min(attempt, 5), 30_000)) * time.Millisecond
		t := time.NewTimer(min(wait, w.outage-time.Since(start)+time.Millisecond))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return refused, context.Cause(ctx)
		}
	}
}

func minOf(v []int64) int64 {
	m := int64(math.MaxInt64)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// latencies keeps a bounded sample of batch latencies (driver send to
// pre-aggregator done), for the benchmark's p50/p99.
type latencies struct {
	n       int64
	samples []int64
}

const maxLatencySamples = 1 << 16

func (l *latencies) add(ns int64) {
	l.n++
	if len(l.samples) < maxLatencySamples {
		l.samples = append(l.samples, ns)
		return
	}
	// Keep every k-th sample once full: cheap, and spread over the run.
	if l.n%int64(1+l.n/maxLatencySamples) == 0 {
		l.samples[l.n%maxLatencySamples] = ns
	}
}

func quantile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func mergedQuantiles(ls []*latencies) (p50, p99 int64, n int) {
	var all []int64
	for _, l := range ls {
		all = append(all, l.samples...)
	}
	slices.Sort(all)
	return quantile(all, 0.5), quantile(all, 0.99), len(all)
}
