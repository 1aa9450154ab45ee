//go:build integration

package flush

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink/dynamo"
)

// throttlingAPI answers the data calls (not CreateTable or DescribeTable)
// with a ThrottlingException, as the SDK returns it, while left > 0.
type throttlingAPI struct {
	dynamo.API
	left atomic.Int64
}

func (a *throttlingAPI) throttle(op string) error {
	if a.left.Add(-1) < 0 {
		return nil
	}
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: op,
		Err: &types.ThrottlingException{Message: aws.String("injected")}}
}

func (a *throttlingAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, f ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := a.throttle("UpdateItem"); err != nil {
		return nil, err
	}
	return a.API.UpdateItem(ctx, in, f...)
}

func (a *throttlingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, f ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := a.throttle("GetItem"); err != nil {
		return nil, err
	}
	return a.API.GetItem(ctx, in, f...)
}

func (a *throttlingAPI) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, f ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := a.throttle("DeleteItem"); err != nil {
		return nil, err
	}
	return a.API.DeleteItem(ctx, in, f...)
}

func (a *throttlingAPI) Query(ctx context.Context, in *dynamodb.QueryInput, f ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := a.throttle("Query"); err != nil {
		return nil, err
	}
	return a.API.Query(ctx, in, f...)
}

// TestFullWaitsOutDynamoThrottling: against the local DynamoDB stand-in, a
// table that throttles 40 requests makes the store give up several times
// (3 attempts each); the flush waits that out and completes.
func TestFullWaitsOutDynamoThrottling(t *testing.T) {
	endpoint := testenv.DynamoDB(t)
	// An HTTP transport of our own, whose idle connections are closed at
	// the end, so that no connection goroutine outlives the test.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	o := dynamo.Options{Table: fmt.Sprintf("ad_metrics_retry_%016x", rand.Uint64()),
		MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	client := dynamo.NewClient(cfg, o, func(do *dynamodb.Options) {
		do.BaseEndpoint = aws.String(endpoint)
		do.HTTPClient = &http.Client{Transport: tr}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The table is made with the real client (the throttling wrapper has
	// only the data calls); the flush then runs on the wrapper.
	setup, err := dynamo.New(client, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.CreateTable(ctx); err != nil {
		t.Fatalf("create table: %v", err)
	}
	api := &throttlingAPI{API: client}
	rows, err := dynamo.New(api, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(o.Table)}); err != nil {
			t.Errorf("delete table %s: %v", o.Table, err)
		}
	})
	seedNew(t, rows)

	api.left.Store(40)
	rep, err := Full(ctx, rows, nil, newRestored(), nil, Options{Restored: 41, High: 43, Gen: 7,
		WritesPerSec: math.Inf(1), RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("flush with 40 throttled requests: %v, want it to wait them out", err)
	}
	if rep.ItemsDeleted != 80 || rep.AttrsRemoved != 20 {
		t.Errorf("report %+v, want 80 items deleted and 20 removed", rep)
	}
	// 40 throttles at 3 attempts per give-up: at least 13 retries.
	if rep.Retries < 13 {
		t.Errorf("retries: got %d, want at least 13", rep.Retries)
	}
}
