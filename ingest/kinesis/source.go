package kinesis

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
)

// Shard lifecycle events (Record.Event).
const (
	// EventShardAdded comes before a shard's first record, when its reader
	// starts: the watermark tracker should AddShard it.
	EventShardAdded = "shard_added"
	// EventShardClosed comes after a shard's last record: the shard was read
	// to its end and every record returned. The watermark tracker should
	// CloseShard it. Its position is now PositionClosed.
	EventShardClosed = "shard_closed"
	// EventShardReader reports a change of the shard reader's state
	// (Record.Reader), after the records of the read it describes: the
	// watermark tracker lets a quiet shard go idle only while its reader
	// is caught up.
	EventShardReader = "shard_reader"
)

// Record is one user record (or shard event) returned by Next.
type Record struct {
	// Event is "" for a record, or EventShardAdded / EventShardClosed (then
	// only Shard is set).
	Event string
	// Shard is the shard id.
	Shard string
	// Seq is the Kinesis sequence number, Sub the sub-sequence number (the
	// user record's index inside a KPL aggregated record; 0 for a plain
	// record).
	Seq string
	Sub int
	// PartitionKey is the user record's partition key.
	PartitionKey string
	// Data is the payload; for a bad aggregated record, the raw record. It
	// is not reused by the source and must not be modified.
	Data []byte
	// ArrivalMs is ApproximateArrivalTimestamp, Unix ms.
	ArrivalMs int64
	// Bad is "" for a good record, or the exceptions-log reason of an
	// aggregated record that could not be split (kpl.ReasonBadChecksum,
	// kpl.ReasonBadBody).
	Bad string
	// Reader is the reader's state of an EventShardReader.
	Reader ingest.ReaderState
}

// FormatPosition returns the position string of a user record.
func FormatPosition(seq string, sub int) string { return seq + "/" + strconv.Itoa(sub) }

func parsePosition(p string) (seq string, sub int, err error) {
	seq, s, ok := strings.Cut(p, "/")
	if !ok || seq == "" {
		return "", 0, fmt.Errorf("position %q: want <sequence>/<sub-sequence>", p)
	}
	for _, c := range seq {
		if c < '0' || c > '9' {
			return "", 0, fmt.Errorf("position %q: sequence number is not decimal", p)
		}
	}
	sub, err = strconv.Atoi(s)
	if err != nil || sub < 0 {
		return "", 0, fmt.Errorf("position %q: bad sub-sequence number", p)
	}
	return seq, sub, nil
}

// Shard states.
const (
	statePending = iota // known, waiting for its parents
	stateReading        // reader running, or its queue not yet drained
	stateClosed         // read to its end and every record returned
)

type item = Record

type shard struct {
	id      string
	parents []string
	state   int
	pos     string // last position returned by Next, or PositionClosed
	start   startSpec

	// Guarded by Source.mu; written by the reader, read by Next.
	queue  []item
	head   int
	full   bool // the reader waits for space
	polled bool // a GetRecords call succeeded, or a subscription event arrived
	primed bool // a fetch returned a user record, found the shard caught up, or reached its end
	ended  bool // the reader reached the end; the closed event is queued
	lag    int64
	reader ingest.ReaderState // the state last queued as an EventShardReader
	space  chan struct{}
}

func (sh *shard) queued() int { return len(sh.queue) - sh.head }

// pending reports whether the queue holds a record or an event other than
// a reader report (which changes nothing a caller of CaughtUp waits for).
func (sh *shard) pending() bool {
	for _, it := range sh.queue[sh.head:] {
		if it.Event != EventShardReader {
			return true
		}
	}
	return false
}

// startSpec is where a reader's first iterator points.
type startSpec struct {
	typ types.ShardIteratorType
	seq string
	ts  time.Time
	// skipSeq/skipSub: user records of Kinesis record skipSeq with a
	// sub-sequence ≤ skipSub were already returned before a restart.
	skipSeq string
	skipSub int
}

// Source reads every shard of a stream. Next, Positions, Lag and CaughtUp
// may be called from any goroutine, but Next is meant for a single
// consumer: two concurrent callers would each see part of a shard's order.
type Source struct {
	api      API
	o        Options
	consumer string // the consumer's ARN with ReadEFO
	m        *metrics
	log      *slog.Logger
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	notify   chan struct{} // a reader queued something
	wake     chan struct{} // the manager should list shards and start readers
	once     sync.Once
	timer    *time.Timer

	mu     sync.Mutex
	shards map[string]*shard
	order  []*shard // shards whose events and records Next still hands out
	rr     int
	listed int // shard listings done
	err    error

	// The start hold (Options.StartHold): while hold is not empty, Next
	// hands out no user record until every shard in it is primed or
	// holdUntil passes.
	hold      []*shard
	holdFrom  time.Time
	holdUntil time.Time
}

// Open lists the stream's shards and starts reading those that may be read
// now. With ReadEFO, before any reader starts, it finds the consumer
// (registering it if it is missing) and waits until it is ACTIVE. The
// readers and the shard manager run until Close; ctx is used for the first
// listing and the consumer only. It fails if the stream does not exist.
func Open(ctx context.Context, api API, o Options) (*Source, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s := &Source{
		api: api, o: o, m: newMetrics(o.Registerer), log: o.Logger.With("stream", o.Stream),
		ctx: rctx, cancel: cancel,
		notify: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		shards: map[string]*shard{},
	}
	var listed []types.Shard
	for fails := 1; ; fails++ {
		var err error
		if listed, err = listShards(ctx, api, o.Stream); err == nil {
			break
		}
		if classify(err) == errFatal || fails > o.MaxErrors || ctx.Err() != nil {
			cancel()
			return nil, err
		}
		s.m.errs.Inc()
		s.log.Warn("kinesis list shards failed", "err", err, "attempt", fails)
		if !sleep(ctx, backoff(o.BackoffBase, o.BackoffMax, fails)) {
			cancel()
			return nil, fmt.Errorf("kinesis: open %s: %w", o.Stream, ctx.Err())
		}
	}
	if o.Read == ReadEFO {
		arn, err := consumerARN(ctx, api, &o, s.log)
		if err != nil {
			cancel()
			return nil, err
		}
		s.consumer = arn
	}
	s.mu.Lock()
	s.merge(listed)
	s.startReady()
	if o.StartHold > 0 && len(s.order) > 0 {
		s.hold = slices.Clone(s.order)
		s.holdFrom = time.Now()
		s.holdUntil = s.holdFrom.Add(o.StartHold)
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.manage()
	return s, nil
}

// Close stops every goroutine of the source and waits for them. Records
// still queued are dropped (they are not covered by Positions).
func (s *Source) Close() {
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		if s.timer != nil {
			s.timer.Stop()
		}
	})
}

// Next returns the next user record or shard event, waiting up to wait for
// one; ok is false if none arrived in time (or wait ≤ 0 and none was
// queued). Records of one shard come in order; the shards with queued
// items take turns, one item each. Right after Open, user records are held
// back (events are not) until every shard has fetched or
// Options.StartHold has passed, so that a backlog comes out interleaved
// across shards rather than in the order the shards' first fetches return.
// A fatal source error (the stream deleted, access denied, too many
// consecutive failures) is returned as err; so is ctx's error.
func (s *Source) Next(ctx context.Context, wait time.Duration) (r Record, ok bool, err error) {
	var deadline time.Time
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return Record{}, false, err
		}
		hold := s.holdLocked()
		r, ok = s.popLocked(hold > 0)
		s.mu.Unlock()
		if ok {
			return r, true, nil
		}
		if wait <= 0 {
			return Record{}, false, nil
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(wait)
		}
		d := deadline.Sub(now)
		if d <= 0 {
			return Record{}, false, nil
		}
		if hold > 0 {
			d = min(d, hold) // look again when the hold ends
		}
		if s.timer == nil {
			s.timer = time.NewTimer(d)
		} else {
			s.timer.Reset(d)
		}
		select {
		case <-s.notify:
		case <-s.timer.C:
		case <-ctx.Done():
			s.timer.Stop()
			return Record{}, false, ctx.Err()
		}
	}
}

// holdLocked returns how much longer the start hold lasts, or 0 once every
// shard it waits for is primed or its time is up (the hold then ends for
// good). Called with mu held.
func (s *Source) holdLocked() time.Duration {
	if len(s.hold) == 0 {
		return 0
	}
	waiting := 0
	for _, sh := range s.hold {
		if !sh.primed {
			waiting++
		}
	}
	now := time.Now()
	if left := s.holdUntil.Sub(now); waiting > 0 && left > 0 {
		return left
	}
	if waiting > 0 {
		var ids []string
		for _, sh := range s.hold {
			if !sh.primed {
				ids = append(ids, sh.id)
			}
		}
		s.log.Warn("kinesis start hold timed out; reading before these shards fetched", "shards", ids, "held", now.Sub(s.holdFrom))
	} else {
		s.log.Info("kinesis start hold ended: every shard fetched", "shards", len(s.hold), "held", now.Sub(s.holdFrom))
	}
	s.hold = nil
	return 0
}

// popLocked takes the next item, round robin over the shards with queued
// items, one item per turn. While held, only shard events are taken.
func (s *Source) popLocked(held bool) (Record, bool) {
	n := len(s.order)
	for k := 0; k < n; k++ {
		i := (s.rr + k) % n
		sh := s.order[i]
		if sh.queued() == 0 || held && sh.queue[sh.head].Event == "" {
			continue
		}
		it := sh.queue[sh.head]
		sh.queue[sh.head] = item{}
		sh.head++
		if sh.head == len(sh.queue) {
			sh.queue, sh.head = sh.queue[:0], 0
		} else if sh.head >= 4096 && sh.head*2 >= len(sh.queue) {
			m := copy(sh.queue, sh.queue[sh.head:])
			clear(sh.queue[m:])
			sh.queue, sh.head = sh.queue[:m], 0
		}
		s.rr = i + 1
		switch it.Event {
		case "":
			sh.pos = FormatPosition(it.Seq, it.Sub)
			s.m.records.Inc()
			if sh.full && sh.queued() < s.o.BufferRecords {
				sh.full = false
				select {
				case sh.space <- struct{}{}:
				default:
				}
			}
		case EventShardClosed:
			sh.state = stateClosed
			sh.pos = PositionClosed
			s.order = append(s.order[:i], s.order[i+1:]...)
			s.rr = i
			s.m.behind.DeleteLabelValues(sh.id)
			s.m.shardThrottled.DeleteLabelValues(sh.id)
			s.log.Info("kinesis shard closed", "shard", sh.id)
			s.poke()
		}
		return it, true
	}
	return Record{}, false
}

// poke asks the manager to list shards and start the readers that may now
// start.
func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Positions returns each shard's position: the last user record Next
// returned, or PositionClosed; shards not yet read have none (or their
// restored one). It covers exactly the records Next has returned, so it is
// what a checkpoint saves. The map is a copy.
func (s *Source) Positions() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.shards))
	for id, sh := range s.shards {
		if sh.pos != "" {
			out[id] = sh.pos
		}
	}
	return out
}

// Lag returns MillisBehindLatest of each shard being read, from its last
// GetRecords call or subscription event (ms).
func (s *Source) Lag() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for _, sh := range s.order {
		if sh.polled {
			out[sh.id] = sh.lag
		}
	}
	return out
}

// CaughtUp reports whether the source has nothing left to hand out right
// now: every listed shard is closed or being read with its last GetRecords
// call (or subscription event) at MillisBehindLatest 0 and an empty queue,
// and no shard waits to start.
func (s *Source) CaughtUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.listed == 0 {
		return false
	}
	for _, sh := range s.shards {
		switch sh.state {
		case statePending:
			return false
		case stateReading:
			if !sh.polled || sh.lag != 0 || sh.pending() || sh.ended {
				return false
			}
		}
	}
	return true
}

// fail records a fatal error and stops the source's goroutines.
func (s *Source) fail(err error) {
	s.mu.Lock()
	if s.err == nil && s.ctx.Err() == nil {
		s.err = err
		s.log.Error("kinesis source failed", "err", err)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	s.cancel()
}

// listShards lists every shard of the stream, following NextToken.
func listShards(ctx context.Context, api API, stream string) ([]types.Shard, error) {
	var all []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := api.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("kinesis: list shards of %s: %w", stream, err)
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil || *out.NextToken == "" {
			return all, nil
		}
		// The service refuses StreamName together with NextToken.
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// manage re-lists the shards periodically and when poked, and starts the
// readers of shards whose parents are closed.
func (s *Source) manage() {
	defer s.wg.Done()
	t := time.NewTicker(s.o.Rediscover)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		listed, err := listShards(s.ctx, s.api, s.o.Stream)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			fails++
			s.m.errs.Inc()
			if classify(err) == errFatal || fails > s.o.MaxErrors {
				s.fail(err)
				return
			}
			s.log.Warn("kinesis list shards failed", "err", err, "attempt", fails)
			if !sleep(s.ctx, backoff(s.o.BackoffBase, s.o.BackoffMax, fails)) {
				return
			}
			s.poke()
			continue
		}
		fails = 0
		s.mu.Lock()
		s.merge(listed)
		s.startReady()
		s.mu.Unlock()
	}
}

// merge adds newly listed shards and forgets closed or unread shards that
// are no longer listed (trimmed). Called with mu held.
func (s *Source) merge(listed []types.Shard) {
	first := s.listed == 0
	s.listed++
	seen := make(map[string]bool, len(listed))
	for _, ls := range listed {
		id := aws.ToString(ls.ShardId)
		seen[id] = true
		if _, ok := s.shards[id]; ok {
			continue
		}
		sh := &shard{id: id, space: make(chan struct{}, 1), start: startSpec{typ: types.ShardIteratorTypeTrimHorizon}}
		for _, p := range []*string{ls.ParentShardId, ls.AdjacentParentShardId} {
			if p != nil && *p != "" {
				sh.parents = append(sh.parents, *p)
			}
		}
		closedShard := ls.SequenceNumberRange != nil && ls.SequenceNumberRange.EndingSequenceNumber != nil
		if p, ok := s.o.Positions[id]; ok && first {
			if p == PositionClosed {
				sh.state, sh.pos = stateClosed, PositionClosed
			} else {
				seq, sub, _ := parsePosition(p) // checked by Validate
				sh.pos = p
				sh.start = startSpec{typ: types.ShardIteratorTypeAtSequenceNumber, seq: seq, skipSeq: seq, skipSub: sub}
			}
		} else if first {
			switch s.o.StartAt {
			case StartLatest:
				if closedShard {
					sh.state, sh.pos = stateClosed, PositionClosed
				}
				sh.start.typ = types.ShardIteratorTypeLatest
			case StartAtTimestamp:
				sh.start = startSpec{typ: types.ShardIteratorTypeAtTimestamp, ts: s.o.StartTimestamp}
			}
		}
		s.shards[id] = sh
	}
	if first {
		// A shard read from a saved position had its parents closed when
		// it started; treat any ancestor without a position as closed, so
		// it is not read again from the trim horizon.
		var closeAncestors func(sh *shard)
		closeAncestors = func(sh *shard) {
			for _, pid := range sh.parents {
				if p, ok := s.shards[pid]; ok && p.state == statePending && p.pos == "" {
					p.state, p.pos = stateClosed, PositionClosed
					closeAncestors(p)
				}
			}
		}
		for _, sh := range s.shards {
			if sh.pos != "" && sh.pos != PositionClosed {
				closeAncestors(sh)
			}
		}
	}
	for id, sh := range s.shards {
		if !seen[id] && sh.state != stateReading {
			delete(s.shards, id)
		}
	}
}

// startReady starts the reader of every pending shard whose listed parents
// are all closed. Called with mu held.
func (s *Source) startReady() {
	for _, sh := range s.shards {
		if sh.state != statePending || s.ctx.Err() != nil {
			continue
		}
		ready := true
		for _, pid := range sh.parents {
			if p, ok := s.shards[pid]; ok && p.state != stateClosed {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		sh.state = stateReading
		sh.reader = ingest.ReaderBehind // nothing read yet
		sh.queue = append(sh.queue, item{Event: EventShardAdded, Shard: sh.id},
			item{Event: EventShardReader, Shard: sh.id, Reader: sh.reader})
		s.order = append(s.order, sh)
		s.m.shards.Inc()
		s.log.Info("kinesis shard reader started", "shard", sh.id, "from", string(sh.start.typ), "position", sh.pos)
		s.wg.Add(1)
		if s.o.Read == ReadEFO {
			go s.subscribe(sh, sh.start)
		} else {
			go s.read(sh, sh.start)
		}
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Err returns the source's fatal error, if any.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Shards returns the ids of the shards known to the source and their
// positions; for status pages. The map is a copy.
func (s *Source) Shards() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, sh := range s.shards {
		switch sh.state {
		case statePending:
			out[id] = "pending"
		case stateReading:
			out[id] = "reading"
		default:
			out[id] = "closed"
		}
	}
	return out
}
