package valkey

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Store. The zero value of each field means its
// default; EnsureDefaults fills them in and Validate checks the result.
type Options struct {
	// Addr is the server address, host:port. Required by New; ignored by
	// NewWithClient.
	Addr string
	// Cluster makes New connect as a cluster client (it then needs the
	// cluster reachable to start). Default false: a standalone server,
	// and New succeeds even when it is down.
	Cluster bool
	// Username and Password authenticate with AUTH when set.
	Username string
	Password string
	// TLS enables TLS with this configuration when not nil.
	TLS *tls.Config

	// Prefix starts every key name. Default "adclick". It must not contain
	// '{' or '}', which would change the keys' hash tags.
	Prefix string
	// MinuteTTL is the expiry set on a minute total at each write.
	// Default 48h.
	MinuteTTL time.Duration
	// HourTTL is the expiry set on an hour total at each write. Default
	// 8 days (192h).
	HourTTL time.Duration
	// EpochTTL is the expiry set on an epoch set and on the epoch registry
	// at each write. Default the larger of MinuteTTL and HourTTL, so that
	// the bookkeeping outlives every key it lists.
	EpochTTL time.Duration

	// Timeout bounds each round trip to the server (one pipeline); a call
	// that needs several round trips may take several. It is also the
	// connection's read/write deadline. Default 2s.
	Timeout time.Duration
	// DialTimeout bounds connecting. Default 1s.
	DialTimeout time.Duration
	// BatchSize is the number of totals (or keys) sent in one pipeline.
	// Default 500.
	BatchSize int

	// Registerer receives the store's metrics; nil means not registered.
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultPrefix      = "adclick"
	DefaultMinuteTTL   = 48 * time.Hour
	DefaultHourTTL     = 8 * 24 * time.Hour
	DefaultTimeout     = 2 * time.Second
	DefaultDialTimeout = time.Second
	DefaultBatchSize   = 500
)

// EnsureDefaults sets every zero field to its default.
func (o *Options) EnsureDefaults() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.MinuteTTL == 0 {
		o.MinuteTTL = DefaultMinuteTTL
	}
	if o.HourTTL == 0 {
		o.HourTTL = DefaultHourTTL
	}
	if o.EpochTTL == 0 {
		o.EpochTTL = max(o.MinuteTTL, o.HourTTL)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
}

// Validate reports every problem with the options, joined.
func (o *Options) Validate() error {
	var errs []error
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("prefix %q contains '{' or '}'", o.Prefix))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"minute TTL", o.MinuteTTL}, {"hour TTL", o.HourTTL}, {"epoch TTL", o.EpochTTL},
		{"timeout", o.Timeout}, {"dial timeout", o.DialTimeout},
	} {
		if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s %v is below 1ms", d.name, d.v))
		}
	}
	if o.EpochTTL < o.MinuteTTL || o.EpochTTL < o.HourTTL {
		errs = append(errs, fmt.Errorf("epoch TTL %v is shorter than a total's TTL (minute %v, hour %v)", o.EpochTTL, o.MinuteTTL, o.HourTTL))
	}
	if o.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size %d is below 1", o.BatchSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("valkey: options: %w", err)
	}
	return nil
}
