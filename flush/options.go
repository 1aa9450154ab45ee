package flush

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultWritesPerSec is the default rate limit of the drivers' own writes.
const DefaultWritesPerSec = 500

// maxAttempts bounds how often one item is re-read and decided again after
// a conditional write found it changed.
const maxAttempts = 3

// totalsBatch is the number of totals written or deleted per call.
const totalsBatch = 100

// Options configures Full. The zero value of each optional field selects
// its default.
type Options struct {
	// Restored is c, the id of the checkpoint or savepoint the job restored
	// from. Required, ≥ 0.
	Restored int64
	// High is the highest epoch any earlier run may have written
	// (inclusive); the flush queries every epoch in [Restored, High].
	// Required, ≥ Restored.
	High int64
	// Gen is this job's job_gen, written with every rewrite. Required, ≥ 0.
	Gen int64
	// Fence is the lease fence of the range the job flushes (the counter
	// its take wrote), ≥ 0; 0 without a range lease. Every rewrite, Remove
	// and Delete of the run carries the token (Gen, Fence) (sink.Token):
	// an item a newer owner of the range wrote (job_gen = Gen, wf above
	// Fence) is left alone and counted in Report.Superseded, and the items
	// the run changes get wf = Fence, so that the old owner's late writes
	// to them are refused. Above 0 it needs a row store that takes tokens
	// (sink.FencedRows).
	Fence int64
	// RewriteEpoch is the tag of the run's own rewrites (rows rewritten
	// from state, totals written), ≥ Restored; 0 means Restored. A range
	// holder gives the epoch it writes next, above High, so that nothing
	// it writes itself is tagged in [Restored, High], and a later fence
	// sweep of those epochs finds only its predecessors' writes. A fence
	// sweep (Restored, High the epochs a taken-over holder may have
	// written) gives the epoch being written now.
	RewriteEpoch int64
	// StaleTotalsOnly, for a fence sweep, leaves the running totals state
	// holds as they are (the live job's early firings rewrite every open
	// window's total, under its fence, which the store ranks above the old
	// holder's) and only deletes those recorded under an epoch in
	// [Restored, High] that state lacks. A sweep runs while the job waits
	// at a barrier: rewriting every open total at the flush's rate would
	// hold the job for as long.
	StaleTotalsOnly bool
	// WritesPerSec limits the flush's own writes (item writes, totals
	// written, totals deleted), so live output keeps its capacity. Default
	// DefaultWritesPerSec; math.Inf(1) turns the limit off.
	WritesPerSec float64
	// Burst is the number of writes the limiter lets through at once.
	// Default WritesPerSec/10, at least 1.
	Burst int
	// Clock drives the rate limit and the duration. Default RealClock.
	Clock Clock
	// Registerer receives the metrics; nil registers none. Metrics already
	// registered by an earlier call are reused.
	Registerer prometheus.Registerer
	// Logger receives one line per run, and the retry lines. Default:
	// discard.
	Logger *slog.Logger
	// RetryBackoff is the wait before the first retry of a row-store call
	// that failed with a transient error (IsTransient: throttling, 5xx,
	// timeouts, responses cut short, once the store's own attempts are
	// spent). It doubles with every further retry of the same call, up to
	// MaxRetryBackoff, and each wait is drawn uniformly from [d/2, d]. Such
	// calls are retried until ctx ends: the flush is rate-limited work that
	// waits out a slow store rather than fail the start. Other errors fail
	// the run at once. Default DefaultRetryBackoff (500 ms).
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the backoff. Default DefaultMaxRetryBackoff
	// (30 s).
	MaxRetryBackoff time.Duration
	// RetryLogEvery is the least time between two log lines (Warn) about
	// retries; each line counts the retries since the previous one.
	// Default DefaultRetryLogEvery (10 s).
	RetryLogEvery time.Duration
	// Progress, if not nil, is called with the run's progress: once as it
	// starts, after every tag-index query, every 256 items of a query's
	// results, at the start of the totals phase and after every batch of
	// totals, and a last time with PhaseDone when the run ends, whether it
	// succeeded or not. The counts never go down. It is called on Full's
	// goroutine, between the run's store calls, so it must be quick and must
	// not call Full. Independently of it, a run that lasts logs an Info line
	// "flush progress" at most every 10 s (on Clock).
	Progress func(Progress)
}

// SweepOptions configures Sweep. The zero value of each optional field
// selects its default.
type SweepOptions struct {
	// Gen is the generation whose writes are removed (the old version of a
	// blue/green pair). Required, ≥ 0.
	Gen int64
	// Since is the savepoint the new version started from; writes tagged
	// at or above it are removed. Required, ≥ 0.
	Since int64
	// High is the highest epoch the old version may have written
	// (inclusive). Required, ≥ Since.
	High int64
	// FenceGen and Fence are the sweeping job's own token (sink.Token):
	// its job_gen, above Gen, and the lease fence of the range it sweeps.
	// With FenceGen set, every Remove and Delete of the run is fenced by
	// the token, as in Options.Fence: an item a newer owner of that
	// generation wrote is left alone (Report.Superseded). FenceGen 0 (the
	// default) runs unfenced, as before fences; Fence is then 0 too.
	FenceGen int64
	Fence    int64
	// WritesPerSec, Burst, Clock, Registerer, Logger, RetryBackoff,
	// MaxRetryBackoff and RetryLogEvery are as in Options.
	WritesPerSec    float64
	Burst           int
	Clock           Clock
	Registerer      prometheus.Registerer
	Logger          *slog.Logger
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	RetryLogEvery   time.Duration
}

// limits holds the options the two drivers share.
type limits struct {
	writesPerSec    float64
	burst           int
	clock           Clock
	logger          *slog.Logger
	retryBackoff    time.Duration
	maxRetryBackoff time.Duration
	retryLogEvery   time.Duration
}

func (l *limits) ensureDefaults() {
	if l.writesPerSec == 0 {
		l.writesPerSec = DefaultWritesPerSec
	}
	if l.burst == 0 {
		l.burst = max(1, int(math.Min(l.writesPerSec/10, 1<<30)))
	}
	if l.clock == nil {
		l.clock = RealClock{}
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if l.retryBackoff == 0 {
		l.retryBackoff = DefaultRetryBackoff
	}
	if l.maxRetryBackoff == 0 {
		l.maxRetryBackoff = max(DefaultMaxRetryBackoff, l.retryBackoff)
	}
	if l.retryLogEvery == 0 {
		l.retryLogEvery = DefaultRetryLogEvery
	}
}

func (l *limits) validate() []error {
	var errs []error
	if math.IsNaN(l.writesPerSec) || l.writesPerSec < 0 {
		errs = append(errs, fmt.Errorf("flush: writes per second %v must be positive", l.writesPerSec))
	}
	if l.burst < 0 {
		errs = append(errs, fmt.Errorf("flush: burst %d must not be negative", l.burst))
	}
	if l.retryBackoff < 0 {
		errs = append(errs, fmt.Errorf("flush: retry backoff %v must be positive", l.retryBackoff))
	}
	if l.maxRetryBackoff < l.retryBackoff {
		errs = append(errs, fmt.Errorf("flush: max retry backoff %v is below the retry backoff %v", l.maxRetryBackoff, l.retryBackoff))
	}
	if l.retryLogEvery < 0 {
		errs = append(errs, fmt.Errorf("flush: retry log interval %v must not be negative", l.retryLogEvery))
	}
	return errs
}

// retrier returns the retrier of one run of kind, counting into count.
func (l *limits) retrier(kind string, m *metrics, count *int) *retrier {
	return &retrier{clock: l.clock, base: l.retryBackoff, max: l.maxRetryBackoff, logEvery: l.retryLogEvery,
		logger: l.logger, kind: kind, m: m, count: count}
}

// EnsureDefaults fills in the defaults of unset optional fields.
func (o *Options) EnsureDefaults() {
	l := o.limits()
	l.ensureDefaults()
	o.WritesPerSec, o.Burst, o.Clock, o.Logger = l.writesPerSec, l.burst, l.clock, l.logger
	o.RetryBackoff, o.MaxRetryBackoff, o.RetryLogEvery = l.retryBackoff, l.maxRetryBackoff, l.retryLogEvery
}

// Validate reports every problem with the options, not just the first.
func (o *Options) Validate() error {
	var errs []error
	if o.Restored < 0 {
		errs = append(errs, fmt.Errorf("flush: restored checkpoint %d must not be negative", o.Restored))
	}
	if o.High < o.Restored {
		errs = append(errs, fmt.Errorf("flush: high epoch %d is below the restored checkpoint %d", o.High, o.Restored))
	}
	if o.Gen < 0 {
		errs = append(errs, fmt.Errorf("flush: generation %d must not be negative", o.Gen))
	}
	if o.Fence < 0 {
		errs = append(errs, fmt.Errorf("flush: fence %d must not be negative", o.Fence))
	}
	if o.RewriteEpoch != 0 && o.RewriteEpoch < o.Restored {
		errs = append(errs, fmt.Errorf("flush: rewrite epoch %d is below the restored checkpoint %d", o.RewriteEpoch, o.Restored))
	}
	l := o.limits()
	errs = append(errs, l.validate()...)
	return errors.Join(errs...)
}

func (o *Options) limits() limits {
	return limits{writesPerSec: o.WritesPerSec, burst: o.Burst, clock: o.Clock, logger: o.Logger,
		retryBackoff: o.RetryBackoff, maxRetryBackoff: o.MaxRetryBackoff, retryLogEvery: o.RetryLogEvery}
}

// EnsureDefaults fills in the defaults of unset optional fields.
func (o *SweepOptions) EnsureDefaults() {
	l := o.limits()
	l.ensureDefaults()
	o.WritesPerSec, o.Burst, o.Clock, o.Logger = l.writesPerSec, l.burst, l.clock, l.logger
	o.RetryBackoff, o.MaxRetryBackoff, o.RetryLogEvery = l.retryBackoff, l.maxRetryBackoff, l.retryLogEvery
}

// Validate reports every problem with the options, not just the first.
func (o *SweepOptions) Validate() error {
	var errs []error
	if o.Gen < 0 {
		errs = append(errs, fmt.Errorf("flush: sweep generation %d must not be negative", o.Gen))
	}
	if o.Since < 0 {
		errs = append(errs, fmt.Errorf("flush: sweep savepoint %d must not be negative", o.Since))
	}
	if o.High < o.Since {
		errs = append(errs, fmt.Errorf("flush: sweep high epoch %d is below the savepoint %d", o.High, o.Since))
	}
	switch {
	case o.Fence < 0:
		errs = append(errs, fmt.Errorf("flush: sweep fence %d must not be negative", o.Fence))
	case o.FenceGen == 0 && o.Fence != 0:
		errs = append(errs, fmt.Errorf("flush: sweep fence %d without the sweeping job's generation (FenceGen)", o.Fence))
	case o.FenceGen != 0 && o.FenceGen <= o.Gen:
		errs = append(errs, fmt.Errorf("flush: sweep fence generation %d is not above the swept generation %d", o.FenceGen, o.Gen))
	}
	l := o.limits()
	errs = append(errs, l.validate()...)
	return errors.Join(errs...)
}

func (o *SweepOptions) limits() limits {
	return limits{writesPerSec: o.WritesPerSec, burst: o.Burst, clock: o.Clock, logger: o.Logger,
		retryBackoff: o.RetryBackoff, maxRetryBackoff: o.MaxRetryBackoff, retryLogEvery: o.RetryLogEvery}
}
