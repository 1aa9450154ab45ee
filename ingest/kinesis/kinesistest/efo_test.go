package kinesistest_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/goleak"

	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const stream = "clicks"

var ctx = context.Background()

// newFake returns a fake with a stream of n shards and enhanced fan-out
// limits short enough for tests (each test sets what it checks).
func newFake(t *testing.T, n int) *kinesistest.Fake {
	t.Helper()
	f := kinesistest.NewFake()
	f.InUseWindow = 0
	f.SubscribeInterval = 0
	f.IdleEvent = 10 * time.Millisecond
	if _, err := f.CreateStream(ctx, &sdk.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(n))}); err != nil {
		t.Fatal(err)
	}
	return f
}

func shardID(i int) string { return fmt.Sprintf("shardId-%012d", i) }

// put puts n records numbered from start into shard i (by explicit hash
// key) and returns their sequence numbers.
func put(t *testing.T, f *kinesistest.Fake, i, start, n int) []string {
	t.Helper()
	out, err := f.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	var hk string
	for _, s := range out.Shards {
		if *s.ShardId == shardID(i) {
			hk = *s.HashKeyRange.StartingHashKey
		}
	}
	var entries []types.PutRecordsRequestEntry
	for k := start; k < start+n; k++ {
		entries = append(entries, types.PutRecordsRequestEntry{Data: fmt.Appendf(nil, "r%d", k), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(hk)})
	}
	res, err := f.PutRecords(ctx, &sdk.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []string
	for _, r := range res.Records {
		if *r.ShardId != shardID(i) {
			t.Fatalf("record put into %s, want %s", *r.ShardId, shardID(i))
		}
		seqs = append(seqs, *r.SequenceNumber)
	}
	return seqs
}

// consumer registers a consumer and returns its ARN.
func consumer(t *testing.T, f *kinesistest.Fake, name string) string {
	t.Helper()
	out, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: aws.String(kinesistest.StreamARN(stream)), ConsumerName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return *out.Consumer.ConsumerARN
}

func subscribe(ctx context.Context, f *kinesistest.Fake, arn string, shard int, pos types.StartingPosition) (*sdk.SubscribeToShardEventStream, error) {
	out, err := f.SubscribeToShard(ctx, &sdk.SubscribeToShardInput{ConsumerARN: aws.String(arn), ShardId: aws.String(shardID(shard)), StartingPosition: &pos})
	if err != nil {
		return nil, err
	}
	return out.GetStream(), nil
}

func mustSubscribe(t *testing.T, f *kinesistest.Fake, arn string, shard int, pos types.StartingPosition) *sdk.SubscribeToShardEventStream {
	t.Helper()
	es, err := subscribe(ctx, f, arn, shard, pos)
	if err != nil {
		t.Fatalf("SubscribeToShard: %v", err)
	}
	t.Cleanup(func() { es.Close() })
	return es
}

var trimHorizon = types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon}

func after(seq string) types.StartingPosition {
	return types.StartingPosition{Type: types.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: aws.String(seq)}
}

// events reads events until done says so, the stream ends (ended) or 10 s
// pass (a failure).
func events(t *testing.T, es *sdk.SubscribeToShardEventStream, done func([]types.SubscribeToShardEvent) bool) (evs []types.SubscribeToShardEvent, ended bool) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for !done(evs) {
		select {
		case ev, ok := <-es.Events():
			if !ok {
				return evs, true
			}
			e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
			if !isEvent {
				t.Fatalf("unexpected event %T", ev)
			}
			evs = append(evs, e.Value)
		case <-timeout.C:
			t.Fatalf("events: not done within 10s (%d events)", len(evs))
		}
	}
	return evs, false
}

// recordCount is a done func: n records received.
func recordCount(n int) func([]types.SubscribeToShardEvent) bool {
	return func(evs []types.SubscribeToShardEvent) bool { return len(flatten(evs)) >= n }
}

func never([]types.SubscribeToShardEvent) bool { return false }

func flatten(evs []types.SubscribeToShardEvent) []string {
	var out []string
	for _, e := range evs {
		for _, r := range e.Records {
			out = append(out, string(r.Data))
		}
	}
	return out
}

func want(start, n int) []string {
	var out []string
	for k := start; k < start+n; k++ {
		out = append(out, fmt.Sprint("r", k))
	}
	return out
}

func checkRecords(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("records: got %v, want %v", got, want)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestConsumers(t *testing.T) {
	f := newFake(t, 1)
	f.ConsumerActivation = time.Hour
	sarn := aws.String(kinesistest.StreamARN(stream))
	out, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("c0")})
	if err != nil {
		t.Fatal(err)
	}
	c := out.Consumer
	if c.ConsumerStatus != types.ConsumerStatusCreating || !strings.HasPrefix(*c.ConsumerARN, *sarn+"/consumer/c0:") {
		t.Fatalf("registered %s %s, want CREATING under %s", *c.ConsumerARN, c.ConsumerStatus, *sarn)
	}
	// Registering it again: ResourceInUseException.
	_, err = f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("c0")})
	var riu *types.ResourceInUseException
	if !errors.As(err, &riu) {
		t.Fatalf("second registration: got %v, want ResourceInUseException", err)
	}
	// Described by ARN and by name; CREATING until activated.
	for _, in := range []*sdk.DescribeStreamConsumerInput{{ConsumerARN: c.ConsumerARN}, {StreamARN: sarn, ConsumerName: aws.String("c0")}} {
		d, err := f.DescribeStreamConsumer(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if *d.ConsumerDescription.ConsumerARN != *c.ConsumerARN || d.ConsumerDescription.ConsumerStatus != types.ConsumerStatusCreating {
			t.Fatalf("described %+v", d.ConsumerDescription)
		}
	}
	// Not ACTIVE: no subscription.
	if _, err := subscribe(ctx, f, *c.ConsumerARN, 0, trimHorizon); !errors.As(err, &riu) {
		t.Fatalf("subscribe while CREATING: got %v, want ResourceInUseException", err)
	}
	// At most 5 CREATING.
	for i := 1; i < 5; i++ {
		consumer(t, f, fmt.Sprint("c", i))
	}
	_, err = f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("c5")})
	var lee *types.LimitExceededException
	if !errors.As(err, &lee) {
		t.Fatalf("sixth CREATING consumer: got %v, want LimitExceededException", err)
	}
	// Unknown consumer, bad name, unknown stream.
	var rnf *types.ResourceNotFoundException
	if _, err := f.DescribeStreamConsumer(ctx, &sdk.DescribeStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("nope")}); !errors.As(err, &rnf) {
		t.Fatalf("describe unknown: got %v, want ResourceNotFoundException", err)
	}
	var inv *types.InvalidArgumentException
	if _, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("a b")}); !errors.As(err, &inv) {
		t.Fatalf("bad name: got %v, want InvalidArgumentException", err)
	}
	if _, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: aws.String(kinesistest.StreamARN("other")), ConsumerName: aws.String("c")}); !errors.As(err, &rnf) {
		t.Fatalf("unknown stream: got %v, want ResourceNotFoundException", err)
	}
	sum, err := f.DescribeStreamSummary(ctx, &sdk.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	if *sum.StreamDescriptionSummary.StreamARN != *sarn || *sum.StreamDescriptionSummary.ConsumerCount != 5 {
		t.Fatalf("summary: ARN %s, %d consumers", *sum.StreamDescriptionSummary.StreamARN, *sum.StreamDescriptionSummary.ConsumerCount)
	}

	// Active at once without an activation delay; at most 20 per stream.
	g := newFake(t, 1)
	arn := consumer(t, g, "c0")
	d, err := g.DescribeStreamConsumer(ctx, &sdk.DescribeStreamConsumerInput{ConsumerARN: aws.String(arn)})
	if err != nil || d.ConsumerDescription.ConsumerStatus != types.ConsumerStatusActive {
		t.Fatalf("describe: %v %v, want ACTIVE", d, err)
	}
	for i := 1; i < 20; i++ {
		consumer(t, g, fmt.Sprint("c", i))
	}
	if _, err := g.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("c20")}); !errors.As(err, &lee) {
		t.Fatalf("21st consumer: got %v, want LimitExceededException", err)
	}
}

func TestSubscribeEvents(t *testing.T) {
	f := newFake(t, 2)
	f.EventRecords = 4
	seqs := put(t, f, 0, 0, 10)
	arn := consumer(t, f, "c")
	es := mustSubscribe(t, f, arn, 0, trimHorizon)
	evs, _ := events(t, es, recordCount(10))
	checkRecords(t, flatten(evs), want(0, 10))
	if len(evs) != 3 {
		t.Fatalf("%d events for 10 records at 4 per event, want 3", len(evs))
	}
	for i, e := range evs {
		last := min(4*i+3, 9)
		if *e.ContinuationSequenceNumber != seqs[last] {
			t.Fatalf("event %d: continuation %s, want %s", i, *e.ContinuationSequenceNumber, seqs[last])
		}
		if behind := *e.MillisBehindLatest; (i < 2) != (behind > 0) {
			t.Fatalf("event %d: MillisBehindLatest %d", i, behind)
		}
		if len(e.ChildShards) != 0 {
			t.Fatalf("event %d: child shards of an open shard", i)
		}
		for _, r := range e.Records {
			if r.ApproximateArrivalTimestamp == nil || *r.PartitionKey != "k" {
				t.Fatalf("event %d: record %+v", i, r)
			}
		}
	}
	// Caught up: idle events without records; then new records are pushed.
	evs, _ = events(t, es, func(evs []types.SubscribeToShardEvent) bool { return len(evs) >= 2 })
	for _, e := range evs {
		if len(e.Records) != 0 || *e.MillisBehindLatest != 0 || *e.ContinuationSequenceNumber != seqs[9] {
			t.Fatalf("idle event %+v", e)
		}
	}
	put(t, f, 0, 10, 3)
	evs, _ = events(t, es, recordCount(3))
	checkRecords(t, flatten(evs), want(10, 3))
	es.Close()

	// Every start: AFTER a continuation, AT a sequence number, LATEST,
	// AT_TIMESTAMP; an empty shard's continuation resumes at its start.
	for _, tc := range []struct {
		name string
		pos  types.StartingPosition
		want []string
	}{
		{"after", after(seqs[4]), want(5, 8)},
		{"at", types.StartingPosition{Type: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: aws.String(seqs[4])}, want(4, 9)},
		{"latest", types.StartingPosition{Type: types.ShardIteratorTypeLatest}, nil},
		{"timestamp", types.StartingPosition{Type: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(time.Now().Add(-time.Hour))}, want(0, 13)},
	} {
		es := mustSubscribe(t, f, arn, 0, tc.pos)
		evs, _ := events(t, es, func(evs []types.SubscribeToShardEvent) bool {
			return len(evs) > 0 && len(flatten(evs)) >= len(tc.want)
		})
		checkRecords(t, flatten(evs), tc.want)
		es.Close()
	}
	es = mustSubscribe(t, f, arn, 1, trimHorizon)
	evs, _ = events(t, es, func(evs []types.SubscribeToShardEvent) bool { return len(evs) > 0 })
	cont := *evs[0].ContinuationSequenceNumber
	es.Close()
	put(t, f, 1, 0, 2)
	es = mustSubscribe(t, f, arn, 1, after(cont))
	evs, _ = events(t, es, recordCount(2))
	checkRecords(t, flatten(evs), want(0, 2))

	var inv *types.InvalidArgumentException
	if _, err := subscribe(ctx, f, arn, 0, after("1")); !errors.As(err, &inv) {
		t.Fatalf("sequence number outside the shard: got %v, want InvalidArgumentException", err)
	}
	var rnf *types.ResourceNotFoundException
	if _, err := subscribe(ctx, f, arn+"x", 0, trimHorizon); !errors.As(err, &rnf) {
		t.Fatalf("unknown consumer: got %v, want ResourceNotFoundException", err)
	}
}

func TestSubscribeClosedShards(t *testing.T) {
	f := newFake(t, 2)
	put(t, f, 0, 0, 5)
	arn := consumer(t, f, "c")
	es := mustSubscribe(t, f, arn, 0, trimHorizon)
	events(t, es, recordCount(5))
	// Split shard 0 while subscribed: the rest of its records, then the
	// child shards and the end of the stream.
	lo, hi := hashRange(t, f, 0)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := f.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String(shardID(0)), NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	evs, ended := events(t, es, never)
	if !ended || es.Err() != nil {
		t.Fatalf("stream of a closed shard: ended %v, err %v; want a clean end", ended, es.Err())
	}
	last := evs[len(evs)-1]
	if last.ContinuationSequenceNumber != nil || len(last.ChildShards) != 2 {
		t.Fatalf("last event: continuation %v, children %+v", last.ContinuationSequenceNumber, last.ChildShards)
	}
	for i, c := range last.ChildShards {
		if *c.ShardId != shardID(2+i) || len(c.ParentShards) != 1 || c.ParentShards[0] != shardID(0) {
			t.Fatalf("child %d: %s of %v", i, *c.ShardId, c.ParentShards)
		}
	}
	// Merge shards 3 and 1: a subscription after the end gets the end at once.
	if _, err := f.MergeShards(ctx, &sdk.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: aws.String(shardID(3)), AdjacentShardToMerge: aws.String(shardID(1))}); err != nil {
		t.Fatal(err)
	}
	es = mustSubscribe(t, f, arn, 1, types.StartingPosition{Type: types.ShardIteratorTypeLatest})
	evs, ended = events(t, es, never)
	if !ended || len(evs) != 1 || len(evs[0].ChildShards) != 1 || strings.Join(evs[0].ChildShards[0].ParentShards, ",") != shardID(3)+","+shardID(1) {
		t.Fatalf("merged parent: ended %v, events %+v", ended, evs)
	}
}

func hashRange(t *testing.T, f *kinesistest.Fake, i int) (*big.Int, *big.Int) {
	t.Helper()
	out, err := f.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Shards {
		if *s.ShardId == shardID(i) {
			lo, _ := new(big.Int).SetString(*s.HashKeyRange.StartingHashKey, 10)
			hi, _ := new(big.Int).SetString(*s.HashKeyRange.EndingHashKey, 10)
			return lo, hi
		}
	}
	t.Fatalf("no shard %d", i)
	return nil, nil
}

func TestSubscribeInUseAndTakeover(t *testing.T) {
	f := newFake(t, 1)
	f.InUseWindow = 200 * time.Millisecond
	put(t, f, 0, 0, 3)
	arn := consumer(t, f, "c")
	subscribed := time.Now() // no later than the fake's start of the subscription
	first := mustSubscribe(t, f, arn, 0, trimHorizon)
	events(t, first, recordCount(3))
	// Within the window: refused; after it: taken over.
	var riu *types.ResourceInUseException
	refused := 0
	var second *sdk.SubscribeToShardEventStream
	for second == nil {
		es, err := subscribe(ctx, f, arn, 0, trimHorizon)
		switch {
		case err == nil:
			second = es
			t.Cleanup(func() { es.Close() })
		case errors.As(err, &riu):
			refused++
			time.Sleep(5 * time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	if took := time.Since(subscribed); refused == 0 || took < f.InUseWindow {
		t.Fatalf("second subscription after %v with %d refusals, want refusals for %v", took, refused, f.InUseWindow)
	}
	if _, ended := events(t, first, never); !ended || !errors.As(first.Err(), &riu) {
		t.Fatalf("taken-over stream: ended %v, err %v; want ResourceInUseException", ended, first.Err())
	}
	evs, _ := events(t, second, recordCount(3))
	checkRecords(t, flatten(evs), want(0, 3))

	// A subscription the service ended is not held: no window.
	if n := f.EndSubscriptions(nil); n != 1 {
		t.Fatalf("EndSubscriptions: %d, want 1", n)
	}
	if _, ended := events(t, second, never); !ended || second.Err() != nil {
		t.Fatalf("ended stream: ended %v, err %v; want a clean end", ended, second.Err())
	}
	third := mustSubscribe(t, f, arn, 0, trimHorizon)
	// A broken connection leaves it held.
	if n := f.DropSubscriptions(); n != 1 {
		t.Fatalf("DropSubscriptions: %d, want 1", n)
	}
	if _, ended := events(t, third, never); !ended || third.Err() == nil || errors.As(third.Err(), &riu) {
		t.Fatalf("dropped stream: ended %v, err %v; want a read error", ended, third.Err())
	}
	if _, err := subscribe(ctx, f, arn, 0, trimHorizon); !errors.As(err, &riu) {
		t.Fatalf("subscribe after a dropped connection: got %v, want ResourceInUseException", err)
	}
}

func TestSubscribeLimitsAndErrors(t *testing.T) {
	f := newFake(t, 1)
	f.SubscribeInterval = time.Hour
	arn := consumer(t, f, "c")
	es := mustSubscribe(t, f, arn, 0, trimHorizon)
	f.EndSubscriptions(&types.InternalFailureException{Message: aws.String("boom")})
	var ife *types.InternalFailureException
	if _, ended := events(t, es, never); !ended || !errors.As(es.Err(), &ife) {
		t.Fatalf("stream: ended %v, err %v; want InternalFailureException", ended, es.Err())
	}
	var lee *types.LimitExceededException
	if _, err := subscribe(ctx, f, arn, 0, trimHorizon); !errors.As(err, &lee) {
		t.Fatalf("second call within the interval: got %v, want LimitExceededException", err)
	}
	// Another consumer is not limited by the first one's calls.
	mustSubscribe(t, f, consumer(t, f, "d"), 0, trimHorizon)
}

func TestSubscriptionLifetime(t *testing.T) {
	f := newFake(t, 1)
	f.SubscriptionLifetime = 30 * time.Millisecond
	f.InUseWindow = time.Hour
	f.EventRecords = 2
	arn := consumer(t, f, "c")
	put(t, f, 0, 0, 20)
	var got []string
	cont := ""
	for subs := 0; len(got) < 40; subs++ {
		if subs > 200 {
			t.Fatalf("%d subscriptions for %d records", subs, len(got))
		}
		if subs == 3 {
			put(t, f, 0, 20, 20)
		}
		pos := trimHorizon
		if cont != "" {
			pos = after(cont)
		}
		// An expired subscription is not held: no ResourceInUse window.
		es := mustSubscribe(t, f, arn, 0, pos)
		// Read slowly, so that the lifetime ends it while records remain.
		evs, ended := events(t, es, func(evs []types.SubscribeToShardEvent) bool {
			time.Sleep(5 * time.Millisecond)
			return false
		})
		if !ended || es.Err() != nil {
			t.Fatalf("expired stream: ended %v, err %v; want a clean end", ended, es.Err())
		}
		got = append(got, flatten(evs)...)
		if len(evs) > 0 {
			cont = *evs[len(evs)-1].ContinuationSequenceNumber
		}
	}
	checkRecords(t, got, want(0, 40))
}

func TestSubscribeRate(t *testing.T) {
	f := newFake(t, 1)
	f.SubscribeBytesPerSec = 100_000
	f.EventRecords = 5
	arn := consumer(t, f, "c")
	var entries []types.PutRecordsRequestEntry
	for range 50 {
		entries = append(entries, types.PutRecordsRequestEntry{Data: make([]byte, 1000), PartitionKey: aws.String("k")})
	}
	if _, err := f.PutRecords(ctx, &sdk.PutRecordsInput{StreamName: aws.String(stream), Records: entries}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	es := mustSubscribe(t, f, arn, 0, trimHorizon)
	events(t, es, recordCount(50))
	// 50 kB at 100 kB/s, the first event at once: ≥ 450 ms.
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Fatalf("50 kB pushed in %v at 100 kB/s, want ≥ 450ms", d)
	}
	// The pusher counts an event once the reader has taken it.
	waitFor(t, func() bool { return f.PushedBytes(arn, shardID(0)) == 50_000 }, "PushedBytes 50000")
}

// TestConcurrentSubscribers reads two shards with four consumers while
// records are put; every consumer gets every record of a shard in order.
// Run with -race.
func TestConcurrentSubscribers(t *testing.T) {
	f := newFake(t, 2)
	f.EventRecords = 7
	const batches, per = 20, 10
	var arns []string
	for c := range 4 {
		arns = append(arns, consumer(t, f, fmt.Sprint("c", c)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, arn := range arns {
		for sh := range 2 {
			wg.Go(func() {
				es, err := subscribe(ctx, f, arn, sh, trimHorizon)
				if err != nil {
					errs <- err
					return
				}
				defer es.Close()
				n := 0
				timeout := time.After(10 * time.Second)
				for n < batches*per {
					select {
					case ev, ok := <-es.Events():
						if !ok {
							errs <- fmt.Errorf("stream ended: %v", es.Err())
							return
						}
						for _, r := range ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent).Value.Records {
							if string(r.Data) != fmt.Sprint("r", n) {
								errs <- fmt.Errorf("%s shard %d: got %s, want r%d", arn, sh, r.Data, n)
								return
							}
							n++
						}
					case <-timeout:
						errs <- fmt.Errorf("%s shard %d: %d records within 10s", arn, sh, n)
						return
					}
				}
			})
		}
	}
	for b := range batches {
		for sh := range 2 {
			put(t, f, sh, b*per, per)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, func() bool { return f.OpenSubscriptions() == 0 }, "every pusher stopped")
}

func TestSubscriptionEndsWithContext(t *testing.T) {
	f := newFake(t, 1)
	arn := consumer(t, f, "c")
	cctx, cancel := context.WithCancel(ctx)
	es, err := subscribe(cctx, f, arn, 0, trimHorizon)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	events(t, es, func(evs []types.SubscribeToShardEvent) bool { return len(evs) > 0 })
	cancel()
	if _, ended := events(t, es, never); !ended || !errors.Is(es.Err(), context.Canceled) {
		t.Fatalf("after cancel: ended %v, err %v; want context.Canceled", ended, es.Err())
	}
	waitFor(t, func() bool { return f.OpenSubscriptions() == 0 }, "pusher stopped")
}
