package flush

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Defaults of the retry options.
const (
	DefaultRetryBackoff    = 500 * time.Millisecond
	DefaultMaxRetryBackoff = 30 * time.Second
	DefaultRetryLogEvery   = 10 * time.Second
)

// transient is the method by which a store marks an error as worth waiting
// out. sink/dynamo's errors for throttling, 5xx responses, timeouts and
// responses cut short, returned once its own attempts are spent, have it.
type transient interface {
	Transient() bool
}

// IsTransient reports whether err is a store failure worth waiting out: an
// error in its chain has a method Transient() bool that returns true. A
// refused condition, a validation error, a context's end and any error
// that does not say so are not transient.
func IsTransient(err error) bool {
	var t transient
	return errors.As(err, &t) && t.Transient()
}

// retrier waits out transient row-store errors for one driver run: it
// sends a call again after a capped, jittered exponential backoff on the
// run's clock, until the call succeeds, fails otherwise, or ctx ends. It
// counts the retries and logs at most once per logEvery. Not safe for
// concurrent use (a run is one goroutine).
type retrier struct {
	clock    Clock
	base     time.Duration
	max      time.Duration
	logEvery time.Duration
	logger   *slog.Logger
	kind     string // "flush", "sweep", "rebuild": the metric label
	m        *metrics
	count    *int // the Report's Retries

	lastLog time.Time
	logged  bool
	quiet   int // retries since the last log line
}

// do runs call, and runs it again after every transient error. op names the
// call in the metric and the log ("put", "query", ...). Every call the
// drivers make is safe to repeat: writes are absolute, tagged SETs or
// conditional removes, and a repeated read returns what the store holds.
func (r *retrier) do(ctx context.Context, op string, call func() error) error {
	for retry := 1; ; retry++ {
		err := call()
		if err == nil || !IsTransient(err) || ctx.Err() != nil {
			return err
		}
		*r.count++
		r.m.retries.WithLabelValues(r.kind, op).Inc()
		r.log(op, retry, err)
		if serr := r.clock.Sleep(ctx, backoff(r.base, r.max, retry)); serr != nil {
			return fmt.Errorf("%w (while waiting out: %w)", serr, err)
		}
	}
}

// log writes one line about retries unless one was written less than
// logEvery ago; the line counts the retries it stands for.
func (r *retrier) log(op string, retry int, err error) {
	r.quiet++
	now := r.clock.Now()
	if r.logged && now.Sub(r.lastLog) < r.logEvery {
		return
	}
	r.logger.Warn(r.kind+": row store failing transiently; waiting it out",
		"op", op, "retry", retry, "retries_since_last_log", r.quiet, "err", err)
	r.logged, r.lastLog, r.quiet = true, now, 0
}

// backoff returns the wait before retry number n (1 for the first):
// d = min(max, base·2^(n-1)), drawn uniformly from [d/2, d].
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(d-half+1)
}
