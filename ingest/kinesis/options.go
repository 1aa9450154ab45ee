package kinesis

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a shard with no saved position starts (Options.StartAt).
const (
	StartTrimHorizon = "TRIM_HORIZON" // the oldest record kept (the default)
	StartLatest      = "LATEST"       // only records put after the start
	StartAtTimestamp = "AT_TIMESTAMP" // records that arrived at or after Options.StartTimestamp
)

// How a source reads its shards (Options.Read).
const (
	// ReadPoll reads each shard with GetRecords in a loop (the default).
	// Every reader of a stream shares a shard's 5 calls and 2 MiB per
	// second.
	ReadPoll = "poll"
	// ReadEFO reads by enhanced fan-out: each shard's records are pushed
	// to the registered consumer Options.Consumer over SubscribeToShard
	// event streams, at up to 2 MiB/s per shard for that consumer alone.
	ReadEFO = "efo"
)

// PositionClosed is the position of a shard read to its end, every record
// of which has been returned by Next.
const PositionClosed = "closed"

// MaxLimit is the service's maximum number of records per GetRecords call.
const MaxLimit = 10_000

// Options configures a Source. Zero fields take the defaults noted.
type Options struct {
	// Stream is the stream name (required).
	Stream string
	// StartAt applies to shards that have no position in Positions and are
	// listed when the source opens: StartTrimHorizon (default),
	// StartLatest or StartAtTimestamp. Shards that appear later (children
	// of a reshard) always start at TRIM_HORIZON, so nothing is lost. With
	// StartLatest, shards that are already closed when the source opens are
	// not read at all. Opener turns StartLatest into StartAtTimestamp at
	// the job's pinned first start (source.Start.StartMs), when it has one.
	StartAt string
	// StartTimestamp is the arrival time to start from with
	// StartAtTimestamp.
	StartTimestamp time.Time
	// Positions are the restored positions: shard id → "<seq>/<sub>" of
	// the last user record returned, or PositionClosed. The map is copied.
	Positions map[string]string

	// Read is how shards are read: ReadPoll (default) or ReadEFO.
	Read string
	// Consumer is the name of the stream consumer ReadEFO reads through;
	// required with ReadEFO, refused with ReadPoll. Open registers it if
	// it is missing and waits for it to become ACTIVE. Two sources must
	// not read through one consumer at the same time: each subscription
	// of one would take the other's over.
	Consumer string
	// ConsumerWait bounds how long Open waits for the consumer to become
	// ACTIVE, asking DescribeStreamConsumer every PollInterval. Default
	// 2 min.
	ConsumerWait time.Duration
	// SubscribeInterval is the least time between two SubscribeToShard
	// calls on a shard with ReadEFO. Default 1 s, the service's limit per
	// consumer and shard; smaller values are for in-process fakes only.
	SubscribeInterval time.Duration

	// MinCallInterval, PollInterval, Limit and ReadBytesPerSec pace
	// ReadPoll; with ReadEFO the service paces what it pushes.
	//
	// MinCallInterval is the least time between two GetRecords calls on a
	// shard. Default 200 ms, the service's 5 calls per second per shard;
	// smaller values are for in-process fakes only.
	MinCallInterval time.Duration
	// PollInterval is the wait after a call that returned no records and
	// reported the shard caught up (MillisBehindLatest 0), and between two
	// DescribeStreamConsumer calls while a consumer is CREATING. Default
	// 500 ms.
	PollInterval time.Duration
	// Limit is the maximum number of records per GetRecords call, at most
	// MaxLimit. Default MaxLimit.
	Limit int32
	// ReadBytesPerSec paces a shard's calls so that it reads no faster
	// than this. Default 2 MiB/s, the service's per-shard read limit.
	ReadBytesPerSec int
	// BackoffBase and BackoffMax bound the jittered exponential backoff
	// after a throttle or a server error, and with ReadEFO after a
	// subscription in use (ResourceInUseException). Defaults 100 ms and
	// 5 s.
	BackoffBase, BackoffMax time.Duration
	// MaxErrors is how many consecutive failures (other than throttling,
	// expired iterators and subscriptions in use) a reader or the shard
	// listing retries before the source fails (Next returns the error).
	// Default 20.
	MaxErrors int
	// Rediscover is the interval between shard listings. Default 10 s.
	Rediscover time.Duration
	// BufferRecords bounds a shard's queue of fetched user records: a
	// reader does not call GetRecords, or take the next event of its
	// subscription, while its queue holds this many. Default 10,000.
	BufferRecords int
	// StartHold bounds how long Next holds back user records after Open,
	// until every shard whose reader Open started has fetched: its
	// GetRecords calls (or subscription events) returned a user record,
	// reported the shard caught up (MillisBehindLatest 0) or reached its
	// end. Shard events are not held.
	// Without the hold, a backlog comes out in the order the shards' first
	// calls return, often one whole shard after another, and the job
	// watermark (the minimum over shards) cannot form before the last
	// shard's first record. Default 10 s; a negative value holds nothing.
	StartHold time.Duration

	// Registerer registers the source's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives one line per event that matters (shard started or
	// closed, errors); nil discards.
	Logger *slog.Logger
}

// EnsureDefaults fills in the zero fields.
func (o *Options) EnsureDefaults() *Options {
	if o.StartAt == "" {
		o.StartAt = StartTrimHorizon
	}
	if o.Read == "" {
		o.Read = ReadPoll
	}
	if o.ConsumerWait == 0 {
		o.ConsumerWait = 2 * time.Minute
	}
	if o.SubscribeInterval == 0 {
		o.SubscribeInterval = time.Second
	}
	if o.MinCallInterval == 0 {
		o.MinCallInterval = 200 * time.Millisecond
	}
	if o.PollInterval == 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.Limit == 0 {
		o.Limit = MaxLimit
	}
	if o.ReadBytesPerSec == 0 {
		o.ReadBytesPerSec = 2 << 20
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = 100 * time.Millisecond
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = 5 * time.Second
	}
	if o.MaxErrors == 0 {
		o.MaxErrors = 20
	}
	if o.Rediscover == 0 {
		o.Rediscover = 10 * time.Second
	}
	if o.BufferRecords == 0 {
		o.BufferRecords = 10_000
	}
	if o.StartHold == 0 {
		o.StartHold = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem with the options.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("kinesis: "+format, args...)) }
	if o.Stream == "" {
		bad("stream name is empty")
	}
	switch o.StartAt {
	case StartTrimHorizon, StartLatest:
	case StartAtTimestamp:
		if o.StartTimestamp.IsZero() {
			bad("start at %s needs a start timestamp", StartAtTimestamp)
		}
	default:
		bad("start at %q: want %s, %s or %s", o.StartAt, StartTrimHorizon, StartLatest, StartAtTimestamp)
	}
	switch o.Read {
	case ReadPoll:
		if o.Consumer != "" {
			bad("consumer %q is only used with read %s", o.Consumer, ReadEFO)
		}
	case ReadEFO:
		if o.Consumer == "" {
			bad("read %s needs a consumer name", ReadEFO)
		} else if !ValidConsumerName(o.Consumer) {
			bad("consumer name %q: want 1 to 128 letters, digits, '_', '.' or '-'", o.Consumer)
		}
	default:
		bad("read %q: want %s or %s", o.Read, ReadPoll, ReadEFO)
	}
	for id, p := range o.Positions {
		if _, _, err := parsePosition(p); err != nil && p != PositionClosed {
			bad("position of shard %s: %v", id, err)
		}
	}
	if o.MinCallInterval < 0 || o.PollInterval < 0 || o.BackoffBase < 0 || o.BackoffMax < o.BackoffBase || o.Rediscover < 0 ||
		o.ConsumerWait < 0 || o.SubscribeInterval < 0 {
		bad("intervals must be positive and backoff max ≥ backoff base")
	}
	if o.Limit < 0 || o.Limit > MaxLimit {
		bad("limit %d: want 1..%d", o.Limit, MaxLimit)
	}
	if o.BufferRecords < 0 || o.MaxErrors < 0 || o.ReadBytesPerSec < 0 {
		bad("buffer, max errors and read rate must be positive")
	}
	return errors.Join(errs...)
}

// ValidConsumerName reports whether n is a consumer name the service
// accepts: 1 to 128 characters of a-z, A-Z, 0-9, '_', '.', '-'.
func ValidConsumerName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
