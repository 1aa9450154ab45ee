package dynamo

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/sink"
)

// Defaults of Options.
const (
	DefaultTable       = "ad_metrics"
	DefaultMaxInFlight = 32
	DefaultMaxAttempts = 15
	DefaultBaseBackoff = 20 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	DefaultTableWait   = 5 * time.Minute
)

// Options configures a Store. The zero value, after EnsureDefaults, is valid.
type Options struct {
	// Table is the table name. Default "ad_metrics".
	Table string
	// MaxInFlight bounds the requests the Store has in flight at once,
	// across all concurrent calls. Default 32.
	MaxInFlight int
	// MaxAttempts is the number of attempts per request, the first included,
	// before a retryable error (throttling, 5xx, transport) is returned, as
	// a *TransientError: a caller that can wait longer (the flush) retries
	// it. Default 15.
	MaxAttempts int
	// BaseBackoff is the backoff before the first retry; it doubles with
	// every further retry up to MaxBackoff, and the wait is drawn uniformly
	// from [d/2, d]. Default 20 ms.
	BaseBackoff time.Duration
	// MaxBackoff caps the backoff. Default 5 s.
	MaxBackoff time.Duration
	// TableWait bounds how long CreateTable waits for the table and its
	// indexes to become ACTIVE. Default 5 min.
	TableWait time.Duration
	// Retention is how long rows are kept after their bucket ends: every
	// write sets expires_at (TTLAttribute) from it, and CreateTable turns
	// the table's TTL on. Zero fields take sink's defaults (35 days for
	// minute rows, 400 for hour rows); see sink.Retention for why TTL never
	// deletes a row the flush or the recount still needs.
	Retention sink.Retention
	// Registerer receives the Store's metrics; nil means they are not
	// registered (they are still counted).
	Registerer prometheus.Registerer
}

// EnsureDefaults sets every zero field to its default and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BaseBackoff == 0 {
		o.BaseBackoff = DefaultBaseBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.TableWait == 0 {
		o.TableWait = DefaultTableWait
	}
	o.Retention.EnsureDefaults()
	return o
}

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Validate reports every problem with o (joined), or nil.
func (o *Options) Validate() error {
	var errs []error
	if !tableName.MatchString(o.Table) {
		errs = append(errs, fmt.Errorf("dynamo: table name %q must be 3 to 255 characters of a-z, A-Z, 0-9, '_', '-', '.'", o.Table))
	}
	if o.MaxInFlight < 1 || o.MaxInFlight > 4096 {
		errs = append(errs, fmt.Errorf("dynamo: max in flight %d must be in [1, 4096]", o.MaxInFlight))
	}
	if o.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("dynamo: max attempts %d must be at least 1", o.MaxAttempts))
	}
	if o.BaseBackoff <= 0 {
		errs = append(errs, fmt.Errorf("dynamo: base backoff %v must be positive", o.BaseBackoff))
	}
	if o.MaxBackoff < o.BaseBackoff {
		errs = append(errs, fmt.Errorf("dynamo: max backoff %v must be at least the base backoff %v", o.MaxBackoff, o.BaseBackoff))
	}
	if o.TableWait <= 0 {
		errs = append(errs, fmt.Errorf("dynamo: table wait %v must be positive", o.TableWait))
	}
	if err := o.Retention.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("dynamo: %w", err))
	}
	return errors.Join(errs...)
}
