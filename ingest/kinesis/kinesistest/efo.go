package kinesistest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/eventstream"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"

	ikinesis "github.com/adclick/adclick/ingest/kinesis"
)

// Enhanced fan-out in the fake: registered consumers and SubscribeToShard.
//
// A subscription's event stream is a real SDK event stream: SubscribeToShard
// calls a *kinesis.Client of its own (one per subscription) whose HTTP
// client is in-process. Its response body carries the event-stream framing
// the service sends (an initial response, then SubscribeToShardEvent and
// exception messages), written by a pusher goroutine, so the events reach
// the caller through the SDK's own decoding, as from the service.

// Region and Account appear in the ARNs the fake makes.
const (
	Region  = "us-east-1"
	Account = "123456789012"
)

// StreamARN returns the ARN of a stream of the fake.
func StreamARN(stream string) string {
	return "arn:aws:kinesis:" + Region + ":" + Account + ":stream/" + stream
}

// Service limits the fake enforces.
const (
	maxConsumers      = 20 // registered consumers per stream
	maxCreating       = 5  // consumers CREATING at once per stream
	defaultEventLimit = 10_000
	defaultIdleEvent  = time.Second
)

type fconsumer struct {
	name, arn string
	stream    *fstream
	created   time.Time
	activeAt  time.Time
}

func (c *fconsumer) status(now time.Time) types.ConsumerStatus {
	if now.Before(c.activeAt) {
		return types.ConsumerStatusCreating
	}
	return types.ConsumerStatusActive
}

// subKey names the subscriptions of one consumer on one shard.
type subKey struct{ consumer, shard string }

// fsub is one SubscribeToShard subscription. Its fields after start are
// guarded by Fake.mu.
type fsub struct {
	key     subKey
	stream  *fstream
	shard   *fshard
	start   int // index of the first record to push
	started time.Time

	stop     chan struct{} // closed when the fake ends the subscription
	stopErr  error         // why: nil for a clean end
	stopped  bool
	released bool // ended by the service: no ResourceInUse window
	pushing  bool // the pusher started
}

// endLocked stops the subscription's event stream with err (nil: a clean
// end). With release, the service no longer holds the subscription, so a
// new one on the same consumer and shard is not refused.
func (s *fsub) endLocked(err error, release bool) {
	s.released = s.released || release
	if !s.stopped {
		s.stopped, s.stopErr = true, err
		close(s.stop)
	}
}

func inUse(format string, args ...any) error {
	return &types.ResourceInUseException{Message: aws.String(fmt.Sprintf(format, args...))}
}

func limited(format string, args ...any) error {
	return &types.LimitExceededException{Message: aws.String(fmt.Sprintf(format, args...))}
}

// changedLocked wakes the pushers waiting for records or shards.
func (f *Fake) changedLocked() {
	close(f.tick)
	f.tick = make(chan struct{})
}

func (f *Fake) streamByARN(arn *string) (*fstream, error) {
	a := aws.ToString(arn)
	if a == "" {
		return nil, invalid("StreamARN is required")
	}
	name, ok := strings.CutPrefix(a, StreamARN(""))
	if !ok || name == "" || strings.Contains(name, "/") {
		return nil, invalid("StreamARN %q is not a stream ARN of this account and region", a)
	}
	return f.stream(&name)
}

// RegisterStreamConsumer registers a consumer, CREATING for
// ConsumerActivation. A name already registered on the stream is
// ResourceInUseException; more than 20 consumers, or 5 CREATING, on a
// stream is LimitExceededException.
func (f *Fake) RegisterStreamConsumer(_ context.Context, in *kinesis.RegisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("RegisterStreamConsumer")
	s, err := f.streamByARN(in.StreamARN)
	if err != nil {
		return nil, err
	}
	name := aws.ToString(in.ConsumerName)
	if !ikinesis.ValidConsumerName(name) {
		return nil, invalid("ConsumerName %q: want 1 to 128 of [a-zA-Z0-9_.-]", name)
	}
	now := time.Now()
	n, creating := 0, 0
	for _, c := range f.consumers {
		if c.stream != s {
			continue
		}
		if c.name == name {
			return nil, inUse("consumer %s of stream %s already exists", name, s.name)
		}
		n++
		if c.status(now) == types.ConsumerStatusCreating {
			creating++
		}
	}
	if n >= maxConsumers {
		return nil, limited("stream %s has %d consumers", s.name, n)
	}
	if creating >= maxCreating {
		return nil, limited("stream %s has %d consumers CREATING", s.name, creating)
	}
	c := &fconsumer{name: name, stream: s, created: now, activeAt: now.Add(f.ConsumerActivation)}
	c.arn = fmt.Sprintf("%s/consumer/%s:%d", StreamARN(s.name), name, now.Unix())
	f.consumers[c.arn] = c
	return &kinesis.RegisterStreamConsumerOutput{Consumer: &types.Consumer{
		ConsumerARN: aws.String(c.arn), ConsumerName: aws.String(name),
		ConsumerStatus: types.ConsumerStatusCreating, ConsumerCreationTimestamp: aws.Time(now),
	}}, nil
}

// DescribeStreamConsumer describes a consumer named by ConsumerARN, or by
// StreamARN and ConsumerName.
func (f *Fake) DescribeStreamConsumer(_ context.Context, in *kinesis.DescribeStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("DescribeStreamConsumer")
	var c *fconsumer
	switch {
	case in.ConsumerARN != nil:
		c = f.consumers[*in.ConsumerARN]
	case in.StreamARN != nil && in.ConsumerName != nil:
		s, err := f.streamByARN(in.StreamARN)
		if err != nil {
			return nil, err
		}
		for _, k := range f.consumers {
			if k.stream == s && k.name == *in.ConsumerName {
				c = k
			}
		}
	default:
		return nil, invalid("ConsumerARN, or StreamARN and ConsumerName, are required")
	}
	if c == nil {
		return nil, notFound("consumer %s not found", aws.ToString(in.ConsumerARN)+aws.ToString(in.ConsumerName))
	}
	return &kinesis.DescribeStreamConsumerOutput{ConsumerDescription: &types.ConsumerDescription{
		ConsumerARN: aws.String(c.arn), ConsumerName: aws.String(c.name), ConsumerStatus: c.status(time.Now()),
		ConsumerCreationTimestamp: aws.Time(c.created), StreamARN: aws.String(StreamARN(c.stream.name)),
	}}, nil
}

// ListStreamConsumers lists the consumers registered on a stream, by name,
// in one page (the fake holds at most 20).
func (f *Fake) ListStreamConsumers(_ context.Context, in *kinesis.ListStreamConsumersInput, _ ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("ListStreamConsumers")
	s, err := f.streamByARN(in.StreamARN)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := &kinesis.ListStreamConsumersOutput{}
	for _, c := range f.consumers {
		if c.stream == s {
			out.Consumers = append(out.Consumers, types.Consumer{ConsumerARN: aws.String(c.arn), ConsumerName: aws.String(c.name),
				ConsumerStatus: c.status(now), ConsumerCreationTimestamp: aws.Time(c.created)})
		}
	}
	slices.SortFunc(out.Consumers, func(a, b types.Consumer) int { return strings.Compare(*a.ConsumerName, *b.ConsumerName) })
	return out, nil
}

// SubscribeToShard subscribes an ACTIVE consumer to a shard and returns the
// SDK's event stream of the subscription. Its events carry the shard's
// records in order, at most EventRecords each, at most SubscribeBytesPerSec
// of record data per consumer and shard, with ContinuationSequenceNumber
// (the last record pushed) and MillisBehindLatest; a caught-up subscription
// gets an event with no records every IdleEvent. At the end of a closed
// shard the last event has ChildShards and no ContinuationSequenceNumber,
// and the stream ends. The stream also ends after SubscriptionLifetime.
//
// A second call for the same consumer and shard within SubscribeInterval
// of the last successful one fails with LimitExceededException; within
// InUseWindow, while the service still holds the last subscription (not
// ended by its lifetime, the shard's end or EndSubscriptions), with
// ResourceInUseException. A later call takes the subscription over: the old
// event stream fails with ResourceInUseException.
func (f *Fake) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, _ ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	sub, err := f.newSubscription(in)
	if err != nil {
		return nil, err
	}
	body := &eventBody{ch: make(chan []byte), gone: make(chan struct{}), fin: make(chan struct{})}
	client := kinesis.New(kinesis.Options{
		Region:       Region,
		BaseEndpoint: aws.String("https://kinesis.fake.invalid"), // never dialled
		Credentials:  credentials.NewStaticCredentialsProvider("fake", "fake", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   &subscribeHTTP{f: f, sub: sub, body: body},
	})
	out, err := client.SubscribeToShard(ctx, in)
	if err != nil {
		f.mu.Lock()
		if !sub.pushing && f.subs[sub.key] == sub {
			delete(f.subs, sub.key)
		}
		f.mu.Unlock()
		return nil, err
	}
	return out, nil
}

// newSubscription checks a SubscribeToShard call and records the
// subscription, taking an older one over.
func (f *Fake) newSubscription(in *kinesis.SubscribeToShardInput) (*fsub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("SubscribeToShard")
	c, ok := f.consumers[aws.ToString(in.ConsumerARN)]
	if !ok {
		return nil, notFound("consumer %s not found", aws.ToString(in.ConsumerARN))
	}
	now := time.Now()
	if st := c.status(now); st != types.ConsumerStatusActive {
		return nil, inUse("consumer %s is %s", c.name, st)
	}
	sh, err := c.stream.shard(in.ShardId)
	if err != nil {
		return nil, err
	}
	if err := f.throttledLocked(c.stream.name, sh.id); err != nil {
		return nil, err
	}
	if in.StartingPosition == nil {
		return nil, invalid("StartingPosition is required")
	}
	p := in.StartingPosition
	idx, err := sh.index(p.Type, aws.ToString(p.SequenceNumber), p.Timestamp)
	if err != nil {
		return nil, err
	}
	key := subKey{c.arn, sh.id}
	if old := f.subs[key]; old != nil {
		age := now.Sub(old.started)
		if f.SubscribeInterval > 0 && age < f.SubscribeInterval {
			return nil, limited("consumer %s subscribed to shard %s %v ago", c.name, sh.id, age)
		}
		if !old.released {
			if f.InUseWindow > 0 && age < f.InUseWindow {
				return nil, inUse("consumer %s has a subscription to shard %s from %v ago", c.name, sh.id, age)
			}
			old.endLocked(inUse("consumer %s subscribed to shard %s again: subscription taken over", c.name, sh.id), true)
		}
	}
	sub := &fsub{key: key, stream: c.stream, shard: sh, start: idx, started: now, stop: make(chan struct{})}
	f.subs[key] = sub
	return sub, nil
}

// EndSubscriptions ends every subscription's event stream as the service
// would: with err nil cleanly (as at the end of its lifetime); otherwise
// it fails with err, sent as an exception event when err is one the event
// stream carries (such as *types.InternalFailureException), or as a read
// error of the connection. The service no longer holds them, so new
// subscriptions are not refused. It returns how many it ended.
func (f *Fake) EndSubscriptions(err error) int {
	return f.endAll(err, true)
}

// DropSubscriptions breaks the connection of every subscription (its
// event stream fails with a read error) while the service still holds
// them: a new SubscribeToShard within InUseWindow of one fails with
// ResourceInUseException. It returns how many it broke.
func (f *Fake) DropSubscriptions() int {
	return f.endAll(errConnectionReset, false)
}

var errConnectionReset = errors.New("kinesistest: connection reset")

func (f *Fake) endAll(err error, release bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.subs {
		if !s.stopped {
			s.endLocked(err, release)
			n++
		}
	}
	return n
}

// OpenSubscriptions returns how many subscriptions still have a pusher
// running: their event stream has not been closed by either side.
func (f *Fake) OpenSubscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// PushedBytes returns how many bytes of record data the fake pushed to
// the consumer on the shard, over all its subscriptions.
func (f *Fake) PushedBytes(consumerARN, shard string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pushed[subKey{consumerARN, shard}]
}

// subscribeHTTP is the HTTP client of one subscription's SDK client: it
// answers the SubscribeToShard request with the event-stream body and
// starts the pusher.
type subscribeHTTP struct {
	f    *Fake
	sub  *fsub
	body *eventBody
}

func (h *subscribeHTTP) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	h.f.mu.Lock()
	h.sub.pushing = true
	h.f.open++
	h.f.mu.Unlock()
	h.body.ctx = req.Context()
	go h.f.push(req.Context(), h.sub, h.body)
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header:  http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
		Body:    h.body,
		Request: req, ContentLength: -1,
	}, nil
}

// eventBody is a subscription's response body: the messages the pusher
// hands over, one at a time, then io.EOF or the error it finished with.
type eventBody struct {
	ctx  context.Context // of the request: its end fails reads, as on a real connection
	ch   chan []byte
	gone chan struct{} // closed by Close
	fin  chan struct{} // closed by the pusher after its last message
	err  error         // what Read returns after fin
	cur  []byte
	once sync.Once
}

var errBodyClosed = errors.New("kinesistest: read on a closed event stream body")

func (b *eventBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		select {
		case c := <-b.ch:
			b.cur = c
		case <-b.fin:
			return 0, b.err
		case <-b.gone:
			return 0, errBodyClosed
		case <-b.ctx.Done():
			return 0, b.ctx.Err()
		}
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

func (b *eventBody) Close() error {
	b.once.Do(func() { close(b.gone) })
	return nil
}

// errStop says why the pusher stopped sending.
type errStop int

const (
	stopByFake    errStop = iota // sub.stop closed
	stopGone                     // the client closed the body
	stopCtx                      // the request's context ended
	stopLifetime                 // the subscription's lifetime passed
	stopShardDone                // the last event of a closed shard was sent
)

// push writes a subscription's event stream until it ends.
func (f *Fake) push(ctx context.Context, sub *fsub, body *eventBody) {
	p := pusher{f: f, sub: sub, body: body, ctx: ctx, proto: awsjson.New11(schemas.Kinesis_20131202)}
	if d := f.SubscriptionLifetime; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		p.expire = t.C
	}
	why := p.run()
	var err error // what the body's reader gets after the last message
	switch why {
	case stopByFake:
		f.mu.Lock()
		err = sub.stopErr
		f.mu.Unlock()
		var ae smithy.APIError
		if errors.As(err, &ae) && schemas.SubscribeToShardEventStream.Member(ae.ErrorCode()) != nil {
			// The exception comes after what was sent, then the stream ends.
			if p.send(exceptionMessage(ae), false) == nil {
				err = nil
			}
		}
	case stopCtx:
		err = ctx.Err()
	case stopLifetime, stopShardDone:
		f.mu.Lock()
		sub.endLocked(nil, true)
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.open--
	f.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	body.err = err
	close(body.fin)
}

type pusher struct {
	f      *Fake
	sub    *fsub
	body   *eventBody
	ctx    context.Context
	expire <-chan time.Time
	proto  *awsjson.Protocol
	buf    bytes.Buffer
}

// run pushes events; it returns why it stopped.
func (p *pusher) run() errStop {
	f, sub := p.f, p.sub
	if why, stopped := p.sendErr(p.send(initialResponse(), true)); stopped {
		return why
	}
	idle := f.IdleEvent
	if idle <= 0 {
		idle = defaultIdleEvent
	}
	next, first := sub.start, true
	var lastSent time.Time
	for {
		f.mu.Lock()
		ev, n, size, last, tick := f.eventLocked(sub, next)
		f.mu.Unlock()
		if n == 0 && !last && !first {
			if wait := idle - time.Since(lastSent); wait > 0 {
				t := time.NewTimer(wait)
				why, stopped := p.wait(tick, t.C)
				t.Stop()
				if stopped {
					return why
				}
				continue // records arrived, or it is time for an idle event
			}
		}
		if rate := f.SubscribeBytesPerSec; rate > 0 && size > 0 {
			f.mu.Lock()
			at := f.budget[sub.key]
			if now := time.Now(); at.Before(now) {
				at = now
			}
			f.budget[sub.key] = at.Add(time.Duration(float64(size) / float64(rate) * float64(time.Second)))
			f.mu.Unlock()
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				why, stopped := p.wait(nil, t.C)
				t.Stop()
				if stopped {
					return why
				}
			}
		}
		p.buf.Reset()
		if err := p.proto.SerializeEventMessage(schemas.SubscribeToShardEventStream, schemas.SubscribeToShardEventStream_SubscribeToShardEvent, &ev, &p.buf); err != nil {
			panic(fmt.Sprintf("kinesistest: encode event: %v", err))
		}
		if why, stopped := p.sendErr(p.send(bytes.Clone(p.buf.Bytes()), true)); stopped {
			return why
		}
		first, lastSent, next = false, time.Now(), next+n
		f.mu.Lock()
		f.pushed[sub.key] += int64(size)
		f.mu.Unlock()
		if last {
			return stopShardDone
		}
	}
}

// stopSignal is the error send returns when the pusher must stop.
type stopSignal struct{ why errStop }

func (s stopSignal) Error() string { return fmt.Sprintf("kinesistest: pusher stopped (%d)", s.why) }

func (p *pusher) sendErr(err error) (errStop, bool) {
	var s stopSignal
	if errors.As(err, &s) {
		return s.why, true
	}
	return 0, false
}

// send hands one message to the body's reader. With interruptible, the
// fake's end of the subscription and its lifetime interrupt it; the client
// going away or the request's end always do.
func (p *pusher) send(msg []byte, interruptible bool) error {
	stop, expire := p.sub.stop, p.expire
	if !interruptible {
		stop, expire = nil, nil
	}
	select {
	case p.body.ch <- msg:
		return nil
	case <-stop:
		return stopSignal{stopByFake}
	case <-expire:
		return stopSignal{stopLifetime}
	case <-p.body.gone:
		return stopSignal{stopGone}
	case <-p.ctx.Done():
		return stopSignal{stopCtx}
	}
}

// wait waits for a change of records or shards (tick) or for timer; it
// reports whether the pusher must stop instead, and why.
func (p *pusher) wait(tick <-chan struct{}, timer <-chan time.Time) (errStop, bool) {
	select {
	case <-tick:
	case <-timer:
	case <-p.sub.stop:
		return stopByFake, true
	case <-p.expire:
		return stopLifetime, true
	case <-p.body.gone:
		return stopGone, true
	case <-p.ctx.Done():
		return stopCtx, true
	}
	return 0, false
}

// eventLocked builds the event for the records of the subscription's shard
// from index next: n records of size bytes of data; last if it is the end
// of a closed shard. tick is closed when records or shards change.
func (f *Fake) eventLocked(sub *fsub, next int) (ev types.SubscribeToShardEvent, n, size int, last bool, tick chan struct{}) {
	sh := sub.shard
	limit := f.EventRecords
	if limit <= 0 {
		limit = defaultEventLimit
	}
	end := min(next+limit, len(sh.recs))
	ev.Records = make([]types.Record, 0, end-next)
	for _, r := range sh.recs[next:end] {
		ev.Records = append(ev.Records, types.Record{
			SequenceNumber: aws.String(r.seq), PartitionKey: aws.String(r.pk),
			Data: append([]byte(nil), r.data...), ApproximateArrivalTimestamp: aws.Time(r.arrival),
		})
		size += len(r.data)
	}
	behind := int64(0)
	if end < len(sh.recs) {
		behind = max(1, f.Now().Sub(sh.recs[end].arrival).Milliseconds())
	}
	ev.MillisBehindLatest = aws.Int64(behind)
	last = end == len(sh.recs) && sh.endSeq != ""
	if last {
		for _, c := range sub.stream.shards {
			if c.parent != sh.id && c.adjacent != sh.id {
				continue
			}
			cs := types.ChildShard{ShardId: aws.String(c.id),
				HashKeyRange: &types.HashKeyRange{StartingHashKey: aws.String(c.lo.String()), EndingHashKey: aws.String(c.hi.String())}}
			for _, p := range []string{c.parent, c.adjacent} {
				if p != "" {
					cs.ParentShards = append(cs.ParentShards, p)
				}
			}
			ev.ChildShards = append(ev.ChildShards, cs)
		}
	} else {
		// The last record pushed, or (none yet) the shard's starting
		// sequence number: AFTER_SEQUENCE_NUMBER it resumes at end.
		cont := sh.startSeq
		if end > 0 {
			cont = sh.recs[end-1].seq
		}
		ev.ContinuationSequenceNumber = aws.String(cont)
	}
	return ev, end - next, size, last, f.tick
}

func initialResponse() []byte {
	var m eventstream.Message
	m.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(eventstream.EventMessageType))
	m.Headers.Set(eventstream.EventTypeHeader, eventstream.StringValue("initial-response"))
	m.Headers.Set(eventstream.ContentTypeHeader, eventstream.StringValue("application/json"))
	m.Payload = []byte("{}")
	return encodeMessage(m)
}

func exceptionMessage(ae smithy.APIError) []byte {
	var m eventstream.Message
	m.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(eventstream.ExceptionMessageType))
	m.Headers.Set(eventstream.ExceptionTypeHeader, eventstream.StringValue(ae.ErrorCode()))
	m.Headers.Set(eventstream.ContentTypeHeader, eventstream.StringValue("application/json"))
	m.Payload, _ = json.Marshal(map[string]string{"message": ae.ErrorMessage()})
	return encodeMessage(m)
}

func encodeMessage(m eventstream.Message) []byte {
	var buf bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&buf, m); err != nil {
		panic(fmt.Sprintf("kinesistest: encode event-stream message: %v", err))
	}
	return buf.Bytes()
}
