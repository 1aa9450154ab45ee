package dynamo

import (
	"errors"
	"fmt"
)

// TransientError is what the Store returns when a request kept failing
// with a retryable error (throttling, a 5xx response, a transport failure,
// a response cut short) for Options.MaxAttempts attempts. Err is the last
// attempt's error. Waiting longer may succeed: callers that can wait (the
// flush) retry such errors; callers that cannot return them.
//
// Transient reports true, so packages that must not import this one test
// for it with an interface:
//
//	var t interface{ Transient() bool }
//	if errors.As(err, &t) && t.Transient() { ... }
type TransientError struct {
	Attempts int
	Err      error
}

// Error keeps the wording of the retry loop: "gave up after N attempts: …".
func (e *TransientError) Error() string {
	return fmt.Sprintf("gave up after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error, so errors.As still finds the
// SDK's typed errors.
func (e *TransientError) Unwrap() error { return e.Err }

// Transient reports true: the failure may pass if the caller waits.
func (e *TransientError) Transient() bool { return true }

// IsTransient reports whether err is, or wraps, a failure worth waiting
// out: a *TransientError from the Store, or an SDK error the Store would
// retry (throttling, 5xx, transport, a response cut short). A refused
// condition, a validation error and a context's end are not.
func IsTransient(err error) bool {
	var te *TransientError
	if errors.As(err, &te) {
		return true
	}
	switch classify(err) {
	case classThrottled, classTransient:
		return true
	}
	return false
}
