package kinesis

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// NewClient returns a Kinesis client for this package with the SDK's own
// retries off (aws.NopRetryer): every call the package makes is retried
// once, by the package, with its own bounds — a reader's or the shard
// listing's Options.MaxErrors, PutOptions.MaxAttempts, callAttempts for
// the calls of ShardHashKeys and EnsureStream — with jittered backoff and
// metrics. The SDK's standard retryer on top would multiply every bound by
// its 3 attempts, each with its own backoff, and add its client-side retry
// quota, which fails calls outright under sustained throttling.
//
// optFns are applied last. The endpoint comes from cfg as usual (for a
// local stand-in, AWS_ENDPOINT_URL_KINESIS or cfg.BaseEndpoint).
func NewClient(cfg aws.Config, optFns ...func(*kinesis.Options)) *kinesis.Client {
	fns := []func(*kinesis.Options){func(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} }}
	return kinesis.NewFromConfig(cfg, append(fns, optFns...)...)
}

// Bounds of retryCall: the same as PutOptions' defaults.
const (
	callAttempts    = 10
	callBackoffBase = 100 * time.Millisecond
	callBackoffMax  = 5 * time.Second
)

// retryCall calls fn until it succeeds, returns a fatal error (see
// classify), or has failed callAttempts times (throttling included), with
// jittered backoff between attempts. It returns fn's last error.
func retryCall(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || classify(err) == errFatal || attempt >= callAttempts || ctx.Err() != nil {
			return err
		}
		if !sleep(ctx, backoff(callBackoffBase, callBackoffMax, attempt)) {
			return err
		}
	}
}
