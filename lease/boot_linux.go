package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock returns the time since the machine booted, suspends included
// (CLOCK_BOOTTIME), and true; false if the clock cannot be read. Unlike
// Go's monotonic clock (CLOCK_MONOTONIC on Linux), it does not stop while
// the machine is suspended, so a lease timed by it lapses during a
// suspend as it does for every other machine.
func bootClock() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
