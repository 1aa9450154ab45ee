package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
)

// TestKinesisClientHasOneRetryLayer: the CLI's Kinesis client does not
// retry on its own, so a call that keeps failing is made exactly as many
// times as the package's own bound says. (With the SDK's standard
// retryer on as well, each of the package's attempts was three calls, and
// a reader took minutes instead of seconds to give up.)
func TestKinesisClientHasOneRetryLayer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		typ    string
	}{
		{"server_error", http.StatusInternalServerError, "InternalFailure"},
		{"throttled", http.StatusBadRequest, "ProvisionedThroughputExceededException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutRecords") {
					calls.Add(1)
				}
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				w.Header().Set("X-Amzn-ErrorType", tc.typ)
				w.WriteHeader(tc.status)
				w.Write([]byte(`{"__type":"` + tc.typ + `","message":"try again"}`))
			}))
			t.Cleanup(srv.Close)
			newKinesisHTTP(t, &kinesisHTTP{}) // the SDK's environment, pointed below at srv
			t.Setenv("AWS_ENDPOINT_URL_KINESIS", srv.URL)
			unsetenv(t, "AWS_MAX_ATTEMPTS") // the SDK's default retry settings
			api, err := newKinesisClient(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			const attempts = 4
			began := time.Now()
			err = kinesis.PutWith(context.Background(), api, "clicks", []kinesis.PutRecord{{Data: []byte("x"), PartitionKey: "k"}},
				kinesis.PutOptions{MaxAttempts: attempts, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), "after 4 attempts") {
				t.Fatalf("got %v, want a failure after 4 attempts", err)
			}
			if got := calls.Load(); got != attempts {
				t.Errorf("got %d PutRecords calls, want %d: one retry layer", got, attempts)
			}
			if d := time.Since(began); d > 2*time.Second {
				t.Errorf("gave up after %v, want well under a second with 1-2 ms backoff", d)
			}
		})
	}
}
