//go:build integration

package main

import "testing"

// awsSlots bounds how many of this package's tests use the AWS stand-ins
// at once, whatever -parallel is: dynalite serves one request at a time,
// and with three of this package's stand-in tests beside another package's
// on a loaded machine, a lease read passed its deadline (a quarter of the
// lease). At the default -parallel (GOMAXPROCS, 2 here) it never waits.
var awsSlots = make(chan struct{}, 2)

// awsSlot waits for one of awsSlots and gives it back when t and its
// subtests are done. Call it right after t.Parallel.
func awsSlot(t *testing.T) {
	t.Helper()
	awsSlots <- struct{}{}
	t.Cleanup(func() { <-awsSlots })
}
