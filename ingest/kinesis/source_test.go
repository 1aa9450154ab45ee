package kinesis_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/ingest/kpl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const stream = "clicks"

// newStream returns a fake holding the stream, with shards shards. Its
// enhanced fan-out windows are short: 20 ms of ResourceInUse after a
// subscription the service still holds, 1 ms between subscriptions, an
// idle event every 10 ms.
func newStream(t *testing.T, shards int) *kinesistest.Fake {
	t.Helper()
	f := kinesistest.NewFake()
	f.InUseWindow = 20 * time.Millisecond
	f.SubscribeInterval = time.Millisecond
	f.IdleEvent = 10 * time.Millisecond
	if err := kinesis.EnsureStream(context.Background(), f, stream, shards); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	return f
}

// fast are options that make the readers fast against the in-memory fake.
func fast(o kinesis.Options) kinesis.Options {
	o.Stream = stream
	if o.MinCallInterval == 0 {
		o.MinCallInterval = time.Millisecond
	}
	if o.PollInterval == 0 {
		o.PollInterval = 5 * time.Millisecond
	}
	if o.Rediscover == 0 {
		o.Rediscover = 50 * time.Millisecond
	}
	if o.SubscribeInterval == 0 {
		o.SubscribeInterval = 2 * time.Millisecond
	}
	o.BackoffBase, o.BackoffMax = time.Millisecond, 10*time.Millisecond
	return o
}

// modes are the ways of reading; tests that hold for both run in each.
var modes = []string{kinesis.ReadPoll, kinesis.ReadEFO}

// testConsumer is the consumer inMode reads through with ReadEFO.
const testConsumer = "test"

// inMode sets o to read by mode (through testConsumer with ReadEFO).
func inMode(o kinesis.Options, mode string) kinesis.Options {
	o.Read = mode
	if mode == kinesis.ReadEFO && o.Consumer == "" {
		o.Consumer = testConsumer
	}
	return o
}

// forModes runs test once per way of reading, as subtests.
func forModes(t *testing.T, test func(t *testing.T, mode string)) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { test(t, mode) })
	}
}

func open(t *testing.T, api kinesis.API, o kinesis.Options) *kinesis.Source {
	t.Helper()
	src, err := kinesis.Open(context.Background(), api, fast(o))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(src.Close)
	return src
}

// payload builds a unique user record payload for key k, number i.
func payload(k string, i int) []byte { return fmt.Appendf(nil, `{"key":%q,"n":%d}`, k, i) }

// putPlain puts n plain records for each of keys, interleaved, numbered
// from start.
func putPlain(t *testing.T, api kinesis.API, keys []string, start, n int) []kinesis.PutRecord {
	t.Helper()
	var recs []kinesis.PutRecord
	for i := start; i < start+n; i++ {
		for _, k := range keys {
			recs = append(recs, kinesis.PutRecord{Data: payload(k, i), PartitionKey: k})
		}
	}
	if err := kinesis.Put(context.Background(), api, stream, recs); err != nil {
		t.Fatalf("Put: %v", err)
	}
	return recs
}

// putAggregated puts the records for keys as KPL aggregates of at most
// maxBytes each.
func putAggregated(t *testing.T, api kinesis.API, keys []string, start, n, maxBytes int) []kinesis.PutRecord {
	t.Helper()
	var recs []kinesis.PutRecord
	for i := start; i < start+n; i++ {
		for _, k := range keys {
			recs = append(recs, kinesis.PutRecord{Data: payload(k, i), PartitionKey: k})
		}
	}
	agg, err := kinesis.Aggregate(recs, maxBytes)
	if err != nil {
		t.Fatalf("Aggregate: %v", err)
	}
	if len(agg) >= len(recs) {
		t.Fatalf("Aggregate: %d aggregated records for %d user records, want fewer", len(agg), len(recs))
	}
	if err := kinesis.Put(context.Background(), api, stream, agg); err != nil {
		t.Fatalf("Put: %v", err)
	}
	return recs
}

// reader collects what Next returns and checks the invariants that must
// hold at every step.
type reader struct {
	t       *testing.T
	src     *kinesis.Source
	recs    []kinesis.Record
	events  []kinesis.Record
	order   []kinesis.Record // records and events, as returned
	added   map[string]bool
	closed  map[string]bool
	lastPos map[string]kinesis.Record
	// readers holds each shard's reader states, as reported, in order.
	readers map[string][]ingest.ReaderState
}

func newReader(t *testing.T, src *kinesis.Source) *reader {
	return &reader{t: t, src: src, added: map[string]bool{}, closed: map[string]bool{}, lastPos: map[string]kinesis.Record{},
		readers: map[string][]ingest.ReaderState{}}
}

// cmpPos compares two (seq, sub) positions; sequence numbers of one shard
// have equal length in the fake and in kinesalite, and compare as decimals.
func cmpPos(a, b kinesis.Record) int {
	if c := cmpDecimal(a.Seq, b.Seq); c != 0 {
		return c
	}
	return a.Sub - b.Sub
}

func cmpDecimal(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// read takes records until n user records have been read in total or the
// timeout passes.
func (r *reader) read(n int, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for len(r.recs) < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("read: got %d records within %v, want %d", len(r.recs), timeout, n)
		}
		rec, ok, err := r.src.Next(context.Background(), 20*time.Millisecond)
		if err != nil {
			r.t.Fatalf("Next: %v", err)
		}
		if ok {
			r.take(rec)
		}
	}
}

// readUntil takes records and events until cond holds.
func (r *reader) readUntil(cond func() bool, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("readUntil: condition not met within %v (%d records, %d events)", timeout, len(r.recs), len(r.events))
		}
		rec, ok, err := r.src.Next(context.Background(), 20*time.Millisecond)
		if err != nil {
			r.t.Fatalf("Next: %v", err)
		}
		if ok {
			r.take(rec)
		}
	}
}

func (r *reader) take(rec kinesis.Record) {
	t := r.t
	t.Helper()
	r.order = append(r.order, rec)
	switch rec.Event {
	case kinesis.EventShardAdded:
		if r.added[rec.Shard] {
			t.Fatalf("shard %s added twice", rec.Shard)
		}
		r.added[rec.Shard] = true
		r.events = append(r.events, rec)
		return
	case kinesis.EventShardClosed:
		if !r.added[rec.Shard] || r.closed[rec.Shard] {
			t.Fatalf("shard %s closed (added %v, closed before %v)", rec.Shard, r.added[rec.Shard], r.closed[rec.Shard])
		}
		r.closed[rec.Shard] = true
		r.events = append(r.events, rec)
		if got := r.src.Positions()[rec.Shard]; got != kinesis.PositionClosed {
			t.Fatalf("position of closed shard %s: got %q, want %q", rec.Shard, got, kinesis.PositionClosed)
		}
		return
	case kinesis.EventShardReader:
		if !r.added[rec.Shard] || r.closed[rec.Shard] {
			t.Fatalf("reader state of shard %s outside its added/closed events", rec.Shard)
		}
		r.readers[rec.Shard] = append(r.readers[rec.Shard], rec.Reader)
		return
	case "":
	default:
		t.Fatalf("unknown event %q", rec.Event)
	}
	if !r.added[rec.Shard] || r.closed[rec.Shard] {
		t.Fatalf("record of shard %s outside its added/closed events", rec.Shard)
	}
	if prev, ok := r.lastPos[rec.Shard]; ok && cmpPos(prev, rec) >= 0 {
		t.Fatalf("shard %s out of order: %s/%d after %s/%d", rec.Shard, rec.Seq, rec.Sub, prev.Seq, prev.Sub)
	}
	r.lastPos[rec.Shard] = rec
	if got, want := r.src.Positions()[rec.Shard], kinesis.FormatPosition(rec.Seq, rec.Sub); got != want {
		t.Fatalf("position of %s after Next: got %q, want %q", rec.Shard, got, want)
	}
	r.recs = append(r.recs, rec)
}

// payloads returns the payloads read, sorted.
func payloads(recs []kinesis.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Data))
	}
	slices.Sort(out)
	return out
}

func wantPayloads(recs ...[]kinesis.PutRecord) []string {
	var out []string
	for _, rs := range recs {
		for _, r := range rs {
			out = append(out, string(r.Data))
		}
	}
	slices.Sort(out)
	return out
}

func checkExactlyOnce(t *testing.T, got []kinesis.Record, want []string) {
	t.Helper()
	g := payloads(got)
	if slices.Equal(g, want) {
		return
	}
	seen := map[string]int{}
	for _, p := range g {
		seen[p]++
	}
	for _, p := range g {
		if seen[p] > 1 {
			t.Fatalf("payload %s read %d times", p, seen[p])
		}
	}
	for _, p := range want {
		if seen[p] == 0 {
			t.Fatalf("payload %s never read (%d read, %d put)", p, len(g), len(want))
		}
	}
	t.Fatalf("read %d payloads, put %d", len(g), len(want))
}

// checkKeyOrder checks that each partition key's records were read in the
// order they were put (their "n" field increases).
func checkKeyOrder(t *testing.T, got []kinesis.Record) {
	t.Helper()
	last := map[string]int{}
	for _, r := range got {
		var k string
		var n int
		if _, err := fmt.Sscanf(string(r.Data), `{"key":%q,"n":%d}`, &k, &n); err != nil {
			t.Fatalf("payload %q: %v", r.Data, err)
		}
		if p, ok := last[k]; ok && n <= p {
			t.Fatalf("key %s: record %d read after %d", k, n, p)
		}
		last[k] = n
	}
}

func TestReadPlainAndAggregated(t *testing.T) { forModes(t, testReadPlainAndAggregated) }

func testReadPlainAndAggregated(t *testing.T, mode string) {
	f := newStream(t, 3)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	plain := putPlain(t, f, keys, 0, 50)
	agg := putAggregated(t, f, keys, 50, 50, 300)
	reg := prometheus.NewRegistry()
	src := open(t, f, inMode(kinesis.Options{Registerer: reg}, mode))
	r := newReader(t, src)
	r.read(len(plain)+len(agg), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(plain, agg))
	checkKeyOrder(t, r.recs)

	// Shard, sequence number and arrival time agree with the stream.
	stored := map[string]kinesistest.Record{}
	for _, s := range f.Records(stream) {
		stored[s.Seq] = s
	}
	subs := map[string]int{}
	for _, rec := range r.recs {
		s, ok := stored[rec.Seq]
		if !ok {
			t.Fatalf("record %s/%d: no such sequence number in the stream", rec.Seq, rec.Sub)
		}
		if rec.Shard != s.Shard || rec.ArrivalMs != s.ArrivalMs {
			t.Fatalf("record %s: got shard %s arrival %d, want %s %d", rec.Seq, rec.Shard, rec.ArrivalMs, s.Shard, s.ArrivalMs)
		}
		if rec.Sub != subs[rec.Seq] {
			t.Fatalf("record %s: sub-sequence %d, want %d", rec.Seq, rec.Sub, subs[rec.Seq])
		}
		subs[rec.Seq]++
		if rec.PartitionKey == "" || !strings.Contains(string(rec.Data), fmt.Sprintf("%q", rec.PartitionKey)) {
			t.Fatalf("record %s: partition key %q does not match payload %s", rec.Seq, rec.PartitionKey, rec.Data)
		}
	}
	if len(r.added) != 3 {
		t.Fatalf("shard_added events: got %d, want 3", len(r.added))
	}
	waitFor(t, src.CaughtUp, "CaughtUp")
	lag := src.Lag()
	if len(lag) != 3 {
		t.Fatalf("Lag: got %v, want 3 shards at 0", lag)
	}
	for id, l := range lag {
		if l != 0 {
			t.Fatalf("Lag[%s]: got %d, want 0", id, l)
		}
	}
	if got := metricValue(t, reg, "adclick_kinesis_records_total"); got != float64(len(r.recs)) {
		t.Fatalf("records metric: got %v, want %d", got, len(r.recs))
	}
	// More records after catching up are read too.
	more := putPlain(t, f, keys, 100, 5)
	r.read(len(plain)+len(agg)+len(more), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(plain, agg, more))
	// Each mode uses its own calls only.
	polls, subscribes := f.Calls("GetRecords"), f.Calls("SubscribeToShard")
	if mode == kinesis.ReadEFO && (polls != 0 || subscribes < 3) || mode == kinesis.ReadPoll && subscribes != 0 {
		t.Fatalf("%s: %d GetRecords and %d SubscribeToShard calls", mode, polls, subscribes)
	}
}

// metricValue returns the value of an unlabelled counter or gauge.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBadAggregate(t *testing.T) { forModes(t, testBadAggregate) }

func testBadAggregate(t *testing.T, mode string) {
	f := newStream(t, 1)
	a := kpl.NewAggregator(0)
	a.Add("k", "", []byte("one"))
	a.Add("k", "", []byte("two"))
	good := a.Flush().Data
	bad := slices.Clone(good)
	bad[len(bad)-1] ^= 0xff
	err := kinesis.Put(context.Background(), f, stream, []kinesis.PutRecord{
		{Data: good, PartitionKey: "k"}, {Data: bad, PartitionKey: "k"}, {Data: []byte("three"), PartitionKey: "k"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, open(t, f, inMode(kinesis.Options{}, mode)))
	r.read(4, 5*time.Second)
	type row struct {
		Data string
		Sub  int
		Bad  string
	}
	var got []row
	for _, rec := range r.recs {
		got = append(got, row{string(rec.Data), rec.Sub, rec.Bad})
	}
	want := []row{{"one", 0, ""}, {"two", 1, ""}, {string(bad), 0, kpl.ReasonBadChecksum}, {"three", 0, ""}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestThrottledRetriedWithBackoff(t *testing.T) {
	f := newStream(t, 1)
	want := wantPayloads(putPlain(t, f, []string{"a"}, 0, 30))
	ft := kinesistest.NewFaulty(f)
	ft.Fail("GetRecords", 5, kinesistest.Throttled())
	ft.Fail("GetShardIterator", 2, kinesistest.Throttled())
	reg := prometheus.NewRegistry()
	o := kinesis.Options{Registerer: reg}
	o = fast(o)
	o.BackoffBase, o.BackoffMax = 20*time.Millisecond, 20*time.Millisecond
	src, err := kinesis.Open(context.Background(), ft, o)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	start := time.Now()
	r := newReader(t, src)
	r.read(len(want), 10*time.Second)
	checkExactlyOnce(t, r.recs, want)
	// 7 backoffs of at least 10 ms each (jitter keeps half).
	if d := time.Since(start); d < 70*time.Millisecond {
		t.Fatalf("read in %v despite 7 throttles, want ≥ 70ms of backoff", d)
	}
	if got := ft.Injected("GetRecords") + ft.Injected("GetShardIterator"); got != 7 {
		t.Fatalf("injected: got %d, want 7", got)
	}
	if got := metricValue(t, reg, "adclick_kinesis_throttles_total"); got != 7 {
		t.Fatalf("throttles metric: got %v, want 7", got)
	}
}

func TestExpiredIteratorResumes(t *testing.T) {
	f := newStream(t, 2)
	keys := []string{"a", "b", "c", "d"}
	first := putAggregated(t, f, keys, 0, 30, 150)
	ft := kinesistest.NewFaulty(f)
	// Expired before anything was fetched: re-acquired from the start.
	ft.Fail("GetRecords", 1, kinesistest.Expired())
	reg := prometheus.NewRegistry()
	src := open(t, ft, kinesis.Options{Registerer: reg, Limit: 5, BufferRecords: 10})
	r := newReader(t, src)
	r.read(len(first)/2, 10*time.Second)
	// Expired in the middle: every iterator issued so far stops working.
	f.ExpireIterators()
	second := putPlain(t, f, keys, 30, 10)
	r.read(len(first)+len(second), 10*time.Second)
	f.ExpireIterators()
	third := putPlain(t, f, keys, 40, 10)
	r.read(len(first)+len(second)+len(third), 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(first, second, third))
	checkKeyOrder(t, r.recs)
	if got := metricValue(t, reg, "adclick_kinesis_expired_iterators_total"); got < 3 {
		t.Fatalf("expired metric: got %v, want ≥ 3", got)
	}
}

func TestServerErrors(t *testing.T) {
	f := newStream(t, 1)
	want := wantPayloads(putPlain(t, f, []string{"a"}, 0, 10))
	ft := kinesistest.NewFaulty(f)
	ft.Fail("GetRecords", 3, kinesistest.ServerError())
	ft.Fail("ListShards", 1, kinesistest.ServerError())
	r := newReader(t, open(t, ft, kinesis.Options{MaxErrors: 5}))
	r.read(len(want), 10*time.Second)
	checkExactlyOnce(t, r.recs, want)

	// Too many consecutive failures: Next reports the error.
	ft.Fail("GetRecords", 100, kinesistest.ServerError())
	src := open(t, ft, kinesis.Options{MaxErrors: 2})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err := src.Next(context.Background(), 10*time.Millisecond)
		if err != nil {
			if !strings.Contains(err.Error(), "3 failures") {
				t.Fatalf("Next: got %v, want an error after 3 failures", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Next: no error after 100 server errors with MaxErrors 2")
		}
	}
}

func TestOpenMissingStream(t *testing.T) {
	f := kinesistest.NewFake()
	_, err := kinesis.Open(context.Background(), f, fast(kinesis.Options{}))
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("Open: got %v, want ResourceNotFoundException", err)
	}
}

func TestBackpressure(t *testing.T) {
	f := newStream(t, 1)
	want := wantPayloads(putPlain(t, f, []string{"a"}, 0, 200))
	src := open(t, f, kinesis.Options{BufferRecords: 10, Limit: 10})
	time.Sleep(100 * time.Millisecond) // a free reader would make 20+ calls
	if got := f.Calls("GetRecords"); got != 1 {
		t.Fatalf("GetRecords calls with a full buffer: got %d, want 1", got)
	}
	r := newReader(t, src)
	r.read(len(want), 10*time.Second)
	checkExactlyOnce(t, r.recs, want)
	if got := f.Calls("GetRecords"); got < 20 {
		t.Fatalf("GetRecords calls: got %d, want ≥ 20 for 200 records at 10 per call", got)
	}
}

func TestPacing(t *testing.T) {
	f := newStream(t, 1)
	putPlain(t, f, []string{"a"}, 0, 100)
	o := fast(kinesis.Options{Limit: 10})
	o.MinCallInterval = 50 * time.Millisecond
	src, err := kinesis.Open(context.Background(), f, o)
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, src)
	start := time.Now()
	r.read(100, 10*time.Second)
	src.Close()
	// 10 calls at least 50 ms apart: ≥ 450 ms.
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Fatalf("100 records at 10 per call in %v, want ≥ 450ms with 50ms between calls", d)
	}
}

func TestFairAcrossShards(t *testing.T) {
	f := newStream(t, 2)
	hk, err := kinesis.ShardHashKeys(context.Background(), f, stream)
	if err != nil {
		t.Fatal(err)
	}
	var recs []kinesis.PutRecord
	for i := 0; i < 100; i++ {
		for s := range 2 {
			recs = append(recs, kinesis.PutRecord{Data: payload(fmt.Sprint("s", s), i), PartitionKey: "x", ExplicitHashKey: hk[s]})
		}
	}
	if err := kinesis.Put(context.Background(), f, stream, recs); err != nil {
		t.Fatal(err)
	}
	src := open(t, f, kinesis.Options{})
	waitFor(t, func() bool { return len(src.Lag()) == 2 }, "both shards polled")
	time.Sleep(20 * time.Millisecond)
	r := newReader(t, src)
	r.read(20, 5*time.Second)
	per := map[string]int{}
	for _, rec := range r.recs {
		per[rec.Shard]++
	}
	if len(per) != 2 || per[r.recs[0].Shard] > 11 {
		t.Fatalf("first 20 records per shard: got %v, want about 10 each", per)
	}
}

// TestResharding splits a shard and merges two while reading: no record is
// lost or read twice, every child is read only after its parents are
// closed, and each partition key's records stay in order.
func TestResharding(t *testing.T) { forModes(t, testResharding) }

func testResharding(t *testing.T, mode string) {
	f := newStream(t, 2)
	ctx := context.Background()
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	var put [][]kinesis.PutRecord
	put = append(put, putPlain(t, f, keys, 0, 20), putAggregated(t, f, keys, 20, 10, 200))
	f.EventRecords = 7
	src := open(t, f, inMode(kinesis.Options{Limit: 7, BufferRecords: 20}, mode))
	r := newReader(t, src)
	r.read(100, 10*time.Second)

	shards, _ := f.ListShards(ctx, &sdk.ListShardsInput{StreamName: aws.String(stream)})
	s0 := shards.Shards[0]
	mid := midpoint(t, s0)
	if _, err := f.SplitShard(ctx, &sdk.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: s0.ShardId, NewStartingHashKey: aws.String(mid)}); err != nil {
		t.Fatal(err)
	}
	put = append(put, putPlain(t, f, keys, 30, 10))
	r.read(300, 10*time.Second)
	// Merge the second child of the split with the old second shard.
	if _, err := f.MergeShards(ctx, &sdk.MergeShardsInput{StreamName: aws.String(stream),
		ShardToMerge: aws.String("shardId-000000000003"), AdjacentShardToMerge: aws.String("shardId-000000000001")}); err != nil {
		t.Fatal(err)
	}
	put = append(put, putAggregated(t, f, keys, 40, 10, 300), putPlain(t, f, keys, 50, 10))
	total := len(wantPayloads(put...))
	r.read(total, 10*time.Second)
	checkExactlyOnce(t, r.recs, wantPayloads(put...))
	checkKeyOrder(t, r.recs)

	// Lifecycle: children after their parents' closed events.
	r.readUntil(func() bool { return len(r.closed) == 3 }, 10*time.Second)
	checkLineage(t, r)
	pos := src.Positions()
	for _, p := range []string{"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"} {
		if pos[p] != kinesis.PositionClosed {
			t.Fatalf("Positions[%s]: got %q, want closed", p, pos[p])
		}
	}
	waitFor(t, src.CaughtUp, "CaughtUp")

	// A restart from these positions reads only what is put afterwards.
	src.Close()
	after := putPlain(t, f, keys, 60, 3)
	src2 := open(t, f, inMode(kinesis.Options{Positions: pos}, mode))
	r2 := newReader(t, src2)
	r2.read(len(after), 10*time.Second)
	time.Sleep(50 * time.Millisecond)
	for {
		rec, ok, err := src2.Next(ctx, 0)
		if err != nil || !ok {
			break
		}
		r2.take(rec)
	}
	checkExactlyOnce(t, r2.recs, wantPayloads(after))
	if len(r2.added) != 2 {
		t.Fatalf("shards added after restart: got %v, want the 2 open ones", r2.added)
	}
}

// checkLineage checks that the children of the split of shard 0 and of the
// merge of shards 3 and 1 were added after their parents were closed.
func checkLineage(t *testing.T, r *reader) {
	t.Helper()
	idx := map[string]int{}
	for i, e := range r.order {
		if e.Event != "" {
			idx[e.Event+" "+e.Shard] = i
		}
	}
	parents := map[string][]string{
		"shardId-000000000002": {"shardId-000000000000"},
		"shardId-000000000003": {"shardId-000000000000"},
		"shardId-000000000004": {"shardId-000000000003", "shardId-000000000001"},
	}
	for child, ps := range parents {
		a, ok := idx[kinesis.EventShardAdded+" "+child]
		if !ok {
			t.Fatalf("child %s never added", child)
		}
		for _, p := range ps {
			c, ok := idx[kinesis.EventShardClosed+" "+p]
			if !ok || c > a {
				t.Fatalf("child %s added at %d, parent %s closed at %d (ok %v)", child, a, p, c, ok)
			}
		}
	}
}

func midpoint(t *testing.T, s types.Shard) string {
	t.Helper()
	lo, ok1 := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
	hi, ok2 := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
	if !ok1 || !ok2 {
		t.Fatalf("bad hash key range %v", s.HashKeyRange)
	}
	return new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1).String()
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    kinesis.Options
		want []string
	}{
		{"ok", kinesis.Options{Stream: "s"}, nil},
		{"no stream", kinesis.Options{}, []string{"stream name is empty"}},
		{"bad start", kinesis.Options{Stream: "s", StartAt: "NOW"}, []string{`start at "NOW"`}},
		{"timestamp missing", kinesis.Options{Stream: "s", StartAt: kinesis.StartAtTimestamp}, []string{"start timestamp"}},
		{"bad positions", kinesis.Options{Stream: "s", Positions: map[string]string{"a": "12", "b": "x/1", "c": "1/-1", "d": "closed", "e": "5/0"}},
			[]string{"shard a", "shard b", "shard c"}},
		{"limit and everything", kinesis.Options{Limit: 10001}, []string{"stream name", "limit 10001"}},
		{"efo", kinesis.Options{Stream: "s", Read: kinesis.ReadEFO, Consumer: "job-w0.a_b"}, nil},
		{"bad read", kinesis.Options{Stream: "s", Read: "push"}, []string{`read "push": want poll or efo`}},
		{"efo without consumer", kinesis.Options{Stream: "s", Read: kinesis.ReadEFO}, []string{"read efo needs a consumer name"}},
		{"bad consumer", kinesis.Options{Stream: "s", Read: kinesis.ReadEFO, Consumer: "a b"}, []string{`consumer name "a b"`}},
		{"long consumer", kinesis.Options{Stream: "s", Read: kinesis.ReadEFO, Consumer: strings.Repeat("c", 129)}, []string{"consumer name"}},
		{"consumer when polling", kinesis.Options{Stream: "s", Consumer: "c"}, []string{`consumer "c" is only used with read efo`}},
		{"negative wait", kinesis.Options{Stream: "s", Read: kinesis.ReadEFO, Consumer: "c", ConsumerWait: -1}, []string{"intervals must be positive"}},
	} {
		o := tc.o
		o.EnsureDefaults()
		err := o.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: got %v, want nil", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: got nil, want errors %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %v, want it to mention %q", tc.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "shard d") || strings.Contains(err.Error(), "shard e") {
			t.Errorf("%s: valid positions reported: %v", tc.name, err)
		}
	}
}
