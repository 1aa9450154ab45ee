package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/windowing"
)

// Defaults of Options.
const (
	DefaultDuration = 30 * time.Second
	// MinDuration is the shortest Duration Validate accepts: a renewal
	// every MinDuration/3 still leaves a DynamoDB round trip room.
	MinDuration = 30 * time.Millisecond
	// TableSuffix is appended to the rows table's name to name the lease
	// table by default (adclick setup and run: "<table>-leases").
	TableSuffix = "-leases"
)

// DefaultTable returns the default lease table next to the rows table
// rows: rows + TableSuffix.
func DefaultTable(rows string) string { return rows + TableSuffix }

// Options configures Acquire. The zero value of each optional field selects
// its default; Table and Job are required.
type Options struct {
	// Table is the lease table (key lease_key, a string; CreateTable makes
	// it). Required.
	Table string
	// Job names the job: every process that writes as this job (the same
	// checkpoints, the same rows) must use the same name, and no other job
	// may. Required; at most 1,000 bytes of UTF-8.
	Job string
	// KeyGroupFrom and KeyGroupTo are the range of key groups the lease
	// covers, [KeyGroupFrom, KeyGroupTo), within
	// [0, windowing.MaxParallelism). Both zero means the whole job, which is
	// what a single-worker job holds. Leases of different ranges never exclude each other: the
	// workers of one job must agree on how the key groups are divided.
	KeyGroupFrom, KeyGroupTo int
	// Owner identifies this holder in the table (and to operators). It must
	// be unique per Acquire across every process that may take the lease:
	// an item whose owner equals it is treated as this holder's own write.
	// Default "<host>-<pid>-<8 random hex digits>".
	Owner string
	// Duration is the lease duration D: the holder renews every D/3; its
	// Check passes for 2D/3 after the last successful renewal; a taker
	// declares a holder dead after watching its counter not move for D (or
	// the holder's own duration, if that is longer). Every process of a
	// job should use the same value. Default 30 s; at least MinDuration.
	Duration time.Duration
	// Clock is the monotonic clock every decision is timed with, and the
	// wall clock of the informational renewed_at. Default SystemClock().
	Clock Clock
	// Logger receives acquisitions, takeovers, failed renewals (at most one
	// line per renewal period) and the loss of the lease. Default: discard.
	Logger *slog.Logger
	// Registerer receives the metrics (renewals, renewal failures,
	// takeovers, losses, labelled with the lease key); nil registers none.
	// Metrics already registered by an earlier Acquire are reused.
	Registerer prometheus.Registerer
}

// EnsureDefaults sets every zero optional field to its default and returns
// o.
func (o *Options) EnsureDefaults() *Options {
	if o.KeyGroupFrom == 0 && o.KeyGroupTo == 0 {
		o.KeyGroupTo = windowing.MaxParallelism
	}
	if o.Owner == "" {
		o.Owner = NewOwner()
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Validate reports every problem with o (joined), or nil.
func (o *Options) Validate() error {
	errs := checkTableAndJob(o.Table, o.Job)
	if o.KeyGroupFrom < 0 || o.KeyGroupTo > windowing.MaxParallelism || o.KeyGroupFrom >= o.KeyGroupTo {
		errs = append(errs, fmt.Errorf("lease: key groups [%d, %d) must be a non-empty range within [0, %d)", o.KeyGroupFrom, o.KeyGroupTo, windowing.MaxParallelism))
	}
	if o.Owner == "" || len(o.Owner) > 512 || !utf8.ValidString(o.Owner) {
		errs = append(errs, fmt.Errorf("lease: owner %q must be 1 to 512 bytes of UTF-8", o.Owner))
	}
	if o.Duration < MinDuration {
		errs = append(errs, fmt.Errorf("lease: duration %v must be at least %v", o.Duration, MinDuration))
	}
	if o.Clock == nil {
		errs = append(errs, errors.New("lease: no clock"))
	}
	if o.Logger == nil {
		errs = append(errs, errors.New("lease: no logger"))
	}
	return errors.Join(errs...)
}

// Key returns the lease key of o's job and range: "<job>#kg<from>-<to>".
func (o *Options) Key() string {
	return o.Job + "#kg" + strconv.Itoa(o.KeyGroupFrom) + "-" + strconv.Itoa(o.KeyGroupTo)
}

// NewOwner returns a fresh owner string, "<host>-<pid>-<8 random hex
// digits>": unique per call, and telling an operator where the holder runs.
func NewOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Clock is the lease's time. Every decision (when to renew, whether Check
// passes, how long a taker watches) uses Now, a monotonic clock that also
// counts the time the machine is suspended (see SystemClock), so that a
// wall clock set forwards or back cannot shorten or stretch a lease; Wall is
// only written to the item's renewed_at for operators. Implementations must
// be safe for concurrent use.
type Clock interface {
	// Now returns the time elapsed since a fixed, arbitrary origin on a
	// monotonic clock.
	Now() time.Duration
	// Wall returns the wall-clock time.
	Wall() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the process's clocks: Now is the time elapsed since
// the call, on Go's monotonic clock or on the boot-time clock
// (bootClock), whichever has advanced more; Wall is time.Now. Go's
// monotonic clock stops while a Linux machine is suspended (a paused VM,
// a laptop's lid): timed by it alone, a holder resumed after a suspend
// longer than the lease would find its lease still valid and write,
// although another worker may have taken it meanwhile. The boot-time clock
// counts the suspend, so the holder's Check fails at once.
func SystemClock() Clock {
	origin := time.Now()
	return newSystemClock(func() time.Duration { return time.Since(origin) }, bootClock)
}

// newSystemClock returns the clock whose Now is the larger advance of
// mono (time elapsed since an origin) and boot (a reading of a clock
// that counts suspends, if ok) since this call.
func newSystemClock(mono func() time.Duration, boot func() (time.Duration, bool)) Clock {
	c := &systemClock{mono: mono, boot: boot, mono0: mono()}
	c.boot0, c.hasBoot = boot()
	return c
}

type systemClock struct {
	mono    func() time.Duration
	boot    func() (time.Duration, bool)
	mono0   time.Duration
	boot0   time.Duration
	hasBoot bool
}

// Now never goes back: both readings only rise, and so does their max.
func (c *systemClock) Now() time.Duration {
	d := c.mono() - c.mono0
	if b, ok := c.boot(); ok && c.hasBoot {
		d = max(d, b-c.boot0)
	}
	return d
}

func (*systemClock) Wall() time.Time { return time.Now() }

func (*systemClock) Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, d) }

// checkTableAndJob reports the problems with a lease table's name and a
// job's name, which every lease item's key starts with.
func checkTableAndJob(table, job string) []error {
	var errs []error
	if !tableName.MatchString(table) {
		errs = append(errs, fmt.Errorf("lease: table name %q must be 3 to 255 characters of a-z, A-Z, 0-9, '_', '-', '.'", table))
	}
	if job == "" {
		errs = append(errs, errors.New("lease: job name is empty"))
	} else if len(job) > 1000 || !utf8.ValidString(job) {
		errs = append(errs, fmt.Errorf("lease: job name %q must be at most 1,000 bytes of UTF-8", job))
	}
	return errs
}
