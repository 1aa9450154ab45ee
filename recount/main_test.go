package recount

import (
	"testing"

	"go.uber.org/goleak"
)

// The S3 client's idle keep-alive connections (integration tests) are not
// leaks of this package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}
