package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/adclick/adclick/clock"
)

// errClass is what the Store does with a failed request.
type errClass int

const (
	classFatal     errClass = iota // return the error
	classRefused                   // a condition refused the write: count it, never retry
	classThrottled                 // retry after a backoff, and count a throttle
	classTransient                 // 5xx or transport error: retry after a backoff
)

// throttleCodes are the documented DynamoDB error codes for throttling, for
// errors the SDK did not turn into a typed exception.
var throttleCodes = map[string]bool{
	"ThrottlingException":                    true,
	"ProvisionedThroughputExceededException": true,
	"RequestLimitExceeded":                   true,
}

// classify sorts an error from the SDK. Context errors are fatal: the caller
// checks its context first.
func classify(err error) errClass {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return classRefused
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return classFatal
	}
	var (
		pte *types.ProvisionedThroughputExceededException
		rle *types.RequestLimitExceeded
		thr *types.ThrottlingException
	)
	if errors.As(err, &pte) || errors.As(err, &rle) || errors.As(err, &thr) {
		return classThrottled
	}
	var api smithy.APIError
	if errors.As(err, &api) && throttleCodes[api.ErrorCode()] {
		return classThrottled
	}
	var ise *types.InternalServerError
	if errors.As(err, &ise) {
		return classTransient
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.Response != nil && resp.HTTPStatusCode() >= 500 {
		return classTransient
	}
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) {
		return classTransient
	}
	// A response cut short (the connection closed mid-body, a checksum
	// that does not match) fails in deserialization or in the network: a
	// transport failure too. Every request the Store sends is safe to
	// repeat (absolute SETs and conditional removes; reads).
	var de *smithy.DeserializationError
	var ne net.Error
	if errors.As(err, &de) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return classTransient
	}
	return classFatal
}

// backoff returns the wait before retry number n (1 for the first retry):
// d = min(max, base·2^(n-1)), drawn uniformly from [d/2, d].
func backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits d or until ctx is done.
var sleep = clock.Sleep

// errCondition marks a request refused by its condition expression.
var errCondition = errors.New("dynamo: condition failed")

// do sends one request through call, with the in-flight bound and retries.
// It returns errCondition (wrapping nothing else) when the condition
// refused the request.
func (s *Store) do(ctx context.Context, op string, call func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		start := time.Now()
		err := call(ctx)
		<-s.sem
		s.m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			if errors.Is(err, cerr) {
				return err
			}
			return fmt.Errorf("%w (last error: %v)", cerr, err)
		}
		switch classify(err) {
		case classRefused:
			return errCondition
		case classFatal:
			return err
		case classThrottled:
			s.m.throttles.WithLabelValues(op).Inc()
		}
		if attempt >= s.o.MaxAttempts {
			return &TransientError{Attempts: attempt, Err: err}
		}
		s.m.retries.WithLabelValues(op).Inc()
		if err := sleep(ctx, backoff(s.o.BaseBackoff, s.o.MaxBackoff, attempt)); err != nil {
			return err
		}
	}
}
