//go:build integration

package recount_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/recount/s3lake"
	"github.com/adclick/adclick/sink/sinktest"
)

var bucketSeq atomic.Int64

// s3Store returns an S3 store in a new bucket of the local S3 server.
func s3Store(t *testing.T) *s3lake.Store {
	t.Helper()
	endpoint := testenv.S3(t)
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", "")))
	if err != nil {
		t.Fatal(err)
	}
	cli := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = true
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	bucket := fmt.Sprintf("lake-%d-%d", time.Now().UnixNano()%1_000_000_000, bucketSeq.Add(1))
	if _, err := cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return s3lake.New(cli, bucket, "lake/"+strings.ToLower(t.Name()))
}

func TestS3StoreConformance(t *testing.T) { recount.TestStore(t, s3Store(t), false) }

func TestS3LakeRecountAndRemoveEpochs(t *testing.T) {
	ctx := context.Background()
	st := s3Store(t)
	lines := recount.GenLines(t, 6_000, 5, 4)
	ref := recount.Reference(t, lines)
	recount.SimulateStream(t, st, lines, 2000, 1)
	rows := sinktest.NewMemRows()
	if _, err := recount.Run(ctx, recount.Options{Store: st, Rows: rows, Hours: recount.RefHours(t, ref), Gen: 1, Watermark: recount.Forever, AcceptUnbalanced: "test: a lake recounted without the stream's rows"}); err != nil {
		t.Fatal(err)
	}
	recount.CompareFinals(t, recount.Finals(t, rows), ref)
	n, err := recount.RemoveEpochs(ctx, st, 2)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := st.List(ctx, "", "", func(k string) error { left = append(left, k); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range left {
		if e, ok := recount.ObjectEpoch(k); ok && e >= 2 {
			t.Errorf("object %s of epoch %d left after RemoveEpochs(2)", k, e)
		}
		if e, ok := recount.ManifestEpoch(k); ok && e >= 2 {
			t.Errorf("manifest %s of epoch %d left after RemoveEpochs(2)", k, e)
		}
	}
	if n == 0 || len(left) == 0 {
		t.Errorf("removed %d objects, %d left; want both > 0", n, len(left))
	}
}
