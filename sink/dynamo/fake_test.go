package dynamo

import (
	"context"
	"errors"
	"net/http"
	"sync"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// fakeAPI is an API whose methods call the hooks set by a test; a missing
// hook is an error. It records every input it is given.
type fakeAPI struct {
	update   func(ctx context.Context, in *dynamodb.UpdateItemInput) error
	get      func(ctx context.Context, in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	del      func(ctx context.Context, in *dynamodb.DeleteItemInput) error
	query    func(ctx context.Context, in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error)
	scan     func(ctx context.Context, in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error)
	create   func(ctx context.Context, in *dynamodb.CreateTableInput) error
	describe func(ctx context.Context, in *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error)
	// The TableAPI calls.
	updateTable func(ctx context.Context, in *dynamodb.UpdateTableInput) error
	describeTTL func(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput) (*dynamodb.DescribeTimeToLiveOutput, error)
	updateTTL   func(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput) error

	mu           sync.Mutex
	updates      []*dynamodb.UpdateItemInput
	deletes      []*dynamodb.DeleteItemInput
	queries      []*dynamodb.QueryInput
	scans        []*dynamodb.ScanInput
	creates      []*dynamodb.CreateTableInput
	tableUpdates []*dynamodb.UpdateTableInput
	ttlUpdates   []*dynamodb.UpdateTimeToLiveInput
}

var errNoHook = errors.New("fake: no hook for this call")

func (f *fakeAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	f.updates = append(f.updates, in)
	f.mu.Unlock()
	if f.update == nil {
		return nil, errNoHook
	}
	if err := f.update(ctx, in); err != nil {
		return nil, err
	}
	return &dynamodb.UpdateItemOutput{}, nil
}

func (f *fakeAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.get == nil {
		return nil, errNoHook
	}
	return f.get(ctx, in)
}

func (f *fakeAPI) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.mu.Lock()
	f.deletes = append(f.deletes, in)
	f.mu.Unlock()
	if f.del == nil {
		return nil, errNoHook
	}
	if err := f.del(ctx, in); err != nil {
		return nil, err
	}
	return &dynamodb.DeleteItemOutput{}, nil
}

func (f *fakeAPI) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.mu.Lock()
	f.queries = append(f.queries, in)
	f.mu.Unlock()
	if f.query == nil {
		return nil, errNoHook
	}
	return f.query(ctx, in)
}

func (f *fakeAPI) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	f.mu.Lock()
	f.scans = append(f.scans, in)
	f.mu.Unlock()
	if f.scan == nil {
		return nil, errNoHook
	}
	return f.scan(ctx, in)
}

func (f *fakeAPI) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	f.mu.Lock()
	f.creates = append(f.creates, in)
	f.mu.Unlock()
	if f.create == nil {
		return nil, errNoHook
	}
	if err := f.create(ctx, in); err != nil {
		return nil, err
	}
	return &dynamodb.CreateTableOutput{}, nil
}

func (f *fakeAPI) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	if f.describe == nil {
		return nil, errNoHook
	}
	return f.describe(ctx, in)
}

func (f *fakeAPI) UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	f.mu.Lock()
	f.tableUpdates = append(f.tableUpdates, in)
	f.mu.Unlock()
	if f.updateTable == nil {
		return nil, errNoHook
	}
	if err := f.updateTable(ctx, in); err != nil {
		return nil, err
	}
	return &dynamodb.UpdateTableOutput{}, nil
}

func (f *fakeAPI) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	if f.describeTTL == nil {
		return nil, errNoHook
	}
	return f.describeTTL(ctx, in)
}

func (f *fakeAPI) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	f.mu.Lock()
	f.ttlUpdates = append(f.ttlUpdates, in)
	f.mu.Unlock()
	if f.updateTTL == nil {
		return nil, errNoHook
	}
	if err := f.updateTTL(ctx, in); err != nil {
		return nil, err
	}
	return &dynamodb.UpdateTimeToLiveOutput{}, nil
}

// ttlOff makes f answer TTL calls as a table without TTL that accepts
// turning it on, and returns f.
func (f *fakeAPI) ttlOff() *fakeAPI {
	f.describeTTL = func(context.Context, *dynamodb.DescribeTimeToLiveInput) (*dynamodb.DescribeTimeToLiveOutput, error) {
		return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}}, nil
	}
	f.updateTTL = func(context.Context, *dynamodb.UpdateTimeToLiveInput) error { return nil }
	return f
}

// sdkErr wraps err the way the SDK returns a service error: an operation
// error around an HTTP response error with the given status.
func sdkErr(op string, status int, err error) error {
	return &smithy.OperationError{
		ServiceID:     "DynamoDB",
		OperationName: op,
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      err,
			},
			RequestID: "test",
		},
	}
}

// sendErr wraps err the way the SDK returns a transport failure.
func sendErr(op string, err error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: op, Err: &smithyhttp.RequestSendError{Err: err}}
}
