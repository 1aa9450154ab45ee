// Package sinktest holds the conformance suites that every implementation of
// the sink store contracts runs, and a small in-memory reference
// implementation of sink.Rows.
//
// An adapter's test calls the suite with a constructor that returns a fresh,
// empty store for each subtest:
//
//	func TestConformance(t *testing.T) {
//		sinktest.Rows(t, func(t *testing.T) sink.Rows { return newEmptyStore(t) })
//	}
//
// The suites check the contract written in the doc comments of package sink
// (tagged writes, job_gen and lease-fence fencing, the closed-row
// condition, the tag index, per-writer removal and deletion), with expected
// values written out by hand rather than computed by a second
// implementation. They need no server: the
// adapter under test supplies the store.
//
// NewMemRows is production-quality but unpersisted: use it in unit tests of
// packages that need a sink.Rows, and as a reference when reading the suite.
package sinktest
