package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/operator"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/state"
	"github.com/adclick/adclick/windowing"
)

// toPre is a message from the driver to a pre-aggregator.
type toPre struct {
	operator.Msg
	sentNs  int64    // when the driver sent a click batch (for latency statistics)
	barrier *barrier // Barrier
}

// toWin is a message from a pre-aggregator to a window subtask.
type toWin struct {
	operator.Msg
	barrier *barrier // Barrier
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
	win       []operator.Blob
	late      []operator.Blob
	err       error
	wm        int64 // window subtasks: their watermark at the barrier
}

// preSub is one pre-aggregator subtask: the operator.Pre machine, with its
// dedup state in Pebble, its lake writer and its channels.
type preSub struct {
	idx   int
	op    *operator.Pre
	pa    *preagg.PreAgg // op's
	dedup *state.Dedup
	in    chan toPre
	outs  []chan toWin
	acks  chan<- ack
	lake  *recount.Writer
	m     *metrics
	lat   latencies
	free  chan<- []ingest.Click // handled click batches go back to the driver
	// dedupSeen holds the dedup's counters as last published.
	dedupSeen state.DedupStats
}

// run handles messages until the end of the graph (End) or until ctx, the
// graph's context, ends: a subtask never outlives a failed graph.
func (s *preSub) run(ctx context.Context) error {
	for {
		var msg toPre
		select {
		case msg = <-s.in:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done, err := s.handle(ctx, msg)
		if err != nil {
			return fmt.Errorf("runtime: pre-aggregator %d: %w", s.idx, err)
		}
		if done {
			return nil
		}
	}
}

// handle steps the machine with msg and carries out its Ready: at a
// barrier the dedup commit and the lake's flush of the epoch before it,
// then the lake records, the messages to the window subtasks in order, and
// the acknowledgement.
func (s *preSub) handle(ctx context.Context, msg toPre) (bool, error) {
	if err := s.op.Step(msg.Msg); err != nil {
		return false, err
	}
	defer s.op.Advance()
	rd := s.op.Ready()
	if rd.Partials > 0 {
		s.m.partials.Add(float64(rd.Partials))
	}
	for v, n := range rd.Verdicts {
		s.m.verdict(preagg.Verdict(v), n)
	}
	for _, l := range rd.LateByMs {
		s.m.lateness.Observe(float64(l) / 1000)
	}
	for i := range rd.Lake {
		s.lake.Add(&rd.Lake[i])
	}
	var ackErr error
	if rd.Ack != nil {
		if s.dedup != nil {
			ackErr = s.dedup.Commit()
			st := s.dedup.Stats()
			s.m.dedup(s.idx, st, s.dedupSeen)
			s.dedupSeen = st
		}
		if ackErr == nil {
			// The lake holds every verdict the checkpoint covers.
			ackErr = s.lake.Flush(ctx, rd.Ack.PrevEpoch)
		}
	}
	for _, snd := range rd.Sends {
		m := toWin{Msg: snd.Msg}
		var err error
		switch snd.Msg.Kind {
		case operator.Clicks:
			err = sendTimed(ctx, s.outs[snd.To], m, s.m.blocked.WithLabelValues("preagg"))
		case operator.Barrier:
			m.barrier = msg.barrier
			fallthrough
		default:
			err = send(ctx, s.outs[snd.To], m)
		}
		if err != nil {
			return false, err
		}
	}
	switch msg.Kind {
	case operator.Clicks:
		// Bound the lake's buffer: write a chunk of this epoch when it is big.
		if err := s.lake.Spill(ctx, rd.LakeEpoch); err != nil {
			return false, err
		}
		s.lat.add(time.Now().UnixNano() - msg.sentNs)
		// Nothing keeps a pointer into the batch (the strings it refers to
		// are copied by value where they are kept): hand it back, emptied
		// so it does not pin the strings.
		clear(msg.Clicks)
		select {
		case s.free <- msg.Clicks[:0]:
		default:
		}
	case operator.End:
		if err := s.lake.Flush(ctx, rd.LakeEpoch); err != nil {
			return false, err
		}
	}
	if rd.Ack != nil {
		s.acks <- ack{role: "pre", index: s.idx, floor: rd.Ack.Floor, forgotten: rd.Ack.Forgotten, err: ackErr}
		if ackErr != nil {
			return false, ackErr
		}
		select {
		case <-msg.barrier.resume:
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	return rd.Done, nil
}

// newPartials returns an empty partials slice, reused if a window subtask
// has handed one back.
func newPartials(free chan []preagg.Partial) func() []preagg.Partial {
	return func() []preagg.Partial {
		select {
		case b := <-free:
			return b
		default:
			return make([]preagg.Partial, 0, 256)
		}
	}
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

// winSub is one window subtask: the operator.Win machine, with the sinks
// it writes and its channels.
type winSub struct {
	idx     int
	op      *operator.Win
	minutes *windowing.Minutes // op's
	late    *latepath.Late     // op's
	in      chan toWin
	acks    chan<- ack
	outage  time.Duration // how long an unavailable row store is waited out
	rows    sink.Rows
	totals  sink.Totals
	// freeParts takes handled partial slices back to the pre-aggregators.
	freeParts chan<- []preagg.Partial
	m         *metrics
	log       *slog.Logger
}

// run handles messages until every input has ended (End) or until ctx,
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

// handle steps the machine with msg and, when its Ready says so, writes the
// rows and running totals decided so far and delivers its acknowledgement.
func (w *winSub) handle(ctx context.Context, msg toWin) (bool, error) {
	if err := w.op.Step(msg.Msg); err != nil {
		return false, err
	}
	if msg.Partials != nil {
		clear(msg.Partials)
		select {
		case w.freeParts <- msg.Partials[:0]:
		default:
		}
	}
	rd := w.op.Ready()
	if !rd.Write && rd.Ack == nil && !rd.Done {
		return false, nil
	}
	defer w.op.Advance()
	w.m.firings.WithLabelValues("minute").Add(float64(rd.Firings.Minute))
	w.m.firings.WithLabelValues("hour").Add(float64(rd.Firings.Hour))
	w.m.firings.WithLabelValues("early").Add(float64(rd.Firings.Early))
	err := w.write(ctx, rd)
	if rd.Ack != nil {
		w.acks <- ack{role: "win", index: w.idx, err: err, wm: rd.Ack.Wm, win: rd.Ack.Win, late: rd.Ack.Late}
		if err != nil {
			return false, err
		}
		select {
		case <-msg.barrier.resume:
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	return rd.Done, err
}

// write writes the Ready's rows (billing: an error stops the job) and
// running totals (dashboards: an error is counted and the machine rewrites
// them from state once the store answers again).
func (w *winSub) write(ctx context.Context, rd *operator.WinReady) error {
	// Each writer's rows go in separate calls, so refusals are counted per
	// writer.
	for i, puts := range rd.Puts {
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
	if w.totals == nil || !rd.TotalsDue {
		return nil
	}
	wasOK := w.op.TotalsOK()
	if err := w.totals.SetTotals(ctx, rd.Totals); err != nil {
		w.m.totalsErrors.Inc()
		if wasOK {
			w.m.totalsUp.Set(0)
			w.log.Warn("running-total store unreachable: dashboards are stale, counting goes on; totals will be rewritten when it answers", "subtask", w.idx, "err", err)
		}
		w.op.ReportTotalsFailed()
		return nil
	}
	if !wasOK {
		w.m.totalsUp.Set(1)
		w.log.Info("running-total store answers again: totals rewritten", "subtask", w.idx, "totals", len(rd.Totals))
	}
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
