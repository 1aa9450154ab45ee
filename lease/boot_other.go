//go:build !linux

package lease

import "time"

// bootClock reports false: outside Linux there is no boot-time clock to read,
// and Go's monotonic clock is used alone.
func bootClock() (time.Duration, bool) { return 0, false }
