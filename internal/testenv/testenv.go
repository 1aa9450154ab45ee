// Package testenv gives integration tests the addresses of the local servers
// that stand in for AWS and Valkey. The servers are installed and started by
// scripts/test.sh (the README's test command), which exports:
//
//	AWS_ENDPOINT_URL_KINESIS   kinesalite
//	AWS_ENDPOINT_URL_DYNAMODB  dynalite
//	AWS_ENDPOINT_URL_S3        s3rver
//	ADCLICK_TEST_VALKEY        redis-server, as host:port
//
// Integration tests carry the build tag "integration". A test that needs a
// server fails, never skips, when the server is not configured or not
// reachable: in CI a missing server is a failure.
//
// It also holds small input builders that tests of several packages share
// (ClickLine, SizedClickLine).
package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Kinesis returns the Kinesis endpoint URL.
func Kinesis(t testing.TB) string { return endpoint(t, "AWS_ENDPOINT_URL_KINESIS") }

// DynamoDB returns the DynamoDB endpoint URL.
func DynamoDB(t testing.TB) string { return endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB") }

// S3 returns the S3 endpoint URL.
func S3(t testing.TB) string { return endpoint(t, "AWS_ENDPOINT_URL_S3") }

// Valkey returns the Valkey (Redis protocol) address, host:port.
func Valkey(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("ADCLICK_TEST_VALKEY")
	if addr == "" {
		t.Fatalf("testenv: ADCLICK_TEST_VALKEY is not set; run the suite with scripts/test.sh")
	}
	dial(t, "ADCLICK_TEST_VALKEY", addr)
	return addr
}

func endpoint(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("testenv: %s is not set; run the suite with scripts/test.sh", env)
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		t.Fatalf("testenv: %s=%q is not a URL", env, v)
	}
	dial(t, env, u.Host)
	return v
}

func dial(t testing.TB, env, hostport string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostport, 2*time.Second)
	if err != nil {
		t.Fatalf("testenv: %s: server at %s is not reachable: %v", env, hostport, err)
	}
	c.Close()
}
