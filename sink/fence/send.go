package fence

import "context"

// fenceKey is the context key under which Run passes its Fence to the
// clients' last middleware (package awsfence).
type fenceKey struct{}

// FromContext returns the Fence that Run gave a write's context, if any:
// a client checks it again right before it sends each request
// (awsfence.CheckBeforeSend).
func FromContext(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
