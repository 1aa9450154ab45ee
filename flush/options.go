package flush

import (
	"errors"
	"fmt"
	"log/slog"
	"math"

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
	// Logger receives one line per run. Default: discard.
	Logger *slog.Logger
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
	// WritesPerSec, Burst, Clock, Registerer and Logger are as in Options.
	WritesPerSec float64
	Burst        int
	Clock        Clock
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
}

// limits holds the options the two drivers share.
type limits struct {
	writesPerSec float64
	burst        int
	clock        Clock
	logger       *slog.Logger
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
}

func (l *limits) validate() []error {
	var errs []error
	if math.IsNaN(l.writesPerSec) || l.writesPerSec < 0 {
		errs = append(errs, fmt.Errorf("flush: writes per second %v must be positive", l.writesPerSec))
	}
	if l.burst < 0 {
		errs = append(errs, fmt.Errorf("flush: burst %d must not be negative", l.burst))
	}
	return errs
}

// EnsureDefaults fills in the defaults of unset optional fields.
func (o *Options) EnsureDefaults() {
	l := o.limits()
	l.ensureDefaults()
	o.WritesPerSec, o.Burst, o.Clock, o.Logger = l.writesPerSec, l.burst, l.clock, l.logger
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
	l := o.limits()
	errs = append(errs, l.validate()...)
	return errors.Join(errs...)
}

func (o *Options) limits() limits {
	return limits{writesPerSec: o.WritesPerSec, burst: o.Burst, clock: o.Clock, logger: o.Logger}
}

// EnsureDefaults fills in the defaults of unset optional fields.
func (o *SweepOptions) EnsureDefaults() {
	l := o.limits()
	l.ensureDefaults()
	o.WritesPerSec, o.Burst, o.Clock, o.Logger = l.writesPerSec, l.burst, l.clock, l.logger
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
	l := o.limits()
	errs = append(errs, l.validate()...)
	return errors.Join(errs...)
}

func (o *SweepOptions) limits() limits {
	return limits{writesPerSec: o.WritesPerSec, burst: o.Burst, clock: o.Clock, logger: o.Logger}
}
