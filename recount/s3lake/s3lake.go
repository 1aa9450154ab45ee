// Package s3lake keeps the lake (package recount) in an S3 bucket, under a
// key prefix: the store AWS mode writes every click's verdict to and the
// recount reads. Embedded mode keeps the lake in a local folder instead
// (recount.Folder).
package s3lake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink/fence/awsfence"
)

// API is the part of the S3 client the lake uses (*s3.Client has it).
type API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// NewClient returns an S3 client for cfg with path-style addressing (as
// S3-compatible local servers need). The endpoint comes from the SDK's own
// configuration, e.g. AWS_ENDPOINT_URL_S3.
func NewClient(cfg aws.Config) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = true
		// A write run under a lease (fence.Run) is checked again right
		// before each request is sent.
		o.APIOptions = append(o.APIOptions, awsfence.CheckBeforeSend)
		// Stores that send no checksum (MinIO, s3rver) would otherwise get
		// an SDK debug line on stderr for every object read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
}

// ParseURL splits "s3://BUCKET/PREFIX" into bucket and prefix (without
// slashes at its ends; may be empty).
func ParseURL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", "", fmt.Errorf("s3lake: %q is not an s3://BUCKET/PREFIX URL", s)
	}
	return u.Host, strings.Trim(u.Path, "/"), nil
}

// Store is a lake in an S3 bucket under a key prefix. Bodies are sent as
// seekable readers so the SDK can compute checksums over plain HTTP. Safe for
// concurrent use.
type Store struct {
	api    API
	bucket string
	prefix string // "" or ending in "/"
}

var _ recount.Store = (*Store)(nil)

// New returns the store of bucket under prefix ("" = the bucket's root).
func New(api API, bucket, prefix string) *Store {
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Store{api: api, bucket: bucket, prefix: prefix}
}

// Put writes the object key.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := recount.ValidKey(key); err != nil {
		return err
	}
	_, err := s.api.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return fmt.Errorf("s3lake: s3 put %s: %w", key, err)
	}
	return nil
}

// Get reads the object key.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := recount.ValidKey(key); err != nil {
		return nil, err
	}
	out, err := s.api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, fmt.Errorf("s3lake: s3 get %s: %w", key, recount.ErrNotFound)
		}
		return nil, fmt.Errorf("s3lake: s3 get %s: %w", key, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, fmt.Errorf("s3lake: s3 get %s: %w", key, err)
	}
	return buf.Bytes(), nil
}

// List pages through ListObjectsV2. Keys come in the server's order: byte
// order on S3 (some S3-compatible servers order '/' differently).
func (s *Store) List(ctx context.Context, prefix, startAfter string, fn func(string) error) error {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(s.prefix + prefix)}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	for {
		out, err := s.api.ListObjectsV2(ctx, in)
		if err != nil {
			return fmt.Errorf("s3lake: s3 list %s: %w", prefix, err)
		}
		for _, o := range out.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if startAfter != "" && k <= startAfter {
				continue
			}
			if err := fn(k); err != nil {
				if errors.Is(err, recount.ErrStopList) {
					return nil
				}
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return nil
		}
		in.ContinuationToken = out.NextContinuationToken
		in.StartAfter = nil
	}
}

// Delete removes the object key (absent is fine, as in S3 itself).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := recount.ValidKey(key); err != nil {
		return err
	}
	_, err := s.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil
		}
		return fmt.Errorf("s3lake: s3 delete %s: %w", key, err)
	}
	return nil
}
