package kinesis

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// API is the subset of *kinesis.Client this package calls. The polling and
// putting calls pass the stream name; the enhanced fan-out calls
// (RegisterStreamConsumer, DescribeStreamConsumer, SubscribeToShard,
// ListStreamConsumers) take
// the stream's or the consumer's ARN, as the service requires.
// Implementations must be safe for concurrent use.
type API interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, optFns ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
	CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, optFns ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error)
	ListStreamConsumers(ctx context.Context, in *kinesis.ListStreamConsumersInput, optFns ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error)
}

var _ API = (*kinesis.Client)(nil)

// errKind classifies an error from a Kinesis call.
type errKind int

const (
	errTransient errKind = iota // retry with backoff, counted against MaxErrors
	errThrottle                 // retry with backoff, not counted
	errExpired                  // re-acquire the iterator
	errInUse                    // a subscription of the consumer and shard is held: retry with backoff, not counted
	errFatal                    // stop: the stream or shard is gone, or the request is wrong
)

func classify(err error) errKind {
	var (
		pte  *types.ProvisionedThroughputExceededException
		lee  *types.LimitExceededException
		kmst *types.KMSThrottlingException
		exp  *types.ExpiredIteratorException
		riu  *types.ResourceInUseException
		rnf  *types.ResourceNotFoundException
		inv  *types.InvalidArgumentException
		acc  *types.AccessDeniedException
	)
	switch {
	case errors.As(err, &pte), errors.As(err, &lee), errors.As(err, &kmst):
		return errThrottle
	case errors.As(err, &exp):
		return errExpired
	case errors.As(err, &riu):
		return errInUse
	case errors.As(err, &rnf), errors.As(err, &inv), errors.As(err, &acc):
		return errFatal
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == 429 {
		return errThrottle
	}
	return errTransient
}
