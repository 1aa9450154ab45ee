package fence

import (
	"context"

	"github.com/aws/smithy-go/middleware"
)

// fenceKey is the context key under which Run passes its Fence to the
// clients' last middleware (CheckBeforeSend).
type fenceKey struct{}

// CheckBeforeSend is an AWS SDK API option (dynamodb.Options.APIOptions,
// s3.Options.APIOptions) that checks, as the last step before each
// attempt of a request is sent (after its retry loop and its signature),
// the Fence that Run gave the request's context, and fails the attempt
// with the fence's error when the holder has lost its lease. Run checks
// before the write starts; this check is made again for every attempt,
// after every wait of the client (connection pool, rate limit, retry
// backoff, signing), so that a holder paused inside the write does not
// send once it has lost its lease (docs/scale-out.md §6.5.3). A pause
// between this check and the bytes leaving the process is not covered:
// the stores' own conditions and the fence sweep cover it.
func CheckBeforeSend(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("adclick/FenceCheckBeforeSend",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			if f, ok := ctx.Value(fenceKey{}).(Fence); ok {
				if err := f.Check(); err != nil {
					return middleware.DeserializeOutput{}, middleware.Metadata{}, err
				}
			}
			return next.HandleDeserialize(ctx, in)
		}), middleware.After)
}
