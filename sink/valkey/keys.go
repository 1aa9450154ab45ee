package valkey

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/adclick/adclick/sink"
)

const (
	minuteLayout = "2006-01-02T15:04Z"
	hourLayout   = "2006-01-02T15Z"

	minuteMs = int64(time.Minute / time.Millisecond)
	hourMs   = int64(time.Hour / time.Millisecond)

	// maxStartMs is 10000-01-01T00:00Z: starts from 1970 to year 9999
	// format to a fixed width.
	maxStartMs = int64(253402300800000)

	fieldValid = "valid"
	fieldSpend = "spend_micros"
	fieldCkpt  = "ckpt"
	fieldGen   = "gen"
	fieldFence = "fence"
)

// ErrBadTotal marks a total or key the store cannot represent: a start that
// is not a whole minute (hour) in years 1970..9999, or a stored member that
// is not a total key under the prefix.
var ErrBadTotal = errors.New("valkey: bad total")

// keys builds and parses the store's key names under one prefix, and the
// epoch bookkeeping's in one index scope ("" unscoped).
type keys struct{ prefix, scope string }

// checkStart reports whether startMs is the start of a minute (or of an hour)
// in the range the key names can hold.
func checkStart(startMs int64, hour bool) error {
	if startMs < 0 || startMs >= maxStartMs {
		return fmt.Errorf("%w: start %d ms outside 1970..9999", ErrBadTotal, startMs)
	}
	unit, what := minuteMs, "minute"
	if hour {
		unit, what = hourMs, "hour"
	}
	if startMs%unit != 0 {
		return fmt.Errorf("%w: start %d ms is not the start of its %s", ErrBadTotal, startMs, what)
	}
	return nil
}

// total returns the key of a total: <p>:m:{<ad>}:<YYYY-MM-DDTHH:MMZ> or
// <p>:h:{<ad>}:<YYYY-MM-DDTHHZ>.
func (k keys) total(t sink.TotalKey) (string, error) {
	if err := checkStart(t.StartMs, t.Hour); err != nil {
		return "", err
	}
	kind, layout := ":m:{", minuteLayout
	if t.Hour {
		kind, layout = ":h:{", hourLayout
	}
	return k.prefix + kind + t.Ad + "}:" + time.UnixMilli(t.StartMs).UTC().Format(layout), nil
}

// parseTotal is the inverse of total. The timestamp has a fixed width, so
// the ad is whatever lies between "{" and the final "}:<time>", even when
// the ad itself contains "}:".
func (k keys) parseTotal(s string) (sink.TotalKey, error) {
	var (
		hour   bool
		layout string
		rest   string
		ok     bool
	)
	if rest, ok = strings.CutPrefix(s, k.prefix+":m:{"); ok {
		layout = minuteLayout
	} else if rest, ok = strings.CutPrefix(s, k.prefix+":h:{"); ok {
		hour, layout = true, hourLayout
	} else {
		return sink.TotalKey{}, fmt.Errorf("%w: key %q is not a total under prefix %q", ErrBadTotal, s, k.prefix)
	}
	n := len(rest) - len(layout) - len("}:")
	if n < 0 || rest[n:n+2] != "}:" {
		return sink.TotalKey{}, fmt.Errorf("%w: key %q has no time", ErrBadTotal, s)
	}
	tm, err := time.Parse(layout, rest[n+2:])
	if err != nil {
		return sink.TotalKey{}, fmt.Errorf("%w: key %q: %v", ErrBadTotal, s, err)
	}
	return sink.TotalKey{Ad: rest[:n], StartMs: tm.UnixMilli(), Hour: hour}, nil
}

// epoch returns the key of the set of total keys written under e:
// <p>:ep:<e>, or <p>:ep:<scope>:<e> in a scope. A scope holds no ':' and
// an epoch is a decimal, so the two never collide.
func (k keys) epoch(e int64) string {
	if k.scope == "" {
		return k.prefix + ":ep:" + strconv.FormatInt(e, 10)
	}
	return k.prefix + ":ep:" + k.scope + ":" + strconv.FormatInt(e, 10)
}

// epochs returns the key of the sorted set of epochs that have a set
// (member: the epoch in decimal, score: the epoch): <p>:epochs, or
// <p>:epochs:<scope> in a scope.
func (k keys) epochs() string {
	if k.scope == "" {
		return k.prefix + ":epochs"
	}
	return k.prefix + ":epochs:" + k.scope
}
