package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
)

// Enhanced fan-out (Options.Read = ReadEFO).
//
// Open finds the stream's ARN and the consumer's, registering the consumer
// if it is missing and waiting until it is ACTIVE. Each shard's reader then
// subscribes with SubscribeToShard from the same start as a poller would
// take, and queues every event's records through deliver, the path of
// polled records. A subscription ends after 5 minutes (or earlier: a
// takeover, a broken connection); the reader subscribes again after the
// last event's ContinuationSequenceNumber. At the end of a closed shard the
// last event has no continuation: the shard is finished as the poller
// finishes it, so children still wait for their parents.

// The SDK decodes the event streams of one client with shared scratch
// state, a data race the race detector reports when several subscriptions
// are open at once (aws/smithy-go#714); it is harmless in effect. The
// in-process fake gives every subscription a client of its own.

// consumerARN returns the ARN of the consumer o.Consumer of o.Stream,
// registering it if it is missing, once DescribeStreamConsumer reports it
// ACTIVE. It waits at most o.ConsumerWait.
func consumerARN(ctx context.Context, api API, o *Options, log *slog.Logger) (string, error) {
	streamARN, err := describeARN(ctx, api, o.Stream)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(o.ConsumerWait)
	status := "missing"
	var lastErr error // of the last call, if it failed
	for attempt := 1; ; attempt++ {
		wait := o.PollInterval
		out, err := api.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{
			StreamARN: aws.String(streamARN), ConsumerName: aws.String(o.Consumer)})
		var rnf *types.ResourceNotFoundException
		lastErr = err
		switch {
		case err == nil && out.ConsumerDescription != nil:
			d := out.ConsumerDescription
			status = string(d.ConsumerStatus)
			if d.ConsumerStatus == types.ConsumerStatusActive && aws.ToString(d.ConsumerARN) != "" {
				log.Info("kinesis consumer active", "consumer", o.Consumer, "arn", *d.ConsumerARN)
				return *d.ConsumerARN, nil
			}
			attempt = 0
		case err == nil:
			return "", fmt.Errorf("kinesis: describe consumer %s of %s: no description in the reply", o.Consumer, o.Stream)
		case errors.As(err, &rnf):
			rerr := registerConsumer(ctx, api, streamARN, o.Consumer)
			lastErr = rerr
			switch {
			case rerr == nil:
				log.Info("kinesis consumer registered", "consumer", o.Consumer)
				status, attempt = string(types.ConsumerStatusCreating), 0
			case classify(rerr) == errInUse:
				// Registered by someone else meanwhile (or the stream is
				// not ACTIVE): describe it again.
				status, attempt = "registered elsewhere", 0
			case classify(rerr) == errFatal || ctx.Err() != nil:
				return "", fmt.Errorf("kinesis: register consumer %s of %s: %w", o.Consumer, o.Stream, rerr)
			case full(ctx, api, streamARN, rerr):
				// LimitExceededException with the stream's consumers all
				// taken: no wait frees one.
				return "", fmt.Errorf("kinesis: register consumer %s of %s: the stream has %d registered consumers, the most it allows: deregister unused ones (aws kinesis list-stream-consumers, deregister-stream-consumer) or run fewer ranges with enhanced fan-out: %w",
					o.Consumer, o.Stream, MaxConsumers, rerr)
			default:
				// Throttled (5 registrations per second per account, 5
				// consumers CREATING) or failed: back off.
				log.Warn("kinesis register consumer failed", "consumer", o.Consumer, "err", rerr, "attempt", attempt)
				wait = backoff(o.BackoffBase, o.BackoffMax, attempt)
			}
		case classify(err) == errFatal || ctx.Err() != nil:
			return "", fmt.Errorf("kinesis: describe consumer %s of %s: %w", o.Consumer, o.Stream, err)
		default:
			log.Warn("kinesis describe consumer failed", "consumer", o.Consumer, "err", err, "attempt", attempt)
			wait = backoff(o.BackoffBase, o.BackoffMax, attempt)
		}
		left := time.Until(deadline)
		if left <= 0 {
			if lastErr != nil {
				return "", fmt.Errorf("kinesis: consumer %s of %s is not ACTIVE after %v (status %s): %w", o.Consumer, o.Stream, o.ConsumerWait, status, lastErr)
			}
			return "", fmt.Errorf("kinesis: consumer %s of %s is not ACTIVE after %v (status %s)", o.Consumer, o.Stream, o.ConsumerWait, status)
		}
		if !sleep(ctx, min(wait, left)) {
			return "", fmt.Errorf("kinesis: wait for consumer %s of %s: %w", o.Consumer, o.Stream, ctx.Err())
		}
	}
}

// MaxConsumers is the most consumers a stream may have registered.
const MaxConsumers = 20

// full reports whether err, of a RegisterStreamConsumer, is the
// LimitExceededException of a stream whose MaxConsumers are all
// registered. The same exception also answers the account's 5
// registrations per second and a stream's 5 consumers CREATING, which a
// wait clears: those, and a failed listing, are not full.
func full(ctx context.Context, api API, streamARN string, err error) bool {
	var lee *types.LimitExceededException
	if !errors.As(err, &lee) {
		return false
	}
	names, lerr := ConsumerNames(ctx, api, streamARN)
	return lerr == nil && len(names) >= MaxConsumers
}

// ConsumerNames returns the names of the consumers registered on the
// stream streamARN (ListStreamConsumers, every page).
func ConsumerNames(ctx context.Context, api API, streamARN string) ([]string, error) {
	var names []string
	in := &kinesis.ListStreamConsumersInput{StreamARN: aws.String(streamARN)}
	for {
		out, err := api.ListStreamConsumers(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("kinesis: list consumers of %s: %w", streamARN, err)
		}
		for _, c := range out.Consumers {
			names = append(names, aws.ToString(c.ConsumerName))
		}
		if aws.ToString(out.NextToken) == "" {
			return names, nil
		}
		in = &kinesis.ListStreamConsumersInput{StreamARN: aws.String(streamARN), NextToken: out.NextToken}
	}
}

// StreamConsumerRoom checks that the consumers want (one per range of a
// job) fit on stream beside the consumers registered on it now, with room
// for a blue/green copy of the job (CheckConsumerRoom). A fleet reading
// with enhanced fan-out calls it before it registers any: past the
// stream's limit, registration fails with LimitExceededException on every
// worker in turn and the range's ads are never counted.
func StreamConsumerRoom(ctx context.Context, api API, stream string, want []string) error {
	streamARN, err := describeARN(ctx, api, stream)
	if err != nil {
		return err
	}
	var registered []string
	if err := retryCall(ctx, func() (err error) { registered, err = ConsumerNames(ctx, api, streamARN); return err }); err != nil {
		return err
	}
	if err := CheckConsumerRoom(registered, want); err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	return nil
}

// describeARN returns the ARN of stream (DescribeStreamSummary, retried).
func describeARN(ctx context.Context, api API, stream string) (string, error) {
	var arn string
	err := retryCall(ctx, func() error {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err != nil {
			return err
		}
		if out.StreamDescriptionSummary == nil || aws.ToString(out.StreamDescriptionSummary.StreamARN) == "" {
			return fmt.Errorf("no stream ARN in the reply")
		}
		arn = *out.StreamDescriptionSummary.StreamARN
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("kinesis: describe stream %s: %w", stream, err)
	}
	return arn, nil
}

func registerConsumer(ctx context.Context, api API, streamARN, name string) error {
	_, err := api.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{
		StreamARN: aws.String(streamARN), ConsumerName: aws.String(name)})
	return err
}

// startingPosition is the SubscribeToShard form of a start.
func startingPosition(sp startSpec) *types.StartingPosition {
	p := &types.StartingPosition{Type: sp.typ}
	switch sp.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		p.SequenceNumber = aws.String(sp.seq)
	case types.ShardIteratorTypeAtTimestamp:
		p.Timestamp = aws.Time(sp.ts)
	}
	return p
}

// subscribe is a shard's reader goroutine with ReadEFO: one subscription
// after another, each read to its end, until the shard ends or the source
// stops.
func (s *Source) subscribe(sh *shard, sp startSpec) {
	defer s.wg.Done()
	defer s.m.shards.Dec()
	var cont string    // ContinuationSequenceNumber of the last event queued
	var next time.Time // earliest time of the next SubscribeToShard
	subs, retries, fails := 0, 0, 0
	var tl throttleLog
	var items []item
	for {
		if !sleep(s.ctx, time.Until(next)) {
			return
		}
		// Until the first records of a restored position are queued, the
		// start is kept: it skips what was returned before the restart.
		from := sp
		if cont != "" && sp.skipSeq == "" {
			from = startSpec{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: cont}
		}
		next = time.Now().Add(s.o.SubscribeInterval)
		out, err := s.api.SubscribeToShard(s.ctx, &kinesis.SubscribeToShardInput{
			ConsumerARN: aws.String(s.consumer), ShardId: aws.String(sh.id), StartingPosition: startingPosition(from)})
		if err == nil && out.GetStream() == nil {
			err = errors.New("no event stream in the reply")
		}
		started := err == nil // a later error is the event stream's
		if started {
			s.unthrottled(sh, &tl)
			subs++
			s.m.subs.Inc()
			if subs > 1 {
				s.m.resubs.Inc()
			}
			s.log.Debug("kinesis subscribed", "shard", sh.id, "from", string(from.typ), "seq", from.seq, "subscription", subs)
			var events int
			var end bool
			items, events, end, err = s.readSubscription(sh, out.GetStream(), &sp, &cont, items)
			if end {
				s.log.Info("kinesis shard read to its end", "shard", sh.id, "last", cont)
				s.poke()
				return
			}
			if events > 0 {
				retries, fails = 0, 0
			}
			if s.ctx.Err() != nil {
				return
			}
			if err == nil {
				continue // the subscription's lifetime is over: renew it
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		retries++
		switch classify(err) {
		case errInUse:
			s.m.inUse.Inc()
			if started {
				// Another reader subscribed through this consumer and took
				// the subscription over: two readers share the consumer.
				s.log.Warn("kinesis subscription taken over by another reader of the consumer; subscribing again",
					"shard", sh.id, "consumer", s.o.Consumer, "err", err)
			} else {
				// Refused for 5 s after another subscription: ours from
				// before a broken connection or a restart, or another
				// reader's.
				s.log.Info("kinesis subscription in use; retrying", "shard", sh.id, "consumer", s.o.Consumer, "err", err, "attempt", retries)
			}
		case errThrottle:
			s.throttled(sh, &tl, "subscribe", err)
		case errFatal:
			s.fail(fmt.Errorf("kinesis: subscribe to %s/%s: %w", s.o.Stream, sh.id, err))
			return
		default:
			fails++
			s.m.errs.Inc()
			if fails > s.o.MaxErrors {
				s.fail(fmt.Errorf("kinesis: subscribe to %s/%s: %d failures: %w", s.o.Stream, sh.id, fails, err))
				return
			}
			s.log.Warn("kinesis subscription failed", "shard", sh.id, "err", err, "attempt", fails)
			s.setReader(sh, ingest.ReaderFailing)
		}
		next = later(next, time.Now().Add(backoff(s.o.BackoffBase, s.o.BackoffMax, retries)))
	}
}

// readSubscription queues the events of one subscription until its stream
// ends (err is then the stream's error, nil for a clean end), the shard
// ends (end) or the source stops. It closes the stream.
func (s *Source) readSubscription(sh *shard, es *kinesis.SubscribeToShardEventStream, sp *startSpec, cont *string, items []item) (_ []item, events int, end bool, err error) {
	defer es.Close()
	for {
		if !s.waitSpace(sh) {
			return items, events, false, nil
		}
		var ev types.SubscribeToShardEventStream
		var ok bool
		select {
		case ev, ok = <-es.Events():
		case <-s.ctx.Done():
			return items, events, false, nil
		}
		if !ok {
			return items, events, false, es.Err()
		}
		e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !isEvent {
			s.log.Debug("kinesis subscription: unknown event ignored", "shard", sh.id, "type", fmt.Sprintf("%T", ev))
			continue
		}
		events++
		s.m.events.Inc()
		v := &e.Value
		end = v.ContinuationSequenceNumber == nil
		items, _ = s.deliver(sh, v.Records, aws.ToInt64(v.MillisBehindLatest), end, sp, items)
		if end {
			return items, events, true, nil
		}
		*cont = *v.ContinuationSequenceNumber
	}
}

// rangeConsumer matches the consumer of a fleet's key-group range,
// "<consumer>-kg<from>-<to>".
var rangeConsumer = regexp.MustCompile(`-kg[0-9]+-[0-9]+$`)

// CheckConsumerRoom returns an error naming the numbers when the consumers
// want (one per range of a job) do not fit the stream beside the
// consumers registered on it, leaving room for a blue/green copy of the
// job (another len(want)): registered + the wanted ones not yet
// registered + room > MaxConsumers. The ones of want already registered
// count once. The room is less the range consumers of another job already
// on the stream (names ending "-kg<from>-<to>"): they are that copy.
func CheckConsumerRoom(registered, want []string) error {
	have := make(map[string]bool, len(registered))
	for _, n := range registered {
		have[n] = true
	}
	ours := make(map[string]bool, len(want))
	needed := 0
	for _, n := range want {
		ours[n] = true
		if !have[n] {
			needed++
		}
	}
	copies := 0
	for _, n := range registered {
		if !ours[n] && rangeConsumer.MatchString(n) {
			copies++
		}
	}
	room := max(len(want)-copies, 0)
	if len(registered)+needed+room > MaxConsumers {
		return fmt.Errorf("kinesis: %d consumers do not fit the stream: it has %d registered, %d of them this job's; %d more plus %d for a blue/green copy make %d, more than the %d a stream allows: use at most %d ranges with enhanced fan-out, deregister unused consumers, or read by polling",
			len(want), len(registered), len(want)-needed, needed, room, len(registered)+needed+room, MaxConsumers, max((MaxConsumers-(len(registered)-(len(want)-needed))+copies)/2, 0))
	}
	return nil
}
