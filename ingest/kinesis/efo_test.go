package kinesis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

func efo(o kinesis.Options) kinesis.Options { return inMode(o, kinesis.ReadEFO) }

// consumerARN returns the ARN of a registered consumer of the stream.
func consumerARN(t *testing.T, f *kinesistest.Fake, name string) string {
	t.Helper()
	out, err := f.DescribeStreamConsumer(context.Background(), &sdk.DescribeStreamConsumerInput{
		StreamARN: aws.String(kinesistest.StreamARN(stream)), ConsumerName: aws.String(name)})
	if err != nil {
		t.Fatalf("DescribeStreamConsumer %s: %v", name, err)
	}
	return *out.ConsumerDescription.ConsumerARN
}

// storedBytes is the size of the data of every record in the stream.
func storedBytes(f *kinesistest.Fake) int64 {
	var n int64
	for _, r := range f.Records(stream) {
		n += int64(len(r.Data))
	}
	return n
}

// pushedBytes is the record data the fake pushed to a consumer, over every
// shard.
func pushedBytes(f *kinesistest.Fake, arn string) int64 {
	var n int64
	seen := map[string]bool{}
	for _, r := range f.Records(stream) {
		if !seen[r.Shard] {
			seen[r.Shard] = true
			n += f.PushedBytes(arn, r.Shard)
		}
	}
	return n
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	return keys
}

// TestEFOTwoConsumersAcrossReshard reads the stream through two consumers
// at once while a shard is split and two are merged: each receives every
// record exactly once, each shard's in order, children after parents, and
// each was pushed every record once, by subscriptions of its own. It runs
// with the service's subscription lifetime and with one of 15 ms.
func TestEFOTwoConsumersAcrossReshard(t *testing.T) {
	for _, lifetime := range []time.Duration{5 * time.Minute, 15 * time.Millisecond} {
		t.Run(lifetime.String(), func(t *testing.T) { testTwoConsumersAcrossReshard(t, lifetime) })
	}
}

func testTwoConsumersAcrossReshard(t *testing.T, lifetime time.Duration) {
	f := newStream(t, 2)
	f.EventRecords = 9
	f.SubscriptionLifetime = lifetime
	ctx := context.Background()
	keys := keyNames(20)
	var put [][]kinesis.PutRecord
	put = append(put, putPlain(t, f, keys, 0, 20), putAggregated(t, f, keys, 20, 10, 200))
	names := []string{"job-w0", "job-w1"}
	var rs []*reader
	for _, c := range names {
		rs = append(rs, newReader(t, open(t, f, kinesis.Options{Read: kinesis.ReadEFO, Consumer: c, BufferRecords: 20})))
	}
	readAll := func(n int) {
		t.Helper()
		for _, r := range rs {
			r.read(n, 10*time.Second)
		}
	}
	readAll(100)

	shards, _ := f.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(stream)})
	s0 := shards.Shards[0]
	if _, err := f.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: s0.ShardId, NewStartingHashKey: aws.String(midpoint(t, s0))}); err != nil {
		t.Fatal(err)
	}
	put = append(put, putPlain(t, f, keys, 30, 10))
	readAll(300)
	if _, err := f.MergeShards(ctx, &sdk.MergeShardsInput{StreamName: aws.String(stream),
		ShardToMerge: aws.String("shardId-000000000003"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatal(err)
	}
	put = append(put, putAggregated(t, f, keys, 40, 10, 300), putPlain(t, f, keys, 50, 10))
	want := wantPayloads(put...)
	readAll(len(want))
	for i, r := range rs {
		checkExactlyOnce(t, r.recs, want)
		checkKeyOrder(t, r.recs)
		r.readUntil(func() bool { return len(r.closed) == 3 }, 10*time.Second)
		checkLineage(t, r)
		arn := consumerARN(t, f, names[i])
		waitFor(t, func() bool { return pushedBytes(f, arn) == storedBytes(f) }, names[i]+": every record pushed once")
	}
	if n := f.Calls("GetRecords") + f.Calls("GetShardIterator"); n != 0 {
		t.Fatalf("%d polling calls in EFO mode", n)
	}
	// 2 consumers × 5 shards take 10 subscriptions without renewals.
	if n := f.Calls("SubscribeToShard"); lifetime < time.Second && n < 20 {
		t.Fatalf("%d subscriptions with a lifetime of %v, want renewals", n, lifetime)
	}
}

// TestEFOSurvivesExpiry reads while subscriptions last 10 ms (accelerated
// expiry): many renewals, each from the last event's continuation, and no
// record lost or repeated.
func TestEFOSurvivesExpiry(t *testing.T) {
	f := newStream(t, 2)
	f.SubscriptionLifetime = 10 * time.Millisecond
	f.EventRecords = 3
	reg := prometheus.NewRegistry()
	r := newReader(t, open(t, f, efo(kinesis.Options{Registerer: reg, BufferRecords: 10})))
	keys := keyNames(6)
	var put [][]kinesis.PutRecord
	for i := 0; i < 5 || metricValue(t, reg, "adclick_kinesis_resubscriptions_total") < 20; i++ {
		if i > 1000 {
			t.Fatal("fewer than 20 resubscriptions")
		}
		put = append(put, putPlain(t, f, keys, 20*i, 10), putAggregated(t, f, keys, 20*i+10, 10, 150))
		r.read(len(wantPayloads(put...)), 10*time.Second)
	}
	checkExactlyOnce(t, r.recs, wantPayloads(put...))
	checkKeyOrder(t, r.recs)
	r.src.Close() // the counts settle
	subs, resubs := metricValue(t, reg, "adclick_kinesis_subscriptions_total"), metricValue(t, reg, "adclick_kinesis_resubscriptions_total")
	if resubs != subs-2 {
		t.Fatalf("%v subscriptions and %v resubscriptions on 2 shards, want 2 more subscriptions", subs, resubs)
	}
	if got := metricValue(t, reg, "adclick_kinesis_errors_total"); got != 0 {
		t.Fatalf("errors metric: %v, want 0: an expired subscription is not an error", got)
	}
}

// takeOver subscribes to the shard through the consumer, retrying while
// the consumer's subscription is younger than the fake's in-use window (or
// its call interval).
func takeOver(t *testing.T, f *kinesistest.Fake, arn, shard string) *sdk.SubscribeToShardEventStream {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := f.SubscribeToShard(context.Background(), &sdk.SubscribeToShardInput{ConsumerARN: aws.String(arn), ShardId: aws.String(shard),
			StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeLatest}})
		if err == nil {
			es := out.GetStream()
			t.Cleanup(func() { es.Close() })
			return es
		}
		var riu *types.ResourceInUseException
		var lee *types.LimitExceededException
		if !errors.As(err, &riu) && !errors.As(err, &lee) || time.Now().After(deadline) {
			t.Fatalf("SubscribeToShard: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEFOTakeover takes the source's subscription over with another one of
// the same consumer: the source subscribes again (refused while the other
// one is younger than 5 s, here 300 ms), takes it back, and goes on from
// where it was.
func TestEFOTakeover(t *testing.T) {
	f := newStream(t, 1)
	f.InUseWindow = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	r := newReader(t, open(t, f, efo(kinesis.Options{Registerer: reg})))
	keys := keyNames(4)
	first := putPlain(t, f, keys, 0, 20)
	r.read(len(first), 10*time.Second)

	other := takeOver(t, f, consumerARN(t, f, testConsumer), shardIDs[0])
	ended := make(chan error, 1)
	go func() {
		for range other.Events() {
		}
		ended <- other.Err()
	}()
	second := putPlain(t, f, keys, 20, 20)
	r.read(len(first)+len(second), 10*time.Second)
	var riu *types.ResourceInUseException
	select {
	case err := <-ended:
		if !errors.As(err, &riu) {
			t.Fatalf("the other subscription ended with %v, want ResourceInUseException (taken back)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the source did not take its subscription back")
	}
	third := putPlain(t, f, keys, 40, 5)
	r.read(len(first)+len(second)+len(third), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(first, second, third))
	checkKeyOrder(t, r.recs)
	// Taken over once, refused at least once.
	if got := metricValue(t, reg, "adclick_kinesis_subscriptions_in_use_total"); got < 2 {
		t.Fatalf("in-use metric: %v, want ≥ 2", got)
	}
}

// TestEFOResourceInUseRetried: subscriptions refused with
// ResourceInUseException are retried without counting as failures, both
// injected ones and those the fake refuses after a broken connection
// (the service still holds the old subscription).
func TestEFOResourceInUseRetried(t *testing.T) {
	f := newStream(t, 2)
	f.InUseWindow = 500 * time.Millisecond
	ft := kinesistest.NewFaulty(f)
	ft.Fail("SubscribeToShard", 4, kinesistest.InUse())
	reg := prometheus.NewRegistry()
	r := newReader(t, open(t, ft, efo(kinesis.Options{Registerer: reg, MaxErrors: 1})))
	keys := keyNames(6)
	first := putPlain(t, f, keys, 0, 20)
	r.read(len(first), 10*time.Second)
	if got := ft.Injected("SubscribeToShard"); got != 4 {
		t.Fatalf("injected: %d, want 4", got)
	}
	waitFor(t, func() bool { return f.OpenSubscriptions() == 2 }, "both shards subscribed")
	if n := f.DropSubscriptions(); n != 2 {
		t.Fatalf("dropped %d subscriptions, want 2", n)
	}
	second := putPlain(t, f, keys, 20, 20)
	r.read(len(first)+len(second), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(first, second))
	if got := metricValue(t, reg, "adclick_kinesis_subscriptions_in_use_total"); got < 6 {
		t.Fatalf("in-use metric: %v, want ≥ 6 (4 injected, ≥ 1 per dropped shard)", got)
	}
	// Each broken connection is one failure; the refusals are not.
	if got := metricValue(t, reg, "adclick_kinesis_errors_total"); got != 2 {
		t.Fatalf("errors metric: %v, want 2", got)
	}
}

func TestEFOConsumer(t *testing.T) {
	ctx := context.Background()
	t.Run("registered and awaited, then reused", func(t *testing.T) {
		f := newStream(t, 1)
		f.ConsumerActivation = 100 * time.Millisecond
		start := time.Now()
		src := open(t, f, efo(kinesis.Options{}))
		if d := time.Since(start); d < f.ConsumerActivation {
			t.Fatalf("Open returned after %v, before the consumer was ACTIVE", d)
		}
		if reg, desc := f.Calls("RegisterStreamConsumer"), f.Calls("DescribeStreamConsumer"); reg != 1 || desc < 3 {
			t.Fatalf("%d registrations and %d descriptions, want 1 and ≥ 3 (missing, CREATING, ACTIVE)", reg, desc)
		}
		first := putPlain(t, f, []string{"a"}, 0, 5)
		r := newReader(t, src)
		r.read(len(first), 5*time.Second)
		pos := src.Positions()
		src.Close()
		// A second source of the same consumer registers nothing.
		second := putPlain(t, f, []string{"a"}, 5, 5)
		r2 := newReader(t, open(t, f, efo(kinesis.Options{Positions: pos})))
		r2.read(len(second), 5*time.Second)
		checkExactlyOnce(t, r2.recs, wantPayloads(second))
		if got := f.Calls("RegisterStreamConsumer"); got != 1 {
			t.Fatalf("registrations: %d, want 1", got)
		}
	})
	t.Run("registered meanwhile", func(t *testing.T) {
		// Missing when described, registered by another worker before
		// this one registers it: ResourceInUseException, then found.
		f := newStream(t, 1)
		if _, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: aws.String(kinesistest.StreamARN(stream)), ConsumerName: aws.String(testConsumer)}); err != nil {
			t.Fatal(err)
		}
		ft := kinesistest.NewFaulty(f)
		ft.Fail("DescribeStreamConsumer", 1, &types.ResourceNotFoundException{Message: aws.String("consumer not found")})
		want := wantPayloads(putPlain(t, f, []string{"a"}, 0, 5))
		r := newReader(t, open(t, ft, efo(kinesis.Options{})))
		r.read(len(want), 5*time.Second)
		checkExactlyOnce(t, r.recs, want)
		if got := f.Calls("RegisterStreamConsumer"); got != 2 {
			t.Fatalf("registrations: %d, want 2 (the other worker's and the refused one)", got)
		}
	})
	t.Run("throttled registration", func(t *testing.T) {
		f := newStream(t, 1)
		ft := kinesistest.NewFaulty(f)
		ft.Fail("RegisterStreamConsumer", 2, &types.LimitExceededException{Message: aws.String("rate exceeded")})
		ft.Fail("DescribeStreamConsumer", 1, kinesistest.ServerError())
		open(t, ft, efo(kinesis.Options{}))
		if got := ft.Injected("RegisterStreamConsumer") + ft.Injected("DescribeStreamConsumer"); got != 3 {
			t.Fatalf("injected: %d, want 3", got)
		}
	})
	t.Run("not active in time", func(t *testing.T) {
		f := newStream(t, 1)
		f.ConsumerActivation = time.Hour
		_, err := kinesis.Open(ctx, f, fast(efo(kinesis.Options{ConsumerWait: 50 * time.Millisecond})))
		if err == nil || !strings.Contains(err.Error(), "consumer test of clicks is not ACTIVE after 50ms (status CREATING)") {
			t.Fatalf("Open: got %v, want a timeout waiting for the consumer", err)
		}
	})
	t.Run("stream full", func(t *testing.T) {
		// 20 consumers of others registered: the LimitExceededException
		// fails the open at once, not after ConsumerWait of retries.
		f := newStream(t, 1)
		for i := range kinesis.MaxConsumers {
			if _, err := f.RegisterStreamConsumer(ctx, &sdk.RegisterStreamConsumerInput{StreamARN: aws.String(kinesistest.StreamARN(stream)), ConsumerName: aws.String(fmt.Sprint("other", i))}); err != nil {
				t.Fatal(err)
			}
		}
		octx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := kinesis.Open(octx, f, fast(efo(kinesis.Options{ConsumerWait: time.Hour})))
		var lee *types.LimitExceededException
		if !errors.As(err, &lee) || !strings.Contains(err.Error(), "the stream has 20 registered consumers, the most it allows") {
			t.Fatalf("Open: got %v, want the LimitExceededException of a full stream, at once", err)
		}
		if got := f.Calls("RegisterStreamConsumer"); got != kinesis.MaxConsumers+1 {
			t.Fatalf("registrations: %d, want %d (one refused, not retried)", got, kinesis.MaxConsumers+1)
		}
	})
	t.Run("registration refused", func(t *testing.T) {
		f := newStream(t, 1)
		ft := kinesistest.NewFaulty(f)
		ft.Fail("RegisterStreamConsumer", 1, &types.AccessDeniedException{Message: aws.String("not allowed")})
		_, err := kinesis.Open(ctx, ft, fast(efo(kinesis.Options{})))
		var ade *types.AccessDeniedException
		if !errors.As(err, &ade) || !strings.HasPrefix(err.Error(), "kinesis: register consumer test of clicks: ") {
			t.Fatalf("Open: got %v, want the AccessDeniedException of the registration", err)
		}
	})
	t.Run("missing stream", func(t *testing.T) {
		_, err := kinesis.Open(ctx, kinesistest.NewFake(), fast(efo(kinesis.Options{})))
		var rnf *types.ResourceNotFoundException
		if !errors.As(err, &rnf) {
			t.Fatalf("Open: got %v, want ResourceNotFoundException", err)
		}
	})
}

// TestEFOBackpressure: a full queue stops the reader taking events, so the
// fake stops pushing (the event stream's flow control).
func TestEFOBackpressure(t *testing.T) {
	f := newStream(t, 1)
	f.EventRecords = 5
	want := wantPayloads(putPlain(t, f, []string{"a"}, 0, 200))
	src := open(t, f, efo(kinesis.Options{BufferRecords: 10}))
	arn := consumerARN(t, f, testConsumer)
	time.Sleep(100 * time.Millisecond) // a free reader would take every event
	if got, all := f.PushedBytes(arn, shardIDs[0]), storedBytes(f); got > all/4 {
		t.Fatalf("pushed %d of %d bytes with a full queue, want the queue and a few events only", got, all)
	}
	r := newReader(t, src)
	r.read(len(want), 10*time.Second)
	checkExactlyOnce(t, r.recs, want)
	waitFor(t, func() bool { return f.PushedBytes(arn, shardIDs[0]) == storedBytes(f) }, "everything pushed")
}

// TestEFOCloseEndsSubscriptions: Close ends every subscription.
func TestEFOCloseEndsSubscriptions(t *testing.T) {
	f := newStream(t, 4)
	want := wantPayloads(putPlain(t, f, keyNames(8), 0, 5))
	src := open(t, f, efo(kinesis.Options{}))
	r := newReader(t, src)
	r.read(len(want), 10*time.Second)
	waitFor(t, func() bool { return f.OpenSubscriptions() == 4 }, "4 subscriptions open")
	src.Close()
	// Close closed every event stream; the fake's pushers see it.
	waitFor(t, func() bool { return f.OpenSubscriptions() == 0 }, "no subscription open")
}

func TestEFOErrors(t *testing.T) {
	// Failed event streams are retried from where they were.
	f := newStream(t, 2)
	reg := prometheus.NewRegistry()
	r := newReader(t, open(t, f, efo(kinesis.Options{Registerer: reg})))
	keys := keyNames(6)
	var put [][]kinesis.PutRecord
	ended := 0
	for i := range 3 {
		put = append(put, putPlain(t, f, keys, 10*i, 10))
		r.read(len(wantPayloads(put...)), 10*time.Second)
		ended += f.EndSubscriptions(&types.InternalFailureException{Message: aws.String("internal failure")})
	}
	put = append(put, putPlain(t, f, keys, 30, 10))
	r.read(len(wantPayloads(put...)), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(put...))
	checkKeyOrder(t, r.recs)
	if ended < 3 {
		t.Fatalf("ended %d subscriptions, want ≥ 3", ended)
	}
	waitFor(t, func() bool { return metricValue(t, reg, "adclick_kinesis_errors_total") == float64(ended) }, fmt.Sprintf("errors metric %d", ended))

	// Too many consecutive failures: Next reports the error.
	ft := kinesistest.NewFaulty(newStream(t, 1))
	ft.Fail("SubscribeToShard", 100, kinesistest.ServerError())
	if err := nextErr(t, open(t, ft, efo(kinesis.Options{MaxErrors: 2}))); !strings.Contains(err.Error(), "3 failures") {
		t.Fatalf("Next: got %v, want an error after 3 failures", err)
	}
	// A fatal error at once.
	ft = kinesistest.NewFaulty(newStream(t, 1))
	ft.Fail("SubscribeToShard", 1, &types.ResourceNotFoundException{Message: aws.String("shard gone")})
	var rnf *types.ResourceNotFoundException
	if err := nextErr(t, open(t, ft, efo(kinesis.Options{}))); !errors.As(err, &rnf) || !strings.HasPrefix(err.Error(), "kinesis: subscribe to clicks/shardId-000000000000: ") {
		t.Fatalf("Next: got %v, want the ResourceNotFoundException", err)
	}
}

// nextErr calls Next until it fails.
func nextErr(t *testing.T, src *kinesis.Source) error {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, _, err := src.Next(context.Background(), 10*time.Millisecond); err != nil {
			return err
		}
	}
	t.Fatal("Next: no error within 5s")
	return nil
}
