package dynamo

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/sink/fence/awsfence"
)

// NewClient returns a DynamoDB client suited to a Store with options o:
//   - the SDK's own retries are off (aws.NopRetryer). The Store retries
//     throttling, 5xx and transport errors itself, with backoff and metrics,
//     and never retries a refused condition; leaving the SDK's standard
//     retryer on as well would multiply the attempts (3 × MaxAttempts) and
//     add its client-side retry quota, which fails requests outright under
//     sustained throttling.
//   - when cfg uses the SDK's default HTTP client, its idle connection pool
//     per host is raised to o.MaxInFlight, so that MaxInFlight concurrent
//     requests reuse connections instead of opening new ones.
//
// optFns are applied last. The endpoint comes from cfg as usual (for a local
// stand-in, AWS_ENDPOINT_URL_DYNAMODB or cfg.BaseEndpoint).
func NewClient(cfg aws.Config, o Options, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	o.EnsureDefaults()
	n := max(o.MaxInFlight, 1)
	fns := []func(*dynamodb.Options){func(do *dynamodb.Options) {
		do.Retryer = aws.NopRetryer{}
		// A write run under a lease (fence.Run) is checked again right
		// before each request is sent.
		do.APIOptions = append(do.APIOptions, awsfence.CheckBeforeSend)
		if bc, ok := do.HTTPClient.(*awshttp.BuildableClient); ok || do.HTTPClient == nil {
			if bc == nil {
				bc = awshttp.NewBuildableClient()
			}
			do.HTTPClient = bc.WithTransportOptions(func(tr *http.Transport) {
				tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, n)
				if tr.MaxIdleConns != 0 {
					tr.MaxIdleConns = max(tr.MaxIdleConns, n)
				}
			})
		}
	}}
	return dynamodb.NewFromConfig(cfg, append(fns, optFns...)...)
}
