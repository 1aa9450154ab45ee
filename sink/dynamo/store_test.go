package dynamo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the SDK's HTTP client (integration tests).
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// fastRetry keeps unit tests quick.
var fastRetry = Options{BaseBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, MaxAttempts: 5}

func newStore(t *testing.T, api API, o Options) *Store {
	t.Helper()
	s, err := New(api, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatalf("read metric: %v", err)
		}
		switch {
		case d.Counter != nil:
			sum += d.Counter.GetValue()
		case d.Histogram != nil:
			sum += float64(d.Histogram.GetSampleCount())
		}
	}
	return sum
}

var (
	k1 = sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	k2 = sink.Key{Entity: "ad_9", Bucket: "H2026-11-29T10Z"}
)

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	want := Options{Table: "ad_metrics", MaxInFlight: 32, MaxAttempts: 15, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 5 * time.Second, TableWait: 5 * time.Minute,
		Retention: sink.Retention{Minute: 35 * 24 * time.Hour, Hour: 400 * 24 * time.Hour}}
	if o != want {
		t.Fatalf("EnsureDefaults: got %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate of the defaults: %v", err)
	}
	bad := Options{Table: "x!", MaxInFlight: -1, MaxAttempts: -2, BaseBackoff: time.Second, MaxBackoff: time.Millisecond, TableWait: -1,
		Retention: sink.Retention{Minute: time.Hour, Hour: 24 * time.Hour}}
	bad.EnsureDefaults()
	err := bad.Validate()
	if err == nil {
		t.Fatalf("Validate(%+v): got nil, want errors", bad)
	}
	for _, frag := range []string{"table name", "max in flight", "max attempts", "max backoff", "table wait", "minute retention", "hour retention"} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("Validate error %q does not report %q", err, frag)
		}
	}
	if _, err := New(&fakeAPI{}, bad); err == nil {
		t.Errorf("New with bad options: got nil error")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Errorf("New with a nil client: got nil error")
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want errClass
	}{
		{"conditional check", sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{}), classRefused},
		{"provisioned throughput", sdkErr("UpdateItem", 400, &types.ProvisionedThroughputExceededException{}), classThrottled},
		{"request limit", sdkErr("UpdateItem", 400, &types.RequestLimitExceeded{}), classThrottled},
		{"typed throttling", sdkErr("UpdateItem", 400, &types.ThrottlingException{}), classThrottled},
		{"generic throttling code", sdkErr("Query", 400, &smithy.GenericAPIError{Code: "ThrottlingException"}), classThrottled},
		{"internal server error", sdkErr("GetItem", 500, &types.InternalServerError{}), classTransient},
		{"503 generic", sdkErr("GetItem", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), classTransient},
		{"transport", sendErr("UpdateItem", io.ErrUnexpectedEOF), classTransient},
		{"response cut short", &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "Scan",
			Err: &smithy.DeserializationError{Err: &net.OpError{Op: "read", Err: errors.New("use of closed network connection")}}}, classTransient},
		{"unexpected EOF in a body", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), classTransient},
		{"validation", sdkErr("UpdateItem", 400, &smithy.GenericAPIError{Code: "ValidationException"}), classFatal},
		{"resource not found", sdkErr("UpdateItem", 400, &types.ResourceNotFoundException{}), classFatal},
		{"canceled in transport", sendErr("UpdateItem", context.Canceled), classFatal},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), classFatal},
		{"plain", errors.New("boom"), classFatal},
	}
	for _, c := range cases {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%s) = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	base, max := 10*time.Millisecond, 300*time.Millisecond
	for n, d := 1, base; n <= 30; n++ {
		for range 50 {
			got := backoff(base, max, n)
			if got < d/2 || got > d {
				t.Fatalf("backoff(retry %d) = %v, want in [%v, %v]", n, got, d/2, d)
			}
		}
		d = min(2*d, max)
	}
}

func TestPutInput(t *testing.T) {
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
	s := newStore(t, f, Options{Table: "tbl"})
	refused, err := s.Put(context.Background(), []sink.Put{
		{Key: k1, Writer: sink.Fast, Valid: 5, SpendMicros: 70, Epoch: 41, Gen: 7, ClosedRow: true, RestoredCkpt: 40},
	})
	if err != nil || refused != 0 {
		t.Fatalf("Put = %d, %v; want 0, nil", refused, err)
	}
	if len(f.updates) != 1 {
		t.Fatalf("sent %d UpdateItem requests, want 1", len(f.updates))
	}
	in := f.updates[0]
	if got := aws.ToString(in.TableName); got != "tbl" {
		t.Errorf("table %q, want tbl", got)
	}
	if got, want := in.Key, map[string]types.AttributeValue{
		"entity": &types.AttributeValueMemberS{Value: "ad_7"}, "bucket": &types.AttributeValueMemberS{Value: "M2026-11-29T10:14Z"},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("key %v, want %v", got, want)
	}
	// Fence 0: wf is removed, so the item is as before fences.
	if got, want := aws.ToString(in.UpdateExpression), "SET #v = :v, #s = :s, #c = :c, #ix = :ix, #g = :g, #jg = :g, #bs = :bs, #ea = :ea REMOVE #wf"; got != want {
		t.Errorf("update expression %q, want %q", got, want)
	}
	if got, want := aws.ToString(in.ConditionExpression), "(attribute_not_exists(#jg) OR #jg < :g OR (#jg = :g AND (attribute_not_exists(#wf) OR #wf <= :f))) AND (attribute_not_exists(#c) OR #c >= :rc)"; got != want {
		t.Errorf("condition %q, want %q", got, want)
	}
	wantNames := map[string]string{"#v": "fast_valid", "#s": "fast_spend_micros", "#c": "fast_ckpt", "#ix": "fast_ix", "#g": "fast_gen", "#jg": "job_gen", "#wf": "wf", "#bs": "bucket_shard", "#ea": "expires_at"}
	if !reflect.DeepEqual(in.ExpressionAttributeNames, wantNames) {
		t.Errorf("names %v, want %v", in.ExpressionAttributeNames, wantNames)
	}
	n := func(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
	wantVals := map[string]types.AttributeValue{
		":v": n("5"), ":s": n("70"), ":c": n("41"), ":g": n("7"), ":f": n("0"), ":rc": n("40"),
		":ix": &types.AttributeValueMemberS{Value: fmt.Sprintf("41#%d", sink.IndexShard(k1))},
		":bs": &types.AttributeValueMemberS{Value: fmt.Sprintf("%s#%d", k1.Bucket, BucketShard(k1.Entity))},
		// 2026-11-29T10:15:00Z, the end of the minute, + 35 days.
		":ea": n(strconv.FormatInt(1_795_947_300+35*24*3600, 10)),
	}
	if !reflect.DeepEqual(in.ExpressionAttributeValues, wantVals) {
		t.Errorf("values %v, want %v", in.ExpressionAttributeValues, wantVals)
	}

	// An open-row late write with a fence: no closed-row condition, no
	// :rc; wf set.
	f.updates = nil
	if _, err := s.Put(context.Background(), []sink.Put{{Key: k2, Writer: sink.Late, Valid: 1, Epoch: 3, Gen: 2, Fence: 5, RestoredCkpt: 99}}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	in = f.updates[0]
	if got, want := aws.ToString(in.ConditionExpression), "(attribute_not_exists(#jg) OR #jg < :g OR (#jg = :g AND (attribute_not_exists(#wf) OR #wf <= :f)))"; got != want {
		t.Errorf("open-row condition %q, want %q", got, want)
	}
	if got, want := aws.ToString(in.UpdateExpression), "SET #v = :v, #s = :s, #c = :c, #ix = :ix, #g = :g, #jg = :g, #bs = :bs, #ea = :ea, #wf = :f"; got != want {
		t.Errorf("fenced update expression %q, want %q", got, want)
	}
	if got := testenv.AttrN(in.ExpressionAttributeValues, ":f"); got != 5 {
		t.Errorf(":f = %d, want 5", got)
	}
	// A negative fence is an error, and nothing is sent.
	f.updates = nil
	if _, err := s.Put(context.Background(), []sink.Put{{Key: k2, Writer: sink.Late, Valid: 1, Epoch: 3, Gen: 2, Fence: -1}}); err == nil || len(f.updates) != 0 {
		t.Errorf("Put with fence -1 = %v after %d requests; want an error and none", err, len(f.updates))
	}
	if _, ok := in.ExpressionAttributeValues[":rc"]; ok {
		t.Errorf("open-row write sends :rc, which DynamoDB refuses as unused")
	}
	if got := in.ExpressionAttributeNames["#c"]; got != "late_ckpt" {
		t.Errorf("late write names #c = %q, want late_ckpt", got)
	}
}

func TestPutCoalesces(t *testing.T) {
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
	s := newStore(t, f, Options{})
	_, err := s.Put(context.Background(), []sink.Put{
		{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1},
		{Key: k1, Writer: sink.Late, Valid: 2, Epoch: 1, Gen: 1},
		{Key: k1, Writer: sink.Fast, Valid: 3, Epoch: 2, Gen: 1},
	})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if len(f.updates) != 2 {
		t.Fatalf("sent %d UpdateItem requests, want 2 (one per key and writer)", len(f.updates))
	}
	for _, in := range f.updates {
		if in.ExpressionAttributeNames["#v"] == "fast_valid" {
			if got := in.ExpressionAttributeValues[":v"].(*types.AttributeValueMemberN).Value; got != "3" {
				t.Errorf("coalesced fast write sends valid %s, want 3 (the last)", got)
			}
		}
	}
}

func TestPutRetriesThrottling(t *testing.T) {
	for _, fault := range []error{
		sdkErr("UpdateItem", 400, &types.ProvisionedThroughputExceededException{}),
		sdkErr("UpdateItem", 400, &types.ThrottlingException{}),
		sdkErr("UpdateItem", 400, &types.RequestLimitExceeded{}),
		sdkErr("UpdateItem", 500, &types.InternalServerError{}),
		sendErr("UpdateItem", io.ErrUnexpectedEOF),
	} {
		var calls atomic.Int64
		f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
			if calls.Add(1) <= 3 {
				return fault
			}
			return nil
		}}
		s := newStore(t, f, fastRetry)
		refused, err := s.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1}})
		if err != nil || refused != 0 {
			t.Fatalf("Put after 3 faults (%v) = %d, %v; want 0, nil", fault, refused, err)
		}
		if got := calls.Load(); got != 4 {
			t.Errorf("fault %v: %d calls, want 4", fault, got)
		}
		if got := value(t, s.m.retries); got != 3 {
			t.Errorf("fault %v: retries metric %v, want 3", fault, got)
		}
		wantThrottles := 3.0
		if classify(fault) != classThrottled {
			wantThrottles = 0
		}
		if got := value(t, s.m.throttles); got != wantThrottles {
			t.Errorf("fault %v: throttles metric %v, want %v", fault, got, wantThrottles)
		}
		if got := value(t, s.m.writes); got != 1 {
			t.Errorf("fault %v: writes metric %v, want 1", fault, got)
		}
		if got := value(t, s.m.latency); got != 4 {
			t.Errorf("fault %v: latency samples %v, want 4", fault, got)
		}
	}
}

func TestPutGivesUp(t *testing.T) {
	var calls atomic.Int64
	fault := sdkErr("UpdateItem", 503, &smithy.GenericAPIError{Code: "ServiceUnavailable"})
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { calls.Add(1); return fault }}
	s := newStore(t, f, fastRetry)
	_, err := s.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1}})
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != 503 {
		t.Fatalf("Put = %v, want an error wrapping the 503 response", err)
	}
	if !strings.HasPrefix(err.Error(), "dynamo: put: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}
	if got := calls.Load(); got != int64(fastRetry.MaxAttempts) {
		t.Errorf("%d calls, want MaxAttempts = %d", got, fastRetry.MaxAttempts)
	}
}

func TestPutRefusedNotRetried(t *testing.T) {
	var calls atomic.Int64
	f := &fakeAPI{update: func(_ context.Context, in *dynamodb.UpdateItemInput) error {
		calls.Add(1)
		if in.Key["entity"].(*types.AttributeValueMemberS).Value == "ad_7" {
			return sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{})
		}
		return nil
	}}
	s := newStore(t, f, fastRetry)
	refused, err := s.Put(context.Background(), []sink.Put{
		{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1},
		{Key: k2, Writer: sink.Fast, Valid: 1, Epoch: 1, Gen: 1},
	})
	if err != nil || refused != 1 {
		t.Fatalf("Put = %d, %v; want 1, nil", refused, err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("%d calls, want 2 (no retry of a refused write)", got)
	}
	if got := value(t, s.m.refused); got != 1 {
		t.Errorf("refused metric %v, want 1", got)
	}
	if got := value(t, s.m.retries); got != 0 {
		t.Errorf("retries metric %v, want 0", got)
	}
}

func TestPutFatalNotRetried(t *testing.T) {
	var calls atomic.Int64
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
		calls.Add(1)
		return sdkErr("UpdateItem", 400, &smithy.GenericAPIError{Code: "ValidationException"})
	}}
	s := newStore(t, f, Options{MaxInFlight: 1, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	puts := make([]sink.Put, 10)
	for i := range puts {
		puts[i] = sink.Put{Key: sink.Key{Entity: fmt.Sprint(i), Bucket: "b"}, Writer: sink.Fast, Gen: 1}
	}
	_, err := s.Put(context.Background(), puts)
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		t.Fatalf("Put = %v, want the ValidationException", err)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d calls, want 1: no retry, and no new writes after a failure", got)
	}
}

func TestContextCancelled(t *testing.T) {
	t.Run("during a request", func(t *testing.T) {
		started := make(chan struct{}, 1)
		f := &fakeAPI{update: func(ctx context.Context, _ *dynamodb.UpdateItemInput) error {
			started <- struct{}{}
			<-ctx.Done()
			return sendErr("UpdateItem", ctx.Err())
		}}
		s := newStore(t, f, fastRetry)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		_, err := s.Put(ctx, []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put = %v, want context.Canceled", err)
		}
	})
	t.Run("during a backoff", func(t *testing.T) {
		f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
			return sdkErr("UpdateItem", 400, &types.ProvisionedThroughputExceededException{})
		}}
		s := newStore(t, f, Options{BaseBackoff: time.Hour, MaxBackoff: time.Hour})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := s.Put(ctx, []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Put = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Put returned after %v, want soon after the 50 ms deadline", d)
		}
	})
	t.Run("waiting for a slot", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
			started <- struct{}{}
			<-release
			return nil
		}}
		s := newStore(t, f, Options{MaxInFlight: 1})
		done := make(chan error, 1)
		go func() {
			_, err := s.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}})
			done <- err
		}()
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := s.Get(ctx, k2); !errors.Is(err, context.Canceled) {
			t.Errorf("Get with a cancelled context while the slot is taken = %v, want context.Canceled", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Put: %v", err)
		}
	})
}

func TestInFlightBound(t *testing.T) {
	const bound = 4
	var cur, peak atomic.Int64
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		cur.Add(-1)
		return nil
	}}
	s := newStore(t, f, Options{MaxInFlight: bound})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			puts := make([]sink.Put, 60)
			for i := range puts {
				puts[i] = sink.Put{Key: sink.Key{Entity: fmt.Sprintf("ad_%d_%d", g, i), Bucket: "b"}, Writer: sink.Fast, Gen: 1}
			}
			if _, err := s.Put(context.Background(), puts); err != nil {
				t.Errorf("Put: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := peak.Load(); got != bound {
		t.Fatalf("peak requests in flight = %d, want exactly %d (bounded, and reached)", got, bound)
	}
	if got := len(f.updates); got != 180 {
		t.Fatalf("sent %d UpdateItem requests, want 180", got)
	}
}

func item(entity, bucket string, extra map[string]types.AttributeValue) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{"entity": str(entity), "bucket": str(bucket)}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestQueryIndexPages(t *testing.T) {
	pages := [][]map[string]types.AttributeValue{
		{item("a", "b1", map[string]types.AttributeValue{"late_ix": str("5#2"), "late_ckpt": num(5)}), item("a", "b2", nil)},
		{},
		{item("c", "b3", nil)},
	}
	f := &fakeAPI{}
	var throttled atomic.Bool
	f.query = func(_ context.Context, in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		if !throttled.Swap(true) {
			return nil, sdkErr("Query", 400, &types.ProvisionedThroughputExceededException{})
		}
		page := 0
		if in.ExclusiveStartKey != nil {
			page = int(in.ExclusiveStartKey["page"].(*types.AttributeValueMemberN).Value[0] - '0')
		}
		out := &dynamodb.QueryOutput{Items: pages[page]}
		if page+1 < len(pages) {
			out.LastEvaluatedKey = map[string]types.AttributeValue{"page": num(int64(page + 1))}
		}
		return out, nil
	}
	s := newStore(t, f, fastRetry)
	var got []string
	err := s.QueryIndex(context.Background(), sink.Late, "5#2", func(it sink.Item) error {
		got = append(got, it.Entity+"/"+it.Bucket)
		return nil
	})
	if err != nil {
		t.Fatalf("QueryIndex: %v", err)
	}
	if want := []string{"a/b1", "a/b2", "c/b3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("QueryIndex items %v, want %v", got, want)
	}
	if len(f.queries) != 4 {
		t.Fatalf("sent %d Query requests, want 4 (one throttled, three pages)", len(f.queries))
	}
	in := f.queries[1]
	if aws.ToString(in.IndexName) != "late_ix" || aws.ToString(in.KeyConditionExpression) != "#ix = :ix" ||
		in.ExpressionAttributeNames["#ix"] != "late_ix" || in.ExpressionAttributeValues[":ix"].(*types.AttributeValueMemberS).Value != "5#2" {
		t.Fatalf("query input %+v, want index late_ix, late_ix = 5#2", in)
	}
}

func TestScanPages(t *testing.T) {
	f := &fakeAPI{}
	f.scan = func(_ context.Context, in *dynamodb.ScanInput) (*dynamodb.ScanOutput, error) {
		if in.ExclusiveStartKey == nil {
			return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{item("a", "b", nil)}, LastEvaluatedKey: map[string]types.AttributeValue{"x": num(1)}}, nil
		}
		return &dynamodb.ScanOutput{Items: []map[string]types.AttributeValue{item("c", "d", nil)}}, nil
	}
	s := newStore(t, f, Options{})
	n := 0
	if err := s.Scan(context.Background(), func(sink.Item) error { n++; return nil }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if n != 2 || len(f.scans) != 2 {
		t.Fatalf("Scan saw %d items in %d requests, want 2 in 2", n, len(f.scans))
	}
	if !aws.ToBool(f.scans[0].ConsistentRead) {
		t.Errorf("Scan is not a consistent read")
	}
}

func TestDeleteFallsBackToRemove(t *testing.T) {
	ccf := sdkErr("DeleteItem", 400, &types.ConditionalCheckFailedException{})
	cases := []struct {
		name                string
		delErr, updErr      error
		wantDeleted, wantOK bool
		wantUpdates         int
	}{
		{"only this writer", nil, nil, true, true, 0},
		{"another writer present", ccf, nil, false, true, 1},
		{"ckpt differs", ccf, sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{}), false, false, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{
				del:    func(context.Context, *dynamodb.DeleteItemInput) error { return c.delErr },
				update: func(context.Context, *dynamodb.UpdateItemInput) error { return c.updErr },
			}
			s := newStore(t, f, Options{})
			deleted, ok, err := s.Delete(context.Background(), k2, sink.Late, 41)
			if err != nil || deleted != c.wantDeleted || ok != c.wantOK {
				t.Fatalf("Delete = %v, %v, %v; want %v, %v, nil", deleted, ok, err, c.wantDeleted, c.wantOK)
			}
			if len(f.updates) != c.wantUpdates {
				t.Fatalf("sent %d UpdateItem requests, want %d", len(f.updates), c.wantUpdates)
			}
			d := f.deletes[0]
			cond := aws.ToString(d.ConditionExpression)
			names := map[string]bool{}
			for ph, name := range d.ExpressionAttributeNames {
				if !strings.Contains(cond, ph) {
					t.Errorf("name %s (%s) unused in condition %q", ph, name, cond)
				}
				names[name] = true
			}
			for _, name := range []string{"late_ckpt", "fast_valid", "fast_spend_micros", "fast_ckpt", "fast_ix", "fast_gen", "final_valid", "final_spend_micros", "final_gen", "final_at"} {
				if !names[name] {
					t.Errorf("delete condition does not check %s: %q %v", name, cond, d.ExpressionAttributeNames)
				}
			}
			if c.wantUpdates > 0 {
				u := f.updates[0]
				if got, want := aws.ToString(u.UpdateExpression), "REMOVE #v, #s, #c, #ix, #g"; got != want {
					t.Errorf("remove expression %q, want %q", got, want)
				}
				if got := u.ExpressionAttributeNames["#ix"]; got != "late_ix" {
					t.Errorf("remove names #ix = %q, want late_ix", got)
				}
			}
		})
	}
}

// placeholders returns the "#name" and ":value" placeholders in expr.
func placeholders(expr string) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < len(expr); i++ {
		if expr[i] != '#' && expr[i] != ':' {
			continue
		}
		j := i + 1
		for j < len(expr) && (expr[j] == '_' || 'a' <= expr[j] && expr[j] <= 'z' || '0' <= expr[j] && expr[j] <= '9') {
			j++
		}
		if j > i+1 {
			out[expr[i:j]] = true
		}
		i = j - 1
	}
	return out
}

// wantExact fails unless the names and values given are exactly the
// placeholders the expressions use: DynamoDB refuses an unused one.
func wantExact(t *testing.T, what string, names map[string]string, vals map[string]types.AttributeValue, exprs ...string) {
	t.Helper()
	used := map[string]bool{}
	for _, e := range exprs {
		for p := range placeholders(e) {
			used[p] = true
		}
	}
	given := map[string]bool{}
	for p := range names {
		given[p] = true
	}
	for p := range vals {
		given[p] = true
	}
	if !reflect.DeepEqual(used, given) {
		t.Errorf("%s: expressions %q use %v, the request gives %v", what, exprs, used, given)
	}
}

// TestFencedRequests pins down the requests of RemoveFenced and
// DeleteFenced, and that every request gives exactly the placeholders its
// expressions use.
func TestFencedRequests(t *testing.T) {
	ccf := sdkErr("UpdateItem", 400, &types.ConditionalCheckFailedException{})
	t.Run("remove, fence above 0, same generation", func(t *testing.T) {
		f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
		s := newStore(t, f, Options{})
		ok, err := s.RemoveFenced(context.Background(), k2, sink.Late, 41, sink.Token{Gen: 7, Fence: 3})
		if err != nil || !ok || len(f.updates) != 1 {
			t.Fatalf("RemoveFenced = %v, %v after %d requests; want true, nil after 1", ok, err, len(f.updates))
		}
		u := f.updates[0]
		if got, want := aws.ToString(u.UpdateExpression), "REMOVE #v, #s, #c, #ix, #g SET #wf = :f"; got != want {
			t.Errorf("update %q, want %q", got, want)
		}
		if got, want := aws.ToString(u.ConditionExpression), "#c = :c AND #jg = :g AND (attribute_not_exists(#wf) OR #wf <= :f)"; got != want {
			t.Errorf("condition %q, want %q", got, want)
		}
		if testenv.AttrN(u.ExpressionAttributeValues, ":g") != 7 || testenv.AttrN(u.ExpressionAttributeValues, ":f") != 3 {
			t.Errorf("values %v, want :g 7 and :f 3", u.ExpressionAttributeValues)
		}
	})
	t.Run("remove, fence above 0, refused then another generation", func(t *testing.T) {
		for _, second := range []error{nil, ccf} {
			f := &fakeAPI{update: func(_ context.Context, in *dynamodb.UpdateItemInput) error {
				if strings.Contains(aws.ToString(in.UpdateExpression), "SET") {
					return ccf
				}
				return second
			}}
			s := newStore(t, f, Options{})
			ok, err := s.RemoveFenced(context.Background(), k2, sink.Late, 41, sink.Token{Gen: 7, Fence: 3})
			if err != nil || ok != (second == nil) || len(f.updates) != 2 {
				t.Fatalf("RemoveFenced = %v, %v after %d requests; want %v, nil after 2", ok, err, len(f.updates), second == nil)
			}
			u := f.updates[1]
			if got, want := aws.ToString(u.UpdateExpression), "REMOVE #v, #s, #c, #ix, #g"; got != want {
				t.Errorf("second update %q, want %q", got, want)
			}
			if got, want := aws.ToString(u.ConditionExpression), "#c = :c AND (attribute_not_exists(#jg) OR #jg <> :g)"; got != want {
				t.Errorf("second condition %q, want %q", got, want)
			}
			wantRefused := 0.0
			if second != nil {
				wantRefused = 1
			}
			if got := value(t, s.m.refused); got != wantRefused {
				t.Errorf("refused metric %v, want %v (the first refusal is not counted)", got, wantRefused)
			}
		}
	})
	t.Run("remove, fence 0", func(t *testing.T) {
		f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return ccf }}
		s := newStore(t, f, Options{})
		ok, err := s.RemoveFenced(context.Background(), k2, sink.Late, 41, sink.Token{Gen: 7})
		if err != nil || ok || len(f.updates) != 1 {
			t.Fatalf("RemoveFenced = %v, %v after %d requests; want false, nil after 1", ok, err, len(f.updates))
		}
		u := f.updates[0]
		if got, want := aws.ToString(u.UpdateExpression), "REMOVE #v, #s, #c, #ix, #g"; got != want {
			t.Errorf("update %q, want %q", got, want)
		}
		if got, want := aws.ToString(u.ConditionExpression), "#c = :c AND (attribute_not_exists(#wf) OR #wf <= :f OR #jg <> :g)"; got != want {
			t.Errorf("condition %q, want %q", got, want)
		}
	})
	t.Run("delete", func(t *testing.T) {
		f := &fakeAPI{
			del:    func(context.Context, *dynamodb.DeleteItemInput) error { return ccf },
			update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil },
		}
		s := newStore(t, f, Options{})
		deleted, ok, err := s.DeleteFenced(context.Background(), k1, sink.Fast, 41, sink.Token{Gen: 7, Fence: 3})
		if err != nil || deleted || !ok {
			t.Fatalf("DeleteFenced = %v, %v, %v; want false, true, nil", deleted, ok, err)
		}
		d := f.deletes[0]
		if cond := aws.ToString(d.ConditionExpression); !strings.HasSuffix(cond, " AND (attribute_not_exists(#wf) OR #wf <= :f OR #jg <> :g)") {
			t.Errorf("delete condition %q lacks the fence", cond)
		}
		// The fallback is the fenced removal.
		if len(f.updates) != 1 || aws.ToString(f.updates[0].UpdateExpression) != "REMOVE #v, #s, #c, #ix, #g SET #wf = :f" {
			t.Errorf("fallback updates %d, want the fenced removal", len(f.updates))
		}
		if _, _, err := s.DeleteFenced(context.Background(), k1, sink.Fast, 41, sink.Token{Gen: 7, Fence: -1}); err == nil {
			t.Errorf("DeleteFenced with fence -1: nil error")
		}
	})
	t.Run("put updates", func(t *testing.T) {
		const set = "SET #v = :v, #s = :s, #c = :c, #ix = :ix, #g = :g, #jg = :g, #bs = :bs"
		for _, c := range []struct {
			retention sink.Retention
			fence     int64
			want      string
		}{
			{sink.Retention{}, 0, set + ", #ea = :ea REMOVE #wf"},
			{sink.Retention{}, 3, set + ", #ea = :ea, #wf = :f"},
			{sink.Retention{Minute: sink.Forever, Hour: sink.Forever}, 0, set + " REMOVE #wf"},
			{sink.Retention{Minute: sink.Forever, Hour: sink.Forever}, 3, set + ", #wf = :f"},
		} {
			f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
			s := newStore(t, f, Options{Retention: c.retention})
			if _, err := s.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 2, Gen: 7, Fence: c.fence}}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if got := aws.ToString(f.updates[0].UpdateExpression); got != c.want {
				t.Errorf("retention %+v, fence %d: update %q, want %q", c.retention, c.fence, got, c.want)
			}
		}
	})
	t.Run("every placeholder used", func(t *testing.T) {
		ctx := context.Background()
		f := &fakeAPI{
			del:    func(context.Context, *dynamodb.DeleteItemInput) error { return ccf },
			update: func(context.Context, *dynamodb.UpdateItemInput) error { return ccf },
		}
		for _, o := range []Options{{}, {Retention: sink.Retention{Minute: sink.Forever, Hour: sink.Forever}}} {
			s := newStore(t, f, o)
			for _, fence := range []int64{0, 3} {
				for _, w := range sink.TaggedWriters {
					for _, closed := range []bool{false, true} {
						if _, err := s.Put(ctx, []sink.Put{{Key: k1, Writer: w, Valid: 1, Epoch: 2, Gen: 7, Fence: fence, ClosedRow: closed, RestoredCkpt: 1}}); err != nil {
							t.Fatalf("Put: %v", err)
						}
					}
					s.Remove(ctx, k1, w, 2)
					s.Delete(ctx, k1, w, 2)
					s.RemoveFenced(ctx, k1, w, 2, sink.Token{Gen: 7, Fence: fence})
					s.DeleteFenced(ctx, k1, w, 2, sink.Token{Gen: 7, Fence: fence})
				}
			}
		}
		for i, u := range f.updates {
			wantExact(t, fmt.Sprintf("update %d", i), u.ExpressionAttributeNames, u.ExpressionAttributeValues,
				aws.ToString(u.UpdateExpression), aws.ToString(u.ConditionExpression))
		}
		for i, d := range f.deletes {
			wantExact(t, fmt.Sprintf("delete %d", i), d.ExpressionAttributeNames, d.ExpressionAttributeValues, aws.ToString(d.ConditionExpression))
		}
		if len(f.updates) < 40 || len(f.deletes) < 8 {
			t.Fatalf("%d updates and %d deletes, want more", len(f.updates), len(f.deletes))
		}
	})
}

func describeOut(status types.TableStatus, idx types.IndexStatus, gsis ...string) *dynamodb.DescribeTableOutput {
	t := &types.TableDescription{
		TableStatus: status,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("entity"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("bucket"), KeyType: types.KeyTypeRange},
		},
	}
	for _, g := range gsis {
		ks := []types.KeySchemaElement{{AttributeName: aws.String(g), KeyType: types.KeyTypeHash}}
		switch g {
		case "by_bucket_shard":
			ks = []types.KeySchemaElement{
				{AttributeName: aws.String("bucket_shard"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("entity"), KeyType: types.KeyTypeRange},
			}
		}
		t.GlobalSecondaryIndexes = append(t.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
			IndexName:   aws.String(g),
			IndexStatus: idx,
			KeySchema:   ks,
			Projection:  &types.Projection{ProjectionType: types.ProjectionTypeAll},
		})
	}
	return &dynamodb.DescribeTableOutput{Table: t}
}

func TestCreateTable(t *testing.T) {
	t.Run("new table", func(t *testing.T) {
		var describes atomic.Int64
		f := (&fakeAPI{
			create: func(context.Context, *dynamodb.CreateTableInput) error { return nil },
			describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
				switch describes.Add(1) {
				case 1:
					return describeOut(types.TableStatusCreating, types.IndexStatusCreating, "fast_ix", "late_ix", "by_bucket_shard"), nil
				case 2:
					return describeOut(types.TableStatusActive, types.IndexStatusCreating, "fast_ix", "late_ix", "by_bucket_shard"), nil
				}
				return describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix", "late_ix", "by_bucket_shard"), nil
			},
		}).ttlOff()
		s := newStore(t, f, Options{})
		if err := s.CreateTable(context.Background()); err != nil {
			t.Fatalf("CreateTable: %v", err)
		}
		if got := describes.Load(); got != 3 {
			t.Errorf("%d DescribeTable calls, want 3 (until table and indexes are ACTIVE)", got)
		}
		in := f.creates[0]
		if in.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("billing mode %s, want PAY_PER_REQUEST", in.BillingMode)
		}
		if aws.ToString(in.TableName) != "ad_metrics" {
			t.Errorf("table name %q, want ad_metrics", aws.ToString(in.TableName))
		}
		desc := &types.TableDescription{KeySchema: in.KeySchema, AttributeDefinitions: in.AttributeDefinitions}
		var names []string
		for _, g := range in.GlobalSecondaryIndexes {
			names = append(names, aws.ToString(g.IndexName))
			desc.GlobalSecondaryIndexes = append(desc.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
				IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection,
			})
		}
		if err := checkSchema(desc); err != nil {
			t.Errorf("the table CreateTable asks for fails its own check: %v", err)
		}
		if got := strings.Join(names, ","); got != "fast_ix,late_ix,by_bucket_shard" {
			t.Errorf("CreateTable asks for indexes %s, want fast_ix,late_ix,by_bucket_shard", got)
		}
		if b := findIndex(desc, "by_bucket_shard"); b == nil || keyString(b.KeySchema) != "[bucket_shard HASH entity RANGE]" {
			t.Errorf("index by_bucket_shard = %+v, want key bucket_shard HASH + entity RANGE", b)
		}
		if len(f.tableUpdates) != 0 {
			t.Errorf("UpdateTable called %d times on a new table, want 0", len(f.tableUpdates))
		}
		wantTTLOn(t, f)
	})
	t.Run("existing table", func(t *testing.T) {
		f := (&fakeAPI{
			create: func(context.Context, *dynamodb.CreateTableInput) error {
				return sdkErr("CreateTable", 400, &types.ResourceInUseException{})
			},
			describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
				return describeOut(types.TableStatusActive, types.IndexStatusActive, "late_ix", "fast_ix", "by_bucket_shard"), nil
			},
		}).ttlOff()
		if err := newStore(t, f, Options{}).CreateTable(context.Background()); err != nil {
			t.Fatalf("CreateTable on an existing table: %v", err)
		}
		wantTTLOn(t, f)
	})
	t.Run("existing table without the bucket index", func(t *testing.T) {
		var added atomic.Bool
		var describes atomic.Int64
		f := (&fakeAPI{
			create: func(context.Context, *dynamodb.CreateTableInput) error {
				return sdkErr("CreateTable", 400, &types.ResourceInUseException{})
			},
			describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
				describes.Add(1)
				if !added.Load() {
					return describeOut(types.TableStatusActive, types.IndexStatusActive, "late_ix", "fast_ix"), nil
				}
				out := describeOut(types.TableStatusActive, types.IndexStatusActive, "late_ix", "fast_ix", "by_bucket_shard")
				if describes.Load() < 4 {
					out.Table.GlobalSecondaryIndexes[2].IndexStatus = types.IndexStatusCreating
					out.Table.GlobalSecondaryIndexes[2].Backfilling = aws.Bool(true)
				}
				return out, nil
			},
			updateTable: func(context.Context, *dynamodb.UpdateTableInput) error { added.Store(true); return nil },
		}).ttlOff()
		if err := newStore(t, f, Options{}).CreateTable(context.Background()); err != nil {
			t.Fatalf("CreateTable on a table without by_bucket_shard: %v", err)
		}
		if len(f.tableUpdates) != 1 {
			t.Fatalf("%d UpdateTable calls, want 1", len(f.tableUpdates))
		}
		u := f.tableUpdates[0]
		if len(u.GlobalSecondaryIndexUpdates) != 1 || u.GlobalSecondaryIndexUpdates[0].Create == nil {
			t.Fatalf("UpdateTable %+v, want one Create", u)
		}
		c := u.GlobalSecondaryIndexUpdates[0].Create
		if aws.ToString(c.IndexName) != "by_bucket_shard" || keyString(c.KeySchema) != "[bucket_shard HASH entity RANGE]" ||
			c.Projection.ProjectionType != types.ProjectionTypeAll || c.ProvisionedThroughput != nil {
			t.Errorf("index created: %s %s %v %v, want by_bucket_shard [bucket_shard HASH entity RANGE] ALL, no throughput",
				aws.ToString(c.IndexName), keyString(c.KeySchema), c.Projection.ProjectionType, c.ProvisionedThroughput)
		}
		if got := describes.Load(); got < 4 {
			t.Errorf("%d DescribeTable calls, want CreateTable to wait until the new index is ACTIVE", got)
		}
		wantTTLOn(t, f)
	})
	t.Run("existing table, wrong schema", func(t *testing.T) {
		f := (&fakeAPI{
			create: func(context.Context, *dynamodb.CreateTableInput) error {
				return sdkErr("CreateTable", 400, &types.ResourceInUseException{})
			},
			describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
				out := describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix")
				out.Table.KeySchema = out.Table.KeySchema[:1]
				return out, nil
			},
		}).ttlOff()
		err := newStore(t, f, Options{}).CreateTable(context.Background())
		if err == nil || !strings.Contains(err.Error(), "late_ix") || !strings.Contains(err.Error(), "key schema") {
			t.Fatalf("CreateTable = %v, want an error naming the key schema and late_ix", err)
		}
	})
	t.Run("never active", func(t *testing.T) {
		f := (&fakeAPI{
			create: func(context.Context, *dynamodb.CreateTableInput) error { return nil },
			describe: func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
				return describeOut(types.TableStatusCreating, types.IndexStatusCreating, "fast_ix", "late_ix", "by_bucket_shard"), nil
			},
		}).ttlOff()
		err := newStore(t, f, Options{TableWait: 100 * time.Millisecond}).CreateTable(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("CreateTable = %v, want a deadline error", err)
		}
	})
	t.Run("other error", func(t *testing.T) {
		f := (&fakeAPI{create: func(context.Context, *dynamodb.CreateTableInput) error {
			return sdkErr("CreateTable", 400, &types.LimitExceededException{})
		}}).ttlOff()
		var le *types.LimitExceededException
		if err := newStore(t, f, Options{}).CreateTable(context.Background()); !errors.As(err, &le) {
			t.Fatalf("CreateTable = %v, want the LimitExceededException", err)
		}
	})
}

// wantTTLOn checks that f was asked once to turn TTL on for expires_at.
func wantTTLOn(t *testing.T, f *fakeAPI) {
	t.Helper()
	if len(f.ttlUpdates) != 1 {
		t.Fatalf("%d UpdateTimeToLive calls, want 1", len(f.ttlUpdates))
	}
	spec := f.ttlUpdates[0].TimeToLiveSpecification
	if spec == nil || aws.ToString(spec.AttributeName) != "expires_at" || !aws.ToBool(spec.Enabled) {
		t.Fatalf("UpdateTimeToLive %+v, want expires_at enabled", spec)
	}
}

func TestCreateTableTTL(t *testing.T) {
	active := func(context.Context, *dynamodb.DescribeTableInput) (*dynamodb.DescribeTableOutput, error) {
		return describeOut(types.TableStatusActive, types.IndexStatusActive, "fast_ix", "late_ix", "by_bucket_shard"), nil
	}
	ttlIs := func(status types.TimeToLiveStatus, attr string) func(context.Context, *dynamodb.DescribeTimeToLiveInput) (*dynamodb.DescribeTimeToLiveOutput, error) {
		return func(context.Context, *dynamodb.DescribeTimeToLiveInput) (*dynamodb.DescribeTimeToLiveOutput, error) {
			d := &types.TimeToLiveDescription{TimeToLiveStatus: status}
			if attr != "" {
				d.AttributeName = aws.String(attr)
			}
			return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: d}, nil
		}
	}
	unknown := sdkErr("UpdateTimeToLive", 400, &smithy.GenericAPIError{Code: "UnknownOperationException"})
	for _, c := range []struct {
		name        string
		describeTTL func(context.Context, *dynamodb.DescribeTimeToLiveInput) (*dynamodb.DescribeTimeToLiveOutput, error)
		updateErr   error
		wantUpdates int
		wantErr     string
	}{
		{name: "disabled", describeTTL: ttlIs(types.TimeToLiveStatusDisabled, ""), wantUpdates: 1},
		{name: "already on", describeTTL: ttlIs(types.TimeToLiveStatusEnabled, "expires_at")},
		{name: "being turned on", describeTTL: ttlIs(types.TimeToLiveStatusEnabling, "expires_at")},
		{name: "on another attribute", describeTTL: ttlIs(types.TimeToLiveStatusEnabled, "ttl"), wantErr: `TTL on attribute "ttl"`},
		{name: "being turned off", describeTTL: ttlIs(types.TimeToLiveStatusDisabling, "expires_at"), wantErr: "being turned off"},
		{name: "stand-in without UpdateTimeToLive", describeTTL: ttlIs(types.TimeToLiveStatusDisabled, ""), updateErr: unknown, wantUpdates: 1},
		{name: "update fails", describeTTL: ttlIs(types.TimeToLiveStatusDisabled, ""), wantUpdates: 1,
			updateErr: sdkErr("UpdateTimeToLive", 400, &types.LimitExceededException{}), wantErr: "turn on TTL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{
				create:      func(context.Context, *dynamodb.CreateTableInput) error { return nil },
				describe:    active,
				describeTTL: c.describeTTL,
				updateTTL:   func(context.Context, *dynamodb.UpdateTimeToLiveInput) error { return c.updateErr },
			}
			err := newStore(t, f, Options{}).CreateTable(context.Background())
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("CreateTable: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("CreateTable = %v, want an error with %q", err, c.wantErr)
			}
			if len(f.ttlUpdates) != c.wantUpdates {
				t.Fatalf("%d UpdateTimeToLive calls, want %d", len(f.ttlUpdates), c.wantUpdates)
			}
		})
	}
}

// TestPutSetsExpiry checks the TTL attribute of every write: tagged writes
// SET expires_at to the end of the bucket plus the retention of its kind,
// the recount's only if_not_exists, and Forever leaves it out.
func TestPutSetsExpiry(t *testing.T) {
	minute := sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"} // ends 10:15:00Z
	hour := sink.Key{Entity: "ad_7", Bucket: "H2026-11-29T10Z"}      // ends 11:00:00Z
	minuteEnd := time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC).Unix()
	hourEnd := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC).Unix()
	const day = 24 * 3600
	for _, c := range []struct {
		name                 string
		o                    Options
		wantMinute, wantHour int64 // 0: no expires_at
	}{
		{name: "default", wantMinute: minuteEnd + 35*day, wantHour: hourEnd + 400*day},
		{name: "configured", o: Options{Retention: sink.Retention{Minute: 7 * 24 * time.Hour, Hour: 800 * 24 * time.Hour}},
			wantMinute: minuteEnd + 7*day, wantHour: hourEnd + 800*day},
		{name: "forever", o: Options{Retention: sink.Retention{Minute: sink.Forever, Hour: sink.Forever}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
			s := newStore(t, f, c.o)
			ctx := context.Background()
			if _, err := s.Put(ctx, []sink.Put{
				{Key: minute, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1, ClosedRow: true, RestoredCkpt: 2},
				{Key: hour, Writer: sink.Late, Valid: 2, Epoch: 3, Gen: 1},
			}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: hour, Valid: 3, Gen: 1, AtMs: 5}}); err != nil {
				t.Fatalf("PutFinal: %v", err)
			}
			if len(f.updates) != 3 {
				t.Fatalf("%d UpdateItem calls, want 3", len(f.updates))
			}
			for _, u := range f.updates {
				b := testenv.AttrS(u.Key, "bucket")
				want := c.wantMinute
				if b == hour.Bucket {
					want = c.wantHour
				}
				expr := aws.ToString(u.UpdateExpression)
				final := strings.Contains(expr, "#a = :a")
				if want == 0 {
					if strings.Contains(expr, "#ea") || u.ExpressionAttributeNames["#ea"] != "" || u.ExpressionAttributeValues[":ea"] != nil {
						t.Errorf("%s %q: expression %q sets an expiry, want none", b, u.ExpressionAttributeNames["#v"], expr)
					}
					continue
				}
				setExpr := "#ea = :ea"
				if final {
					setExpr = "#ea = if_not_exists(#ea, :ea)"
				}
				if !strings.Contains(expr, setExpr) || u.ExpressionAttributeNames["#ea"] != "expires_at" {
					t.Errorf("%s: expression %q names %v, want %q with #ea = expires_at", b, expr, u.ExpressionAttributeNames, setExpr)
				}
				if got := testenv.AttrN(u.ExpressionAttributeValues, ":ea"); got != want {
					t.Errorf("%s final=%v: expires_at %d, want %d (%v)", b, final, got, want, time.Unix(want, 0).UTC())
				}
			}
		})
	}
}

func TestDecodeItem(t *testing.T) {
	av := item("ad_7", "H2026-11-29T10Z", map[string]types.AttributeValue{
		"job_gen": num(8), "wf": num(4), "late_valid": num(3), "late_spend_micros": num(30), "late_ckpt": num(41),
		"late_ix": str("41#5"), "late_gen": num(8), "final_gen": num(2), "other": str("ignored"),
	})
	got, err := decodeItem(av)
	if err != nil {
		t.Fatalf("decodeItem: %v", err)
	}
	want := sink.Item{Key: sink.Key{Entity: "ad_7", Bucket: "H2026-11-29T10Z"}, JobGen: 8, HasJobGen: true, Fence: 4,
		Late:  sink.Tagged{Present: true, Valid: 3, SpendMicros: 30, Ckpt: 41, Ix: "41#5", Gen: 8},
		Final: sink.FinalAttrs{Present: true, Gen: 2}}
	if got != want {
		t.Fatalf("decodeItem:\n got  %+v\n want %+v", got, want)
	}
	for name, bad := range map[string]types.AttributeValue{
		"fast_valid": str("3"), "fast_ix": num(1), "job_gen": &types.AttributeValueMemberN{Value: "1.5"}, "wf": str("4"),
	} {
		if _, err := decodeItem(item("a", "b", map[string]types.AttributeValue{name: bad})); err == nil {
			t.Errorf("decodeItem with %s = %v: got nil error", name, bad)
		}
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
	a := newStore(t, f, Options{Table: "one", Registerer: reg})
	newStore(t, f, Options{Table: "two", Registerer: reg}) // another table, same registry
	if _, err := New(f, Options{Table: "one", Registerer: reg}); err == nil {
		t.Errorf("New for a table already registered: got nil error")
	}
	if _, err := a.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Gen: 1}}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"adclick_dynamo_writes_total", "adclick_dynamo_request_duration_seconds"} {
		if !names[want] {
			t.Errorf("registry lacks %s; has %v", want, names)
		}
	}
}

func TestNewClient(t *testing.T) {
	c := NewClient(aws.Config{Region: "us-east-1", HTTPClient: &http.Client{}}, Options{})
	if _, ok := c.Options().Retryer.(aws.NopRetryer); !ok {
		t.Fatalf("client retryer %T, want aws.NopRetryer", c.Options().Retryer)
	}
	if _, ok := c.Options().HTTPClient.(*http.Client); !ok {
		t.Fatalf("a caller's own HTTP client was replaced by %T", c.Options().HTTPClient)
	}
}

// TestScopedRequests checks what a view with a scope sends: Put writes the
// scoped index key, QueryIndex asks for the scoped form of the key it is
// given, and the views share the store's in-flight bound.
func TestScopedRequests(t *testing.T) {
	ixOf := func(in *dynamodb.UpdateItemInput) string {
		return in.ExpressionAttributeValues[":ix"].(*types.AttributeValueMemberS).Value
	}
	f := &fakeAPI{
		update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil },
		query: func(context.Context, *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
			return &dynamodb.QueryOutput{}, nil
		},
	}
	s := newStore(t, f, Options{Table: "tbl"})
	a, err := s.Scoped("kg0-16")
	if err != nil {
		t.Fatalf("Scoped: %v", err)
	}
	b, err := s.Scoped("kg17-33")
	if err != nil {
		t.Fatalf("Scoped: %v", err)
	}
	none, err := a.Scoped("")
	if err != nil {
		t.Fatalf("Scoped(\"\"): %v", err)
	}
	if a.Scope() != "kg0-16" || none.Scope() != "" || s.Scope() != "" {
		t.Fatalf("scopes %q %q %q, want kg0-16, \"\", \"\"", a.Scope(), none.Scope(), s.Scope())
	}
	if a.sem != s.sem || a.m != s.m || a.api != s.api {
		t.Fatal("a view does not share the store's client, metrics and in-flight bound")
	}
	ix := sink.IndexKey(41, k1)
	for _, c := range []struct {
		st   *Store
		want string
	}{{s, ix}, {none, ix}, {a, "kg0-16/" + ix}, {b, "kg17-33/" + ix}} {
		f.mu.Lock()
		f.updates, f.queries = nil, nil
		f.mu.Unlock()
		if _, err := c.st.Put(context.Background(), []sink.Put{{Key: k1, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7}}); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if got := ixOf(f.updates[0]); got != c.want {
			t.Errorf("scope %q: Put writes fast_ix %q, want %q", c.st.Scope(), got, c.want)
		}
		if err := c.st.QueryIndex(context.Background(), sink.Fast, ix, func(sink.Item) error { return nil }); err != nil {
			t.Fatalf("QueryIndex: %v", err)
		}
		if got := f.queries[0].ExpressionAttributeValues[":ix"].(*types.AttributeValueMemberS).Value; got != c.want {
			t.Errorf("scope %q: QueryIndex(%q) asks for %q, want %q", c.st.Scope(), ix, got, c.want)
		}
	}
	for _, bad := range []string{"kg/1", "kg#1", "kg:1", "{kg}"} {
		if v, err := s.Scoped(bad); err == nil || !strings.HasPrefix(err.Error(), "dynamo: ") {
			t.Errorf("Scoped(%q) = %v, %v; want a dynamo: error", bad, v, err)
		}
	}
}
