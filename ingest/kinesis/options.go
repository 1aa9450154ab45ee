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
	// not read at all.
	StartAt string
	// StartTimestamp is the arrival time to start from with
	// StartAtTimestamp.
	StartTimestamp time.Time
	// Positions are the restored positions: shard id → "<seq>/<sub>" of
	// the last user record returned, or PositionClosed. The map is copied.
	Positions map[string]string

	// MinCallInterval is the least time between two GetRecords calls on a
	// shard. Default 200 ms, the service's 5 calls per second per shard;
	// smaller values are for in-process fakes only.
	MinCallInterval time.Duration
	// PollInterval is the wait after a call that returned no records and
	// reported the shard caught up (MillisBehindLatest 0). Default 500 ms.
	PollInterval time.Duration
	// Limit is the maximum number of records per GetRecords call, at most
	// MaxLimit. Default MaxLimit.
	Limit int32
	// ReadBytesPerSec paces a shard's calls so that it reads no faster
	// than this. Default 2 MiB/s, the service's per-shard read limit.
	ReadBytesPerSec int
	// BackoffBase and BackoffMax bound the jittered exponential backoff
	// after a throttle or a server error. Defaults 100 ms and 5 s.
	BackoffBase, BackoffMax time.Duration
	// MaxErrors is how many consecutive failures (other than throttling and
	// expired iterators) a reader or the shard listing retries before the
	// source fails (Next returns the error). Default 20.
	MaxErrors int
	// Rediscover is the interval between shard listings. Default 10 s.
	Rediscover time.Duration
	// BufferRecords bounds a shard's queue of fetched user records: a
	// reader does not call GetRecords while its queue holds this many.
	// Default 10,000.
	BufferRecords int
	// StartHold bounds how long Next holds back user records after Open,
	// until every shard whose reader Open started has fetched: its
	// GetRecords calls returned a user record, reported the shard caught up
	// (MillisBehindLatest 0) or reached its end. Shard events are not held.
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
	for id, p := range o.Positions {
		if _, _, err := parsePosition(p); err != nil && p != PositionClosed {
			bad("position of shard %s: %v", id, err)
		}
	}
	if o.MinCallInterval < 0 || o.PollInterval < 0 || o.BackoffBase < 0 || o.BackoffMax < o.BackoffBase || o.Rediscover < 0 {
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
