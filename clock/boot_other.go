//go:build !linux

package clock

import "time"

// Boot reports false: outside Linux there is no boot-time clock to read,
// and Go's monotonic clock is used alone.
func Boot() (time.Duration, bool) { return 0, false }
