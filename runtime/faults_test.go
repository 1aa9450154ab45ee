package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/dynamo"
	"github.com/adclick/adclick/sink/sinktest"
)

// throttlingDynamo is a dynamo.API over an in-memory table (sinktest.MemRows)
// that throttles: the i-th distinct UpdateItem request (a retry sends the
// same input again) is refused on its first i mod 5 attempts, cycling
// through ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded and an HTTP 500; every seventh request is applied
// on its first attempt but its answer is lost (a transport error), so the
// Store sends it again. It understands exactly the UpdateItem shapes of the
// Store's Put and Remove; other calls fail.
type throttlingDynamo struct {
	rows *sinktest.MemRows

	mu        sync.Mutex
	attempts  map[*dynamodb.UpdateItemInput]int
	requests  int
	throttled int // attempts refused, with any of the four errors
	throttles int // of which throttling errors (not the HTTP 500)
	lost      int
	applied   int
}

var _ dynamo.API = (*throttlingDynamo)(nil)

func newThrottlingDynamo() *throttlingDynamo {
	return &throttlingDynamo{rows: sinktest.NewMemRows(), attempts: map[*dynamodb.UpdateItemInput]int{}}
}

var errUnsupported = errors.New("throttling fake: call not supported")

// throttle returns the i-th kind of throttling or server error, as the SDK
// reports each.
func throttle(i int) error {
	var err error
	status := http.StatusBadRequest
	switch i % 4 {
	case 0:
		err = &types.ProvisionedThroughputExceededException{Message: aws.String("rate exceeded")}
	case 1:
		err = &types.ThrottlingException{Message: aws.String("rate exceeded")}
	case 2:
		err = &types.RequestLimitExceeded{Message: aws.String("account limit")}
	default:
		err = &types.InternalServerError{Message: aws.String("internal error")}
		status = http.StatusInternalServerError
	}
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
		RequestID:     "test",
	}}
}

func (f *throttlingDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	n, seen := f.attempts[in]
	if !seen {
		f.requests++
		n = f.requests * 1000 // the request's number, and its attempts below
	}
	f.attempts[in] = n + 1
	f.mu.Unlock()
	req, attempt := n/1000, n%1000+1
	if attempt <= req%5 {
		f.mu.Lock()
		f.throttled++
		if (req+attempt)%4 != 3 {
			f.throttles++
		}
		f.mu.Unlock()
		return nil, throttle(req + attempt)
	}
	if err := f.apply(ctx, in); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.applied++
	lose := req%7 == 0 && attempt == req%5+1
	if lose {
		f.lost++
	}
	f.mu.Unlock()
	if lose {
		return nil, &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem",
			Err: &smithyhttp.RequestSendError{Err: errors.New("connection reset by peer")}}
	}
	return &dynamodb.UpdateItemOutput{}, nil
}

// apply decodes the Store's Put or Remove and applies it to the table.
func (f *throttlingDynamo) apply(ctx context.Context, in *dynamodb.UpdateItemInput) error {
	k := sink.Key{Entity: testenv.AttrS(in.Key, "entity"), Bucket: testenv.AttrS(in.Key, "bucket")}
	var w sink.Writer
	switch v := in.ExpressionAttributeNames["#v"]; v {
	case "fast_valid":
		w = sink.Fast
	case "late_valid":
		w = sink.Late
	default:
		return fmt.Errorf("%w: update of %q", errUnsupported, v)
	}
	vals := in.ExpressionAttributeValues
	refused := false
	switch expr := aws.ToString(in.UpdateExpression); {
	case strings.HasPrefix(expr, "SET"):
		p := sink.Put{Key: k, Writer: w, Valid: testenv.AttrN(vals, ":v"), SpendMicros: testenv.AttrN(vals, ":s"),
			Epoch: testenv.AttrN(vals, ":c"), Gen: testenv.AttrN(vals, ":g")}
		if _, ok := vals[":rc"]; ok {
			p.ClosedRow, p.RestoredCkpt = true, testenv.AttrN(vals, ":rc")
		}
		n, err := f.rows.Put(ctx, []sink.Put{p})
		if err != nil {
			return err
		}
		refused = n > 0
	case strings.HasPrefix(expr, "REMOVE"):
		ok, err := f.rows.Remove(ctx, k, w, testenv.AttrN(vals, ":c"))
		if err != nil {
			return err
		}
		refused = !ok
	default:
		return fmt.Errorf("%w: update expression %q", errUnsupported, expr)
	}
	if refused {
		return &types.ConditionalCheckFailedException{Message: aws.String("the conditional request failed")}
	}
	return nil
}

func (f *throttlingDynamo) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, fmt.Errorf("%w: GetItem", errUnsupported)
}

func (f *throttlingDynamo) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, fmt.Errorf("%w: DeleteItem", errUnsupported)
}

func (f *throttlingDynamo) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, fmt.Errorf("%w: Query", errUnsupported)
}

func (f *throttlingDynamo) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return nil, fmt.Errorf("%w: Scan", errUnsupported)
}

func (f *throttlingDynamo) CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return nil, fmt.Errorf("%w: CreateTable", errUnsupported)
}

func (f *throttlingDynamo) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return nil, fmt.Errorf("%w: DescribeTable", errUnsupported)
}

// TestDynamoThrottling replays a trace into the DynamoDB adapter while the
// table throttles most requests (up to four times each, with every kind of
// retryable error) and loses the answer of some applied writes. The
// adapter's retries with backoff absorb it: the job completes and the rows
// are exact — fast + late per (ad, hour) equals the independent count, so
// no write was lost and no count doubled by a retry.
func TestDynamoThrottling(t *testing.T) {
	path := writeTrace(t, t.TempDir(), traceOptions(4000, 3))
	ref := fileReference(t, path)
	api := newThrottlingDynamo()
	reg := prometheus.NewRegistry()
	store, err := dynamo.New(api, dynamo.Options{Table: "ad_metrics", MaxInFlight: 8,
		BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cfg := replayConfig(t.TempDir(), path)
	cfg.Rows = store
	cfg.Registerer = reg
	j := runToEnd(t, cfg)
	defer j.Close()

	checkRows(t, scanRows(t, api.rows), ref)

	api.mu.Lock()
	requests, throttled, throttles, lost, applied := api.requests, api.throttled, api.throttles, api.lost, api.applied
	api.mu.Unlock()
	t.Logf("%d write requests: %d throttled attempts, %d answers lost, %d applications", requests, throttled, lost, applied)
	if throttled < requests {
		t.Errorf("only %d throttled attempts for %d requests: the fake did not throttle as planned", throttled, requests)
	}
	if lost == 0 {
		t.Errorf("no answer was lost: the fake did not exercise a retry of an applied write")
	}
	if got, _ := metricValue(t, reg, "adclick_dynamo_throttles_total"); got != float64(throttles) {
		t.Errorf("adclick_dynamo_throttles_total = %v, want %d (the throttling errors among %d refused attempts)", got, throttles, throttled)
	}
	if got, _ := metricValue(t, reg, "adclick_dynamo_retries_total"); got != float64(throttled+lost) {
		t.Errorf("adclick_dynamo_retries_total = %v, want %d (every refused or lost attempt retried once)", got, throttled+lost)
	}
	if got, _ := metricValue(t, reg, "adclick_sink_refused_writes_total"); got != 0 {
		t.Errorf("adclick_sink_refused_writes_total = %v, want 0 (a retried write is not refused)", got)
	}
}
