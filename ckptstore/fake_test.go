package ckptstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// fakeS3 is an in-memory bucket with the semantics a Remote relies on:
// read-after-write, typed NoSuchKey/NotFound errors, ListObjectsV2 in key
// order with pagination (pageSize keys per page).
type fakeS3 struct {
	mu       sync.Mutex
	bucket   string
	objs     map[string]fakeObj
	now      func() time.Time
	pageSize int
	puts     []string // keys put, in order
}

type fakeObj struct {
	data []byte
	mod  time.Time
}

func newFakeS3(bucket string, now func() time.Time) *fakeS3 {
	return &fakeS3{bucket: bucket, objs: map[string]fakeObj{}, now: now, pageSize: 7}
}

var _ API = (*fakeS3)(nil)

func (f *fakeS3) check(b *string) error {
	if aws.ToString(b) != f.bucket {
		return &types.NoSuchBucket{Message: aws.String("no bucket " + aws.ToString(b))}
	}
	return nil
}

func (f *fakeS3) PutObject(ctx context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	if _, ok := in.Body.(io.Seeker); !ok {
		return nil, fmt.Errorf("fake s3: body of %s is not seekable", aws.ToString(in.Key))
	}
	b, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	if in.ContentLength != nil && *in.ContentLength != int64(len(b)) {
		return nil, fmt.Errorf("fake s3: content length %d, body %d", *in.ContentLength, len(b))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs[aws.ToString(in.Key)] = fakeObj{data: b, mod: f.now()}
	f.puts = append(f.puts, aws.ToString(in.Key))
	return &s3.PutObjectOutput{}, nil
}

func (f *fakeS3) GetObject(ctx context.Context, in *s3.GetObjectInput, _ ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	f.mu.Lock()
	o, ok := f.objs[aws.ToString(in.Key)]
	f.mu.Unlock()
	if !ok {
		return nil, &types.NoSuchKey{Message: aws.String("no such key")}
	}
	return &s3.GetObjectOutput{Body: io.NopCloser(bytes.NewReader(o.data)), ContentLength: aws.Int64(int64(len(o.data)))}, nil
}

func (f *fakeS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, _ ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	f.mu.Lock()
	o, ok := f.objs[aws.ToString(in.Key)]
	f.mu.Unlock()
	if !ok {
		return nil, &types.NotFound{Message: aws.String("not found")}
	}
	return &s3.HeadObjectOutput{ContentLength: aws.Int64(int64(len(o.data)))}, nil
}

func (f *fakeS3) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, _ ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.objs {
		if strings.HasPrefix(k, aws.ToString(in.Prefix)) && k > aws.ToString(in.ContinuationToken) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := &s3.ListObjectsV2Output{}
	if len(keys) > f.pageSize {
		keys = keys[:f.pageSize]
		out.IsTruncated = aws.Bool(true)
		out.NextContinuationToken = aws.String(keys[len(keys)-1])
	}
	for _, k := range keys {
		o := f.objs[k]
		out.Contents = append(out.Contents, types.Object{Key: aws.String(k), Size: aws.Int64(int64(len(o.data))), LastModified: aws.Time(o.mod)})
	}
	out.KeyCount = aws.Int32(int32(len(keys)))
	return out, nil
}

func (f *fakeS3) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, _ ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	f.mu.Lock()
	delete(f.objs, aws.ToString(in.Key))
	f.mu.Unlock()
	return &s3.DeleteObjectOutput{}, nil
}

func (f *fakeS3) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, _ ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	if err := f.check(in.Bucket); err != nil {
		return nil, err
	}
	if n := len(in.Delete.Objects); n == 0 || n > 1000 {
		return nil, fmt.Errorf("fake s3: delete of %d objects: want 1 to 1000", n)
	}
	f.mu.Lock()
	for _, o := range in.Delete.Objects {
		delete(f.objs, aws.ToString(o.Key))
	}
	f.mu.Unlock()
	return &s3.DeleteObjectsOutput{}, nil
}

// keys returns the stored keys with prefix, sorted.
func (f *fakeS3) keys(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ks []string
	for k := range f.objs {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// faultAPI wraps an API and lets a test fail or intercept puts.
type faultAPI struct {
	API
	mu    sync.Mutex
	onPut func(key string) error // called before each put; an error fails it
}

func (f *faultAPI) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	f.mu.Lock()
	hook := f.onPut
	f.mu.Unlock()
	if hook != nil {
		if err := hook(aws.ToString(in.Key)); err != nil {
			return nil, err
		}
	}
	return f.API.PutObject(ctx, in, o...)
}

func (f *faultAPI) setOnPut(h func(key string) error) {
	f.mu.Lock()
	f.onPut = h
	f.mu.Unlock()
}
