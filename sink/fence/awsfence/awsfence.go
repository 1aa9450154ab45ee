// Package awsfence checks a write's lease once more in the AWS SDK
// clients, after signing and right before each request is sent
// (docs/scale-out.md §6.5.3). It is apart from package fence so that the
// runtime, which uses fence, does not reach the SDK.
package awsfence

import (
	"context"

	"github.com/aws/smithy-go/middleware"

	"github.com/adclick/adclick/sink/fence"
)

// CheckBeforeSend is an AWS SDK API option (dynamodb.Options.APIOptions,
// s3.Options.APIOptions) that checks, as the last step before each
// attempt of a request is sent (after its retry loop and its signature),
// the Fence that fence.Run gave the request's context, and fails the
// attempt with the fence's error when the holder has lost its lease.
// fence.Run checks before the write starts; this check is made again for
// every attempt, after every wait of the client (connection pool, rate
// limit, retry backoff, signing), so that a holder paused inside the
// write does not send once it has lost its lease. A pause between this
// check and the bytes leaving the process is not covered: the stores' own
// conditions cover it.
func CheckBeforeSend(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("adclick/FenceCheckBeforeSend",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			if f, ok := fence.FromContext(ctx); ok {
				if err := f.Check(); err != nil {
					return middleware.DeserializeOutput{}, middleware.Metadata{}, err
				}
			}
			return next.HandleDeserialize(ctx, in)
		}), middleware.After)
}
