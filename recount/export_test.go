package recount

// The lake's own test helpers, for the tests of its S3 store in package
// recount_test (the S3 store is package s3lake, which imports recount).
var (
	TestStore      = testStore
	GenLines       = genLines
	Reference      = reference
	SimulateStream = simulateStream
	RefHours       = refHours
	Finals         = finals
	CompareFinals  = compareFinals
	ObjectEpoch    = objectEpoch
	ManifestEpoch  = func(k string) (int64, bool) { return manifestEpoch(manifestRoot, k) }
	Forever        = forever
)
