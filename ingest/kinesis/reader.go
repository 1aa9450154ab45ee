package kinesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kpl"
)

// throttleLogEvery bounds the warnings of a shard that stays throttled: one
// when it starts, then one per this interval with the count, not one per call.
const throttleLogEvery = 30 * time.Second

// throttleLog rate-limits the warnings about one reader's throttles.
type throttleLog struct {
	since  time.Time // the first throttle of the current run; zero when not throttled
	logged time.Time
	n      int // throttles in the current run
}

// throttled counts one throttle of shard sh's reader by call, warns at the
// first of a run and then every throttleLogEvery, and marks the shard
// throttled, which holds the watermark.
func (s *Source) throttled(sh *shard, tl *throttleLog, call string, err error) {
	now := time.Now()
	s.m.throttle.Inc()
	s.m.shardThrottles.WithLabelValues(sh.id).Inc()
	s.m.shardThrottled.WithLabelValues(sh.id).Set(1)
	tl.n++
	if tl.since.IsZero() {
		tl.since = now
	}
	if tl.logged.IsZero() || now.Sub(tl.logged) >= throttleLogEvery {
		tl.logged = now
		s.log.Warn("kinesis "+call+" throttled; the shard holds the watermark until its reader catches up",
			"shard", sh.id, "throttles", tl.n, "for", now.Sub(tl.since).Round(time.Millisecond), "err", err)
	}
	s.setReader(sh, ingest.ReaderThrottled)
}

// unthrottled ends a run of throttles after a successful call.
func (s *Source) unthrottled(sh *shard, tl *throttleLog) {
	if tl.since.IsZero() {
		return
	}
	s.log.Info("kinesis shard no longer throttled", "shard", sh.id, "throttles", tl.n, "for", time.Since(tl.since).Round(time.Millisecond))
	s.m.shardThrottled.WithLabelValues(sh.id).Set(0)
	*tl = throttleLog{}
}

// setReader queues an EventShardReader when shard sh's reader state
// changes.
func (s *Source) setReader(sh *shard, st ingest.ReaderState) {
	s.mu.Lock()
	changed := s.setReaderLocked(sh, st)
	s.mu.Unlock()
	if changed {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// setReaderLocked queues an EventShardReader if st is not the state last
// queued for sh; called with mu held.
func (s *Source) setReaderLocked(sh *shard, st ingest.ReaderState) bool {
	if sh.reader == st || sh.ended {
		return false
	}
	sh.reader = st
	sh.queue = append(sh.queue, item{Event: EventShardReader, Shard: sh.id, Reader: st})
	return true
}

// backoff returns a jittered exponential delay for the n-th consecutive
// failure (n ≥ 1): uniform in [d/2, d) with d = min(max, base·2^(n−1)).
func backoff(base, maxD time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// iterator acquires a shard iterator, retrying throttles and transient
// errors. ok is false when the source is stopping or has failed.
func (s *Source) iterator(sh *shard, sp startSpec) (string, bool) {
	in := &kinesis.GetShardIteratorInput{
		StreamName:        aws.String(s.o.Stream),
		ShardId:           aws.String(sh.id),
		ShardIteratorType: sp.typ,
	}
	switch sp.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		in.StartingSequenceNumber = aws.String(sp.seq)
	case types.ShardIteratorTypeAtTimestamp:
		in.Timestamp = aws.Time(sp.ts)
	}
	fails := 0
	for {
		out, err := s.api.GetShardIterator(s.ctx, in)
		if err == nil && out.ShardIterator != nil {
			return *out.ShardIterator, true
		}
		if s.ctx.Err() != nil {
			return "", false
		}
		if err == nil {
			err = fmt.Errorf("no iterator returned")
		}
		fails++
		switch classify(err) {
		case errThrottle:
			s.m.throttle.Inc()
		case errFatal:
			s.fail(fmt.Errorf("kinesis: get shard iterator of %s/%s (%s): %w", s.o.Stream, sh.id, sp.typ, err))
			return "", false
		default:
			s.m.errs.Inc()
			if fails > s.o.MaxErrors {
				s.fail(fmt.Errorf("kinesis: get shard iterator of %s/%s: %d failures: %w", s.o.Stream, sh.id, fails, err))
				return "", false
			}
			s.log.Warn("kinesis get shard iterator failed", "shard", sh.id, "err", err, "attempt", fails)
		}
		if !sleep(s.ctx, backoff(s.o.BackoffBase, s.o.BackoffMax, fails)) {
			return "", false
		}
	}
}

// read is a shard's reader goroutine: GetRecords in a loop until the shard
// ends or the source stops.
func (s *Source) read(sh *shard, sp startSpec) {
	defer s.wg.Done()
	defer s.m.shards.Dec()
	iter, ok := s.iterator(sh, sp)
	if !ok {
		return
	}
	var lastFetched string // sequence number of the last Kinesis record queued
	var next time.Time     // earliest time of the next call
	throttles, fails := 0, 0
	var tl throttleLog
	var items []item
	for {
		if !s.waitSpace(sh) || !sleep(s.ctx, time.Until(next)) {
			return
		}
		started := time.Now()
		out, err := s.api.GetRecords(s.ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String(iter), Limit: aws.Int32(s.o.Limit)})
		s.m.calls.Inc()
		next = started.Add(s.o.MinCallInterval)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			switch classify(err) {
			case errThrottle:
				throttles++
				s.throttled(sh, &tl, "get records", err)
				next = time.Now().Add(max(s.o.MinCallInterval, backoff(s.o.BackoffBase, s.o.BackoffMax, throttles)))
			case errExpired:
				s.m.expired.Inc()
				re := sp
				if lastFetched != "" {
					re = startSpec{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: lastFetched}
				}
				s.log.Info("kinesis shard iterator expired; re-acquiring", "shard", sh.id, "after", lastFetched)
				if iter, ok = s.iterator(sh, re); !ok {
					return
				}
			case errFatal:
				s.fail(fmt.Errorf("kinesis: get records of %s/%s: %w", s.o.Stream, sh.id, err))
				return
			default:
				fails++
				s.m.errs.Inc()
				if fails > s.o.MaxErrors {
					s.fail(fmt.Errorf("kinesis: get records of %s/%s: %d failures: %w", s.o.Stream, sh.id, fails, err))
					return
				}
				s.log.Warn("kinesis get records failed", "shard", sh.id, "err", err, "attempt", fails)
				s.setReader(sh, ingest.ReaderFailing)
				next = time.Now().Add(max(s.o.MinCallInterval, backoff(s.o.BackoffBase, s.o.BackoffMax, fails)))
			}
			continue
		}
		throttles, fails = 0, 0
		s.unthrottled(sh, &tl)
		end := out.NextShardIterator == nil
		var bytes int
		items, bytes = s.deliver(sh, out.Records, aws.ToInt64(out.MillisBehindLatest), end, &sp, items)
		if n := len(out.Records); n > 0 {
			lastFetched = aws.ToString(out.Records[n-1].SequenceNumber)
		}
		if end {
			s.log.Info("kinesis shard read to its end", "shard", sh.id, "last", lastFetched)
			s.poke()
			return
		}
		iter = *out.NextShardIterator
		if rate := s.o.ReadBytesPerSec; rate > 0 && bytes > 0 {
			next = later(next, started.Add(time.Duration(float64(bytes)/float64(rate)*float64(time.Second))))
		}
		if len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
			next = later(next, started.Add(s.o.PollInterval))
		}
	}
}

// deliver queues the user records of one fetch of a shard (a GetRecords
// reply or a subscription event), and the shard's closed event after them
// at its end, and records its lag. Polled and pushed records take this one
// path. items is scratch space, returned for reuse; bytes is the size of
// the records' data.
func (s *Source) deliver(sh *shard, recs []types.Record, behind int64, end bool, sp *startSpec, items []item) (_ []item, bytes int) {
	items = items[:0]
	for _, rec := range recs {
		bytes += len(rec.Data)
		items = s.expand(items, sh.id, rec, aws.ToString(rec.SequenceNumber), sp)
	}
	if len(recs) > 0 {
		// Only the first record of a restart can be the saved one.
		sp.skipSeq = ""
	}
	s.mu.Lock()
	sh.queue = append(sh.queue, items...)
	sh.polled = true
	sh.primed = sh.primed || len(items) > 0 || behind == 0 || end
	sh.lag = behind
	if !end {
		// After the records of this read: caught up only when it left
		// nothing in the shard.
		st := ingest.ReaderBehind
		if behind == 0 {
			st = ingest.ReaderCaughtUp
		}
		s.setReaderLocked(sh, st)
	}
	if end {
		sh.ended = true
		sh.queue = append(sh.queue, item{Event: EventShardClosed, Shard: sh.id})
	}
	s.mu.Unlock()
	clear(items)
	if !end {
		s.m.behind.WithLabelValues(sh.id).Set(float64(behind))
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return items, bytes
}

// waitSpace blocks while the shard's queue is full; false when stopping.
func (s *Source) waitSpace(sh *shard) bool {
	for {
		s.mu.Lock()
		full := sh.queued() >= s.o.BufferRecords
		sh.full = full
		s.mu.Unlock()
		if !full {
			return s.ctx.Err() == nil
		}
		select {
		case <-sh.space:
		case <-s.ctx.Done():
			return false
		}
	}
}

// expand appends the user records of one Kinesis record, skipping those a
// restored position says were already returned.
func (s *Source) expand(dst []item, shardID string, rec types.Record, seq string, sp *startSpec) []item {
	var arrival int64
	if rec.ApproximateArrivalTimestamp != nil {
		arrival = rec.ApproximateArrivalTimestamp.UnixMilli()
	}
	skip := -1
	if sp.skipSeq != "" && seq == sp.skipSeq {
		skip = sp.skipSub
	}
	pk := aws.ToString(rec.PartitionKey)
	if !kpl.IsAggregated(rec.Data) {
		if skip < 0 {
			dst = append(dst, item{Shard: shardID, Seq: seq, PartitionKey: pk, Data: rec.Data, ArrivalMs: arrival})
		}
		return dst
	}
	n0 := len(dst)
	_, err := kpl.Deaggregate(rec.Data, func(i int, key string, data []byte) error {
		if i > skip {
			dst = append(dst, item{Shard: shardID, Seq: seq, Sub: i, PartitionKey: key, Data: data, ArrivalMs: arrival})
		}
		return nil
	})
	if err != nil {
		dst = dst[:n0]
		s.m.bad.Inc()
		if skip < 0 {
			dst = append(dst, item{Shard: shardID, Seq: seq, PartitionKey: pk, Data: rec.Data, ArrivalMs: arrival, Bad: kpl.Reason(err)})
		}
	}
	return dst
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
