//go:build integration

package main

import "testing"

// awsSlots bounds how many of this package's tests use the AWS stand-ins
// at once. The package runs testParallel tests at once, most of them
// crash campaigns on the embedded stores; the ones on the stand-ins stay at
// two, as at -parallel 2, because dynalite serves one request at a time and
// a third fleet or lease test beside another package's (on a loaded
// machine) took a lease read past its deadline (a quarter of the lease).
var awsSlots = make(chan struct{}, 2)

// awsSlot waits for one of awsSlots and gives it back when t and its
// subtests are done. Call it right after t.Parallel.
func awsSlot(t *testing.T) {
	t.Helper()
	awsSlots <- struct{}{}
	t.Cleanup(func() { <-awsSlots })
}
