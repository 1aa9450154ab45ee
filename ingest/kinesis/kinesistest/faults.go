package kinesistest

import (
	"context"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	ikinesis "github.com/adclick/adclick/ingest/kinesis"
)

var _ ikinesis.API = (*Faulty)(nil)

// Faulty wraps an API and injects faults: Fail makes the next n calls of a
// method return an error without reaching the wrapped API;
// FailPutEntries makes PutRecords refuse some entries. Safe for concurrent
// use.
type Faulty struct {
	api ikinesis.API

	mu       sync.Mutex
	pending  map[string][]error
	injected map[string]int
	putFails int // PutRecords calls that still fail every other entry
}

// NewFaulty wraps api.
func NewFaulty(api ikinesis.API) *Faulty {
	return &Faulty{api: api, pending: map[string][]error{}, injected: map[string]int{}}
}

// Throttled returns the error the service gives when a shard's throughput
// is exceeded.
func Throttled() error {
	return &types.ProvisionedThroughputExceededException{Message: aws.String("rate exceeded for shard")}
}

// InUse returns the error the service gives for a second SubscribeToShard
// within 5 s, or a RegisterStreamConsumer of a consumer that exists.
func InUse() error {
	return &types.ResourceInUseException{Message: aws.String("resource in use")}
}

// Expired returns the error the service gives for an expired iterator.
func Expired() error {
	return &types.ExpiredIteratorException{Message: aws.String("iterator expired")}
}

// ServerError returns an HTTP 500 response error, as the SDK reports it
// after its own retries.
func ServerError() error {
	return &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusInternalServerError}},
		Err:      &types.InternalFailureException{Message: aws.String("internal failure")},
	}
}

// Fail makes the next n calls of method op (for example "GetRecords")
// return err.
func (f *Faulty) Fail(op string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.pending[op] = append(f.pending[op], err)
	}
}

// FailPutEntries makes the next n PutRecords calls refuse every other entry
// (the 1st, 3rd, …) with ProvisionedThroughputExceededException; the other
// entries are put.
func (f *Faulty) FailPutEntries(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.putFails += n
}

// Injected returns how many faults were injected into calls of op.
func (f *Faulty) Injected(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[op]
}

func (f *Faulty) take(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.pending[op]
	if len(q) == 0 {
		return nil
	}
	f.pending[op] = q[1:]
	f.injected[op]++
	return q[0]
}

func (f *Faulty) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if err := f.take("ListShards"); err != nil {
		return nil, err
	}
	return f.api.ListShards(ctx, in, o...)
}

func (f *Faulty) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if err := f.take("GetShardIterator"); err != nil {
		return nil, err
	}
	return f.api.GetShardIterator(ctx, in, o...)
}

func (f *Faulty) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if err := f.take("GetRecords"); err != nil {
		return nil, err
	}
	return f.api.GetRecords(ctx, in, o...)
}

func (f *Faulty) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, o ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	if err := f.take("CreateStream"); err != nil {
		return nil, err
	}
	return f.api.CreateStream(ctx, in, o...)
}

func (f *Faulty) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if err := f.take("DescribeStreamSummary"); err != nil {
		return nil, err
	}
	return f.api.DescribeStreamSummary(ctx, in, o...)
}

func (f *Faulty) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, o ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	if err := f.take("PutRecords"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	partial := f.putFails > 0
	if partial {
		f.putFails--
		f.injected["PutRecordsEntries"]++
	}
	f.mu.Unlock()
	if !partial {
		return f.api.PutRecords(ctx, in, o...)
	}
	sub := *in
	sub.Records = nil
	for i, e := range in.Records {
		if i%2 == 1 {
			sub.Records = append(sub.Records, e)
		}
	}
	res := make([]types.PutRecordsResultEntry, len(in.Records))
	failed := int32(0)
	for i := range in.Records {
		if i%2 == 0 {
			res[i] = types.PutRecordsResultEntry{ErrorCode: aws.String("ProvisionedThroughputExceededException"), ErrorMessage: aws.String("rate exceeded")}
			failed++
		}
	}
	if len(sub.Records) > 0 {
		out, err := f.api.PutRecords(ctx, &sub, o...)
		if err != nil {
			return nil, err
		}
		for j, r := range out.Records {
			res[2*j+1] = r
			if r.ErrorCode != nil {
				failed++
			}
		}
	}
	return &kinesis.PutRecordsOutput{Records: res, FailedRecordCount: aws.Int32(failed)}, nil
}

func (f *Faulty) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	if err := f.take("RegisterStreamConsumer"); err != nil {
		return nil, err
	}
	return f.api.RegisterStreamConsumer(ctx, in, o...)
}

func (f *Faulty) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	if err := f.take("DescribeStreamConsumer"); err != nil {
		return nil, err
	}
	return f.api.DescribeStreamConsumer(ctx, in, o...)
}

func (f *Faulty) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, o ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	if err := f.take("SubscribeToShard"); err != nil {
		return nil, err
	}
	return f.api.SubscribeToShard(ctx, in, o...)
}

func (f *Faulty) ListStreamConsumers(ctx context.Context, in *kinesis.ListStreamConsumersInput, o ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	if err := f.take("ListStreamConsumers"); err != nil {
		return nil, err
	}
	return f.api.ListStreamConsumers(ctx, in, o...)
}
