package lease

import (
	"context"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// callTimeout bounds every lease-table call of a lease of duration d: a
// quarter of it, below the renewal period d/3, so that a call that hangs
// (a stalled connection, an SDK client without a response timeout) ends
// before the next renewal is due and cannot hold the lease past its
// validity.
func callTimeout(d time.Duration) time.Duration { return max(d/4, time.Millisecond) }

// timed is an API whose every call carries a deadline of at most d.
type timed struct {
	api API
	d   time.Duration
}

func (t timed) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.api.GetItem(ctx, in, opt...)
}

func (t timed) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.api.UpdateItem(ctx, in, opt...)
}

func (t timed) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opt ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.api.CreateTable(ctx, in, opt...)
}

func (t timed) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opt ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.api.DescribeTable(ctx, in, opt...)
}

// timedRange is a RangeAPI whose every call (each page of a scan) carries
// a deadline of at most d.
type timedRange struct {
	timed
	scan RangeAPI
}

func newTimedRange(api RangeAPI, d time.Duration) timedRange {
	return timedRange{timed: timed{api: api, d: d}, scan: api}
}

func (t timedRange) Scan(ctx context.Context, in *dynamodb.ScanInput, opt ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.scan.Scan(ctx, in, opt...)
}

// ClientOptions returns the option of a DynamoDB client for a lease
// table whose leases last d: an HTTP client that gives up on a response
// not begun within callTimeout(d), below the renewal period, so that a
// connection that stopped answering fails the call (and the renewal is
// retried on another) instead of holding it. Every call carries a context
// deadline as well; this bounds what the deadline cannot see, a dead
// connection the SDK keeps reading from. A d of zero is DefaultDuration.
func ClientOptions(d time.Duration) func(*dynamodb.Options) {
	if d <= 0 {
		d = DefaultDuration
	}
	hc := awshttp.NewBuildableClient().WithTimeout(callTimeout(d)).WithTransportOptions(func(tr *http.Transport) {
		tr.ResponseHeaderTimeout = callTimeout(d)
	})
	return func(o *dynamodb.Options) { o.HTTPClient = hc }
}
