//go:build integration

package ckptstore

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/adclick/adclick/internal/testenv"
)

var bucketSeq atomic.Int64

// s3Env returns a Remote over a new bucket of the local S3 server, and a
// second Remote over the same bucket and prefix (a restarted process).
func s3Env(t *testing.T) (*remoteEnv, *remoteEnv) {
	t.Helper()
	endpoint := testenv.S3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.DisableKeepAlives = true })
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(hc))
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	c := NewS3Client(cfg)
	if got := aws.ToString(c.Options().BaseEndpoint); got != endpoint {
		t.Fatalf("s3 endpoint: got %q, want %q", got, endpoint)
	}
	bucket := fmt.Sprintf("ckpt-%d-%d", time.Now().UnixNano()%1e9, bucketSeq.Add(1))
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	clk := &clock{}
	e := newRemoteEnv(t, c, bucket, "jobs/"+strings.ToLower(t.Name()), clk)
	fresh := newRemoteEnv(t, c, bucket, "jobs/"+strings.ToLower(t.Name()), clk)
	return e, fresh
}

func TestS3Incremental(t *testing.T) {
	e, _ := s3Env(t)
	scenarioIncremental(t, e)
}

func TestS3ManifestLast(t *testing.T) {
	e, _ := s3Env(t)
	scenarioManifestLast(t, e)
}

func TestS3Prune(t *testing.T) {
	e, _ := s3Env(t)
	scenarioPrune(t, e)
}

func TestS3PruneDuringUpload(t *testing.T) {
	e, _ := s3Env(t)
	scenarioPruneDuringUpload(t, e)
}

func TestS3RestoreEmpty(t *testing.T) {
	e, fresh := s3Env(t)
	scenarioRestoreEmpty(t, e, fresh)
}

func TestS3Basics(t *testing.T) {
	e, _ := s3Env(t)
	scenarioBasics(t, e)
}
