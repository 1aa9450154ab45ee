package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/sink"
)

// TestGivingUpIsTransient: once its attempts are spent on a retryable
// error, every call returns an error that says it is transient, in the way
// the flush tests for (without importing this package), and that still
// wraps the SDK's typed error. A fatal error and a cancelled context are
// not transient.
func TestGivingUpIsTransient(t *testing.T) {
	unavailable := sdkErr("X", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"})
	throttled := sdkErr("X", 400, &types.ThrottlingException{})
	f := &fakeAPI{
		update: func(context.Context, *dynamodb.UpdateItemInput) error { return throttled },
		get: func(context.Context, *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return nil, unavailable
		},
		query: func(context.Context, *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) { return nil, unavailable },
		scan:  func(context.Context, *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) { return nil, unavailable },
		del:   func(context.Context, *dynamodb.DeleteItemInput) error { return unavailable },
	}
	s := newStore(t, f, fastRetry)
	ctx := context.Background()
	none := func(sink.Item) error { return nil }
	calls := map[string]func() error{
		"Put":        func() error { _, err := s.Put(ctx, []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}}); return err },
		"Get":        func() error { _, _, err := s.Get(ctx, k1); return err },
		"QueryIndex": func() error { return s.QueryIndex(ctx, sink.Fast, "41#0", none) },
		"Scan":       func() error { return s.Scan(ctx, none) },
		"Remove":     func() error { _, err := s.Remove(ctx, k1, sink.Fast, 41); return err },
		"Delete":     func() error { _, _, err := s.Delete(ctx, k1, sink.Fast, 41); return err },
	}
	for name, call := range calls {
		err := call()
		var te *TransientError
		if !errors.As(err, &te) || te.Attempts != fastRetry.MaxAttempts {
			t.Errorf("%s = %v, want a *TransientError after %d attempts", name, err, fastRetry.MaxAttempts)
			continue
		}
		if !IsTransient(err) || !flush.IsTransient(err) {
			t.Errorf("%s: IsTransient = %v, flush.IsTransient = %v; want both true", name, IsTransient(err), flush.IsTransient(err))
		}
		var re *smithyhttp.ResponseError
		if !errors.As(err, &re) {
			t.Errorf("%s = %v, want it to wrap the SDK's response error", name, err)
		}
		if !strings.Contains(err.Error(), "gave up after 5 attempts: ") {
			t.Errorf("%s: error %q lacks \"gave up after 5 attempts\"", name, err)
		}
	}

	fatal := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
		return sdkErr("UpdateItem", 400, &smithy.GenericAPIError{Code: "ValidationException"})
	}}
	_, err := newStore(t, fatal, fastRetry).Put(ctx, []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}})
	if err == nil || IsTransient(err) || flush.IsTransient(err) {
		t.Errorf("Put refused by validation = %v, want a non-transient error", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	slow := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { cancel(); return throttled }}
	_, err = newStore(t, slow, fastRetry).Put(cctx, []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}})
	if !errors.Is(err, context.Canceled) || IsTransient(err) || flush.IsTransient(err) {
		t.Errorf("Put with its context cancelled = %v, want context.Canceled, not transient", err)
	}
}

// TestIsTransient: the classifier on raw SDK errors agrees with the retry
// loop's classes.
func TestIsTransient(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"throttling", sdkErr("Query", 400, &types.ProvisionedThroughputExceededException{}), true},
		{"503", sdkErr("Query", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), true},
		{"transport", sendErr("Query", errors.New("connection reset")), true},
		{"conditional check", sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{}), false},
		{"validation", sdkErr("UpdateItem", 400, &smithy.GenericAPIError{Code: "ValidationException"}), false},
		{"deadline", context.DeadlineExceeded, false},
		{"nil", nil, false},
	} {
		if got := IsTransient(c.err); got != c.want {
			t.Errorf("IsTransient(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
