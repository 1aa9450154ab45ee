package awsfence_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/recount/s3lake"
	"github.com/adclick/adclick/sink/dynamo"
	"github.com/adclick/adclick/sink/fence"
)

// lostAfter is a Fence that lets the first n checks pass and fails the
// later ones: the holder lost its lease while it was inside the write
// (a pause after Run's check).
type lostAfter struct{ n atomic.Int64 }

var errLost = errors.New("fence test: lease lost")

func (f *lostAfter) Check() error {
	if f.n.Add(-1) < 0 {
		return errLost
	}
	return nil
}

func (f *lostAfter) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// TestClientsCheckTheFenceBeforeSending: a write that passed Run's lease
// check, of a holder that then lost its lease, is not sent by the project's
// DynamoDB client (the rows) nor by its two S3 clients (the lake and the
// checkpoint store): the check runs again after signing, right before each
// request leaves. Without it the server sees the request.
func TestClientsCheckTheFenceBeforeSending(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
	db := dynamo.NewClient(cfg, dynamo.Options{})
	lake := s3lake.NewClient(cfg)
	ckpts := ckptstore.NewS3Client(cfg)
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context) error
	}{
		{"dynamodb rows", func(ctx context.Context) error {
			_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"),
				Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}})
			return err
		}},
		{"s3 lake", func(ctx context.Context) error {
			_, err := lake.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: strings.NewReader("x")})
			return err
		}},
		{"s3 checkpoints", func(ctx context.Context) error {
			_, err := ckpts.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: strings.NewReader("x")})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got.Store(0)
			f := &lostAfter{}
			f.n.Store(1) // Run's own check passes
			err := fence.Run(context.Background(), f, tc.write)
			if n := got.Load(); n != 0 {
				t.Errorf("the server got %d requests of a holder that had lost its lease (err %v)", n, err)
			}
			if !errors.Is(err, errLost) {
				t.Errorf("write: %v, want the fence's error", err)
			}
			// A live holder's write is sent.
			got.Store(0)
			f.n.Store(1 << 20)
			fence.Run(context.Background(), f, tc.write)
			if got.Load() == 0 {
				t.Errorf("a live holder's write was not sent")
			}
		})
	}
}
