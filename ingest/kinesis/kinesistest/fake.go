package kinesistest

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	ikinesis "github.com/adclick/adclick/ingest/kinesis"
)

var _ ikinesis.API = (*Fake)(nil)

// maxHash is 2^128 − 1, the top of the hash key space.
var maxHash = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

// Fake is an in-memory Kinesis: streams of shards holding records with
// increasing sequence numbers, shard iterators that expire, PutRecords
// routing by partition key hash or explicit hash key, resharding with
// SplitShard and MergeShards, and enhanced fan-out: registered consumers
// and SubscribeToShard event streams (see SubscribeToShard). It implements
// kinesis.API and is safe for concurrent use. Streams are ACTIVE as soon
// as they are created or resharded. Retention is unlimited: nothing is
// trimmed.
//
// The fields are set before use. The enhanced fan-out durations follow the
// real clock, not Now.
type Fake struct {
	// IteratorTTL is how long a shard iterator stays valid; default 5 min
	// (as the service).
	IteratorTTL time.Duration
	// PageSize is the number of shards per ListShards page; default 1000.
	PageSize int
	// Now is the clock for arrival timestamps, MillisBehindLatest and
	// iterator expiry; default time.Now.
	Now func() time.Time

	// ConsumerActivation is how long a registered consumer stays CREATING
	// before DescribeStreamConsumer reports it ACTIVE; default 0 (ACTIVE
	// from the first DescribeStreamConsumer on).
	ConsumerActivation time.Duration
	// SubscriptionLifetime is how long a subscription's event stream lasts
	// before it ends; default 5 min (as the service), 0 for ever. Tests
	// make it short to renew subscriptions often.
	SubscriptionLifetime time.Duration
	// InUseWindow is how long after a successful SubscribeToShard another
	// one for the same consumer and shard fails with
	// ResourceInUseException, while the service holds the subscription;
	// default 5 s (as the service), 0 never.
	InUseWindow time.Duration
	// SubscribeInterval is the least time between two successful
	// SubscribeToShard calls for a consumer and shard; a call sooner fails
	// with LimitExceededException. Default 1 s (as the service), 0 no
	// limit.
	SubscribeInterval time.Duration
	// SubscribeBytesPerSec bounds the record data pushed to a consumer on
	// a shard, over all its subscriptions; default 2 MiB/s (as the
	// service), 0 or less unbounded.
	SubscribeBytesPerSec int
	// EventRecords is the most records in one SubscribeToShardEvent;
	// default 10,000.
	EventRecords int
	// IdleEvent is the interval between the events without records that a
	// caught-up subscription gets; default 1 s.
	IdleEvent time.Duration

	mu      sync.Mutex
	streams map[string]*fstream
	seq     uint64
	epoch   int // iterators issued before the current epoch are expired
	calls   map[string]int
	// throttled: "<stream>|<shard>" → until when (by Now) its reads are
	// refused (Throttle).
	throttled map[string]time.Time

	consumers map[string]*fconsumer // by ARN
	subs      map[subKey]*fsub      // the last subscription per consumer and shard
	budget    map[subKey]time.Time  // when pushing to a consumer on a shard may go on (SubscribeBytesPerSec)
	pushed    map[subKey]int64      // record data pushed to a consumer on a shard
	open      int                   // event streams with a running pusher
	tick      chan struct{}         // closed and replaced when records or shards change
}

type fstream struct {
	name   string
	shards []*fshard
}

type fshard struct {
	id               string
	parent, adjacent string
	lo, hi           *big.Int
	startSeq, endSeq string // endSeq "" while open
	recs             []frec
}

type frec struct {
	seq     string
	pk      string
	data    []byte
	arrival time.Time
}

// NewFake returns an empty fake.
func NewFake() *Fake {
	return &Fake{
		IteratorTTL: 5 * time.Minute, PageSize: 1000, Now: time.Now,
		SubscriptionLifetime: 5 * time.Minute, InUseWindow: 5 * time.Second, SubscribeInterval: time.Second,
		SubscribeBytesPerSec: 2 << 20, EventRecords: defaultEventLimit, IdleEvent: defaultIdleEvent,
		streams: map[string]*fstream{}, calls: map[string]int{},
		consumers: map[string]*fconsumer{}, subs: map[subKey]*fsub{}, budget: map[subKey]time.Time{},
		pushed: map[subKey]int64{}, tick: make(chan struct{}),
	}
}

func (f *Fake) nextSeq() string {
	f.seq++
	return fmt.Sprintf("49%054d", f.seq)
}

func notFound(format string, args ...any) error {
	return &types.ResourceNotFoundException{Message: aws.String(fmt.Sprintf(format, args...))}
}

func invalid(format string, args ...any) error {
	return &types.InvalidArgumentException{Message: aws.String(fmt.Sprintf(format, args...))}
}

func (f *Fake) stream(name *string) (*fstream, error) {
	if name == nil || *name == "" {
		return nil, invalid("StreamName is required")
	}
	s, ok := f.streams[*name]
	if !ok {
		return nil, notFound("stream %s not found", *name)
	}
	return s, nil
}

func (s *fstream) shard(id *string) (*fshard, error) {
	for _, sh := range s.shards {
		if sh.id == aws.ToString(id) {
			return sh, nil
		}
	}
	return nil, notFound("shard %s in stream %s not found", aws.ToString(id), s.name)
}

func (s *fstream) addShard(f *Fake, lo, hi *big.Int, parent, adjacent string) *fshard {
	sh := &fshard{id: fmt.Sprintf("shardId-%012d", len(s.shards)), lo: lo, hi: hi, parent: parent, adjacent: adjacent, startSeq: f.nextSeq()}
	s.shards = append(s.shards, sh)
	return sh
}

func (f *Fake) count(op string) {
	f.calls[op]++
}

// Calls returns how many times op (an API method name) was called.
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// CreateStream creates a stream whose shards split the hash key space
// evenly.
func (f *Fake) CreateStream(_ context.Context, in *kinesis.CreateStreamInput, _ ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("CreateStream")
	name := aws.ToString(in.StreamName)
	if name == "" {
		return nil, invalid("StreamName is required")
	}
	if _, ok := f.streams[name]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("stream " + name + " already exists")}
	}
	n := int64(aws.ToInt32(in.ShardCount))
	if n < 1 {
		n = 1
	}
	s := &fstream{name: name}
	size := new(big.Int).Div(new(big.Int).Add(maxHash, big.NewInt(1)), big.NewInt(n))
	for i := int64(0); i < n; i++ {
		lo := new(big.Int).Mul(size, big.NewInt(i))
		hi := new(big.Int).Sub(new(big.Int).Add(lo, size), big.NewInt(1))
		if i == n-1 {
			hi = new(big.Int).Set(maxHash)
		}
		s.addShard(f, lo, hi, "", "")
	}
	f.streams[name] = s
	return &kinesis.CreateStreamOutput{}, nil
}

// DescribeStreamSummary reports the stream ACTIVE with its open shard count.
func (f *Fake) DescribeStreamSummary(_ context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("DescribeStreamSummary")
	s, err := f.stream(in.StreamName)
	if err != nil {
		return nil, err
	}
	open := int32(0)
	for _, sh := range s.shards {
		if sh.endSeq == "" {
			open++
		}
	}
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName: aws.String(s.name), StreamARN: aws.String(StreamARN(s.name)), StreamStatus: types.StreamStatusActive,
		OpenShardCount: aws.Int32(open), RetentionPeriodHours: aws.Int32(24), ConsumerCount: aws.Int32(f.consumerCount(s)),
	}}, nil
}

// ListShards lists every shard, PageSize per page. Like the service, it
// takes either StreamName or NextToken, not both.
func (f *Fake) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("ListShards")
	name, from := aws.ToString(in.StreamName), 0
	switch {
	case in.NextToken != nil && in.StreamName != nil:
		return nil, invalid("NextToken and StreamName cannot be provided together")
	case in.NextToken != nil:
		n, off, ok := strings.Cut(*in.NextToken, "|")
		i, err := strconv.Atoi(off)
		if !ok || err != nil {
			return nil, invalid("bad NextToken")
		}
		name, from = n, i
	}
	s, err := f.stream(&name)
	if err != nil {
		return nil, err
	}
	page := f.PageSize
	if in.MaxResults != nil && int(*in.MaxResults) < page {
		page = int(*in.MaxResults)
	}
	out := &kinesis.ListShardsOutput{}
	to := min(from+page, len(s.shards))
	for _, sh := range s.shards[from:to] {
		t := types.Shard{
			ShardId:             aws.String(sh.id),
			HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String(sh.lo.String()), EndingHashKey: aws.String(sh.hi.String())},
			SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String(sh.startSeq)},
		}
		if sh.endSeq != "" {
			t.SequenceNumberRange.EndingSequenceNumber = aws.String(sh.endSeq)
		}
		if sh.parent != "" {
			t.ParentShardId = aws.String(sh.parent)
		}
		if sh.adjacent != "" {
			t.AdjacentParentShardId = aws.String(sh.adjacent)
		}
		out.Shards = append(out.Shards, t)
	}
	if to < len(s.shards) {
		out.NextToken = aws.String(name + "|" + strconv.Itoa(to))
	}
	return out, nil
}

// An iterator token carries its own state: stream, shard, index of the next
// record, issue time (Unix ns) and epoch.
func (f *Fake) token(stream, shard string, idx int) string {
	return fmt.Sprintf("%s|%s|%d|%d|%d", stream, shard, idx, f.Now().UnixNano(), f.epoch)
}

// GetShardIterator supports every iterator type but AT_TIMESTAMP's
// sub-millisecond precision.
func (f *Fake) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("GetShardIterator")
	s, err := f.stream(in.StreamName)
	if err != nil {
		return nil, err
	}
	sh, err := s.shard(in.ShardId)
	if err != nil {
		return nil, err
	}
	idx, err := sh.index(in.ShardIteratorType, aws.ToString(in.StartingSequenceNumber), in.Timestamp)
	if err != nil {
		return nil, err
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(f.token(s.name, sh.id, idx))}, nil
}

// index returns the index of the first record of the shard at a starting
// position: an iterator type with its sequence number or timestamp.
func (sh *fshard) index(typ types.ShardIteratorType, seq string, ts *time.Time) (int, error) {
	var idx int
	switch typ {
	case types.ShardIteratorTypeTrimHorizon:
	case types.ShardIteratorTypeLatest:
		idx = len(sh.recs)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		if len(seq) != len(sh.startSeq) || seq < sh.startSeq || (sh.endSeq != "" && seq > sh.endSeq) {
			return 0, invalid("StartingSequenceNumber %s is not in shard %s", seq, sh.id)
		}
		idx = sort.Search(len(sh.recs), func(i int) bool { return sh.recs[i].seq >= seq })
		if typ == types.ShardIteratorTypeAfterSequenceNumber && idx < len(sh.recs) && sh.recs[idx].seq == seq {
			idx++
		}
	case types.ShardIteratorTypeAtTimestamp:
		if ts == nil {
			return 0, invalid("AT_TIMESTAMP needs a Timestamp")
		}
		idx = sort.Search(len(sh.recs), func(i int) bool { return !sh.recs[i].arrival.Before(*ts) })
	default:
		return 0, invalid("bad ShardIteratorType %q", typ)
	}
	return idx, nil
}

func (f *Fake) consumerCount(s *fstream) int32 {
	n := int32(0)
	for _, c := range f.consumers {
		if c.stream == s {
			n++
		}
	}
	return n
}

// Throttle makes every read of shard of stream (GetRecords and
// SubscribeToShard) fail with ProvisionedThroughputExceededException until
// Now reaches until, as the service does when the shard's 5 reads per
// second are exceeded by all its readers together. The records stay where
// they are; MillisBehindLatest of the first read after it tells how far
// behind the reader fell.
func (f *Fake) Throttle(stream, shard string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.throttled == nil {
		f.throttled = map[string]time.Time{}
	}
	f.throttled[stream+"|"+shard] = until
}

// throttledLocked returns the throttle error while shard of stream is
// throttled, or nil; called with mu held.
func (f *Fake) throttledLocked(stream, shard string) error {
	if until, ok := f.throttled[stream+"|"+shard]; ok && f.Now().Before(until) {
		return &types.ProvisionedThroughputExceededException{Message: aws.String("rate exceeded for shard " + shard)}
	}
	return nil
}

// GetRecords returns up to Limit records. At the end of a closed shard,
// NextShardIterator is nil (possibly together with its last records).
func (f *Fake) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("GetRecords")
	parts := strings.Split(aws.ToString(in.ShardIterator), "|")
	if len(parts) != 5 {
		return nil, invalid("invalid ShardIterator")
	}
	idx, err1 := strconv.Atoi(parts[2])
	issued, err2 := strconv.ParseInt(parts[3], 10, 64)
	epoch, err3 := strconv.Atoi(parts[4])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, invalid("invalid ShardIterator")
	}
	if epoch < f.epoch || f.Now().Sub(time.Unix(0, issued)) > f.IteratorTTL {
		return nil, &types.ExpiredIteratorException{Message: aws.String("iterator expired")}
	}
	s, err := f.stream(&parts[0])
	if err != nil {
		return nil, err
	}
	sh, err := s.shard(&parts[1])
	if err != nil {
		return nil, err
	}
	if err := f.throttledLocked(s.name, sh.id); err != nil {
		return nil, err
	}
	limit := 10_000
	if in.Limit != nil && *in.Limit > 0 {
		limit = min(limit, int(*in.Limit))
	}
	end := min(idx+limit, len(sh.recs))
	out := &kinesis.GetRecordsOutput{MillisBehindLatest: aws.Int64(0)}
	for _, r := range sh.recs[idx:end] {
		out.Records = append(out.Records, types.Record{
			SequenceNumber: aws.String(r.seq), PartitionKey: aws.String(r.pk),
			Data: append([]byte(nil), r.data...), ApproximateArrivalTimestamp: aws.Time(r.arrival),
		})
	}
	if end < len(sh.recs) {
		out.MillisBehindLatest = aws.Int64(max(1, f.Now().Sub(sh.recs[end].arrival).Milliseconds()))
	}
	if end < len(sh.recs) || sh.endSeq == "" {
		out.NextShardIterator = aws.String(f.token(s.name, sh.id, end))
	}
	return out, nil
}

func hashOf(pk, explicit string) (*big.Int, error) {
	if explicit != "" {
		h, ok := new(big.Int).SetString(explicit, 10)
		if !ok || h.Sign() < 0 || h.Cmp(maxHash) > 0 {
			return nil, invalid("ExplicitHashKey %q is not a 128-bit decimal", explicit)
		}
		return h, nil
	}
	sum := md5.Sum([]byte(pk))
	return new(big.Int).SetBytes(sum[:]), nil
}

// PutRecords appends each entry to the open shard whose hash key range
// holds its explicit hash key, or the MD5 of its partition key.
func (f *Fake) PutRecords(_ context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("PutRecords")
	s, err := f.stream(in.StreamName)
	if err != nil {
		return nil, err
	}
	if len(in.Records) == 0 || len(in.Records) > ikinesis.MaxPutEntries {
		return nil, invalid("%d records: want 1..%d", len(in.Records), ikinesis.MaxPutEntries)
	}
	now := f.Now()
	out := &kinesis.PutRecordsOutput{FailedRecordCount: aws.Int32(0)}
	for _, e := range in.Records {
		pk := aws.ToString(e.PartitionKey)
		if pk == "" {
			return nil, invalid("empty partition key")
		}
		h, err := hashOf(pk, aws.ToString(e.ExplicitHashKey))
		if err != nil {
			return nil, err
		}
		var target *fshard
		for _, sh := range s.shards {
			if sh.endSeq == "" && sh.lo.Cmp(h) <= 0 && h.Cmp(sh.hi) <= 0 {
				target = sh
				break
			}
		}
		if target == nil {
			return nil, fmt.Errorf("kinesistest: no open shard for hash key %s", h)
		}
		r := frec{seq: f.nextSeq(), pk: pk, data: append([]byte(nil), e.Data...), arrival: now}
		target.recs = append(target.recs, r)
		out.Records = append(out.Records, types.PutRecordsResultEntry{SequenceNumber: aws.String(r.seq), ShardId: aws.String(target.id)})
	}
	f.changedLocked()
	return out, nil
}

// SplitShard closes a shard and opens two children that split its hash
// key range at NewStartingHashKey.
func (f *Fake) SplitShard(_ context.Context, in *kinesis.SplitShardInput, _ ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("SplitShard")
	s, err := f.stream(in.StreamName)
	if err != nil {
		return nil, err
	}
	p, err := s.shard(in.ShardToSplit)
	if err != nil {
		return nil, err
	}
	if p.endSeq != "" {
		return nil, invalid("shard %s is closed", p.id)
	}
	at, ok := new(big.Int).SetString(aws.ToString(in.NewStartingHashKey), 10)
	if !ok || at.Cmp(p.lo) <= 0 || at.Cmp(p.hi) > 0 {
		return nil, invalid("NewStartingHashKey %q is not inside shard %s", aws.ToString(in.NewStartingHashKey), p.id)
	}
	p.endSeq = f.nextSeq()
	s.addShard(f, p.lo, new(big.Int).Sub(at, big.NewInt(1)), p.id, "")
	s.addShard(f, at, p.hi, p.id, "")
	f.changedLocked()
	return &kinesis.SplitShardOutput{}, nil
}

// MergeShards closes two shards with adjacent hash key ranges and opens
// their child.
func (f *Fake) MergeShards(_ context.Context, in *kinesis.MergeShardsInput, _ ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count("MergeShards")
	s, err := f.stream(in.StreamName)
	if err != nil {
		return nil, err
	}
	a, err := s.shard(in.ShardToMerge)
	if err != nil {
		return nil, err
	}
	b, err := s.shard(in.AdjacentShardToMerge)
	if err != nil {
		return nil, err
	}
	if a.endSeq != "" || b.endSeq != "" {
		return nil, invalid("shards to merge must be open")
	}
	lo, hi := a.lo, b.hi
	one := big.NewInt(1)
	switch {
	case new(big.Int).Add(a.hi, one).Cmp(b.lo) == 0:
	case new(big.Int).Add(b.hi, one).Cmp(a.lo) == 0:
		lo, hi = b.lo, a.hi
	default:
		return nil, invalid("shards %s and %s are not adjacent", a.id, b.id)
	}
	end := f.nextSeq()
	a.endSeq, b.endSeq = end, end
	s.addShard(f, lo, hi, a.id, b.id)
	f.changedLocked()
	return &kinesis.MergeShardsOutput{}, nil
}

// ExpireIterators makes every shard iterator issued so far expired.
func (f *Fake) ExpireIterators() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
}

// Record is a record stored in the fake, for test assertions.
type Record struct {
	Shard        string
	Seq          string
	PartitionKey string
	Data         []byte
	ArrivalMs    int64
}

// Records returns every record of the stream, shard by shard in listing
// order, each shard's in sequence order.
func (f *Fake) Records(stream string) []Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.streams[stream]
	if !ok {
		return nil
	}
	var out []Record
	for _, sh := range s.shards {
		for _, r := range sh.recs {
			out = append(out, Record{Shard: sh.id, Seq: r.seq, PartitionKey: r.pk, Data: r.data, ArrivalMs: r.arrival.UnixMilli()})
		}
	}
	return out
}
