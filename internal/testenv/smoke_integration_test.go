//go:build integration

// Smoke tests for the local servers that scripts/test.sh starts: each test
// drives one server with the same client library the service uses, so a
// server that is missing, misconfigured or speaks the protocol differently
// fails here first, with a short, clear test.

package testenv_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/adclick/adclick/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// suffix returns a random name suffix so that repeated runs against the same
// servers never collide.
func suffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random suffix: %v", err)
	}
	return hex.EncodeToString(b)
}

// awsConfig loads the SDK's default configuration, the way the service does:
// endpoints come from AWS_ENDPOINT_URL_<SERVICE>, the region and keys from
// their usual variables. It keeps the SDK's buildable HTTP client (a plain
// *http.Client cannot be used when AWS_CA_BUNDLE is set) but turns off
// keep-alive, so no idle connection goroutine outlives the test (goleak).
func awsConfig(ctx context.Context, t *testing.T) aws.Config {
	t.Helper()
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.DisableKeepAlives = true })
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(hc))
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	return cfg
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poll calls f every 20 ms until it reports done, an error, or 10 s pass.
func poll(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := f()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSmokeKinesis(t *testing.T) {
	endpoint := testenv.Kinesis(t)
	ctx := testContext(t)
	c := kinesis.NewFromConfig(awsConfig(ctx, t))
	if got := aws.ToString(c.Options().BaseEndpoint); got != endpoint {
		t.Fatalf("kinesis client endpoint: got %q, want %q (AWS_ENDPOINT_URL_KINESIS not honoured)", got, endpoint)
	}

	stream := aws.String("smoke-" + suffix(t))
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: stream, ShardCount: aws.Int32(2)}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: stream})
	})
	poll(t, "stream active", func() (bool, error) {
		out, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: stream})
		if err != nil {
			return false, err
		}
		return out.StreamDescriptionSummary.StreamStatus == kintypes.StreamStatusActive, nil
	})

	shards, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: stream})
	if err != nil {
		t.Fatalf("list shards: %v", err)
	}
	if got := len(shards.Shards); got != 2 {
		t.Fatalf("shards: got %d, want 2", got)
	}

	data := []byte(`{"ad_id":"ad-1","ts":1700000000000}`)
	put, err := c.PutRecord(ctx, &kinesis.PutRecordInput{
		StreamName:   stream,
		PartitionKey: aws.String("ad-1"),
		Data:         data,
	})
	if err != nil {
		t.Fatalf("put record: %v", err)
	}
	found := false
	for _, s := range shards.Shards {
		if aws.ToString(s.ShardId) == aws.ToString(put.ShardId) {
			found = true
		}
	}
	if !found {
		t.Fatalf("put record went to shard %q, not one of the listed shards", aws.ToString(put.ShardId))
	}

	it, err := c.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName:        stream,
		ShardId:           put.ShardId,
		ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		t.Fatalf("get shard iterator: %v", err)
	}
	recs, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatalf("get records: %v", err)
	}
	if got := len(recs.Records); got != 1 {
		t.Fatalf("records: got %d, want 1", got)
	}
	r := recs.Records[0]
	if !bytes.Equal(r.Data, data) {
		t.Errorf("record data: got %q, want %q", r.Data, data)
	}
	if got := aws.ToString(r.PartitionKey); got != "ad-1" {
		t.Errorf("partition key: got %q, want %q", got, "ad-1")
	}
	if got, want := aws.ToString(r.SequenceNumber), aws.ToString(put.SequenceNumber); got != want {
		t.Errorf("sequence number: got %q, want %q", got, want)
	}
	if r.ApproximateArrivalTimestamp == nil {
		t.Errorf("approximate arrival timestamp: got nil, want a time")
	}
	if recs.NextShardIterator == nil {
		t.Errorf("next shard iterator: got nil, want one (the shard is open)")
	}
}

func TestSmokeDynamoDB(t *testing.T) {
	endpoint := testenv.DynamoDB(t)
	ctx := testContext(t)
	c := dynamodb.NewFromConfig(awsConfig(ctx, t))
	if got := aws.ToString(c.Options().BaseEndpoint); got != endpoint {
		t.Fatalf("dynamodb client endpoint: got %q, want %q (AWS_ENDPOINT_URL_DYNAMODB not honoured)", got, endpoint)
	}

	table := aws.String("smoke-" + suffix(t))
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   table,
		BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("gpk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("gsk"), AttributeType: ddbtypes.ScalarAttributeTypeN},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: ddbtypes.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []ddbtypes.GlobalSecondaryIndex{{
			IndexName: aws.String("by_g"),
			KeySchema: []ddbtypes.KeySchemaElement{
				{AttributeName: aws.String("gpk"), KeyType: ddbtypes.KeyTypeHash},
				{AttributeName: aws.String("gsk"), KeyType: ddbtypes.KeyTypeRange},
			},
			Projection: &ddbtypes.Projection{ProjectionType: ddbtypes.ProjectionTypeAll},
		}},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: table})
	})
	poll(t, "table active", func() (bool, error) {
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: table})
		if err != nil {
			return false, err
		}
		return out.Table.TableStatus == ddbtypes.TableStatusActive, nil
	})

	key := func(sk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: "ad-1"},
			"sk": &ddbtypes.AttributeValueMemberS{Value: sk},
		}
	}
	num := func(n int) *ddbtypes.AttributeValueMemberN {
		return &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(n)}
	}
	// add increments n on row sk under a condition; indexed rows carry the
	// GSI attributes, others leave the index (a sparse index).
	add := func(sk string, n int, cond string, indexed bool, vals map[string]ddbtypes.AttributeValue) error {
		update := "SET #n = if_not_exists(#n, :zero) + :n"
		av := map[string]ddbtypes.AttributeValue{":zero": num(0), ":n": num(n)}
		if indexed {
			update += ", gpk = :g, gsk = :s"
			av[":g"] = &ddbtypes.AttributeValueMemberS{Value: "minute"}
			av[":s"] = num(1700000040000)
		}
		for k, v := range vals {
			av[k] = v
		}
		in := &dynamodb.UpdateItemInput{
			TableName:                 table,
			Key:                       key(sk),
			UpdateExpression:          aws.String(update),
			ExpressionAttributeNames:  map[string]string{"#n": "clicks"},
			ExpressionAttributeValues: av,
		}
		if cond != "" {
			in.ConditionExpression = aws.String(cond)
		}
		_, err := c.UpdateItem(ctx, in)
		return err
	}

	if err := add("m1", 5, "attribute_not_exists(pk)", true, nil); err != nil {
		t.Fatalf("first conditional update: %v", err)
	}
	err = add("m1", 5, "attribute_not_exists(pk)", true, nil)
	var ccf *ddbtypes.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("repeated create: got error %v, want ConditionalCheckFailedException", err)
	}
	if err := add("m1", 2, "#n = :want", true, map[string]ddbtypes.AttributeValue{":want": num(5)}); err != nil {
		t.Fatalf("update on matching condition: %v", err)
	}
	if err := add("m2", 9, "", false, nil); err != nil {
		t.Fatalf("update of a row outside the index: %v", err)
	}

	q, err := c.Query(ctx, &dynamodb.QueryInput{
		TableName:                 table,
		IndexName:                 aws.String("by_g"),
		KeyConditionExpression:    aws.String("gpk = :g AND gsk BETWEEN :lo AND :hi"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": &ddbtypes.AttributeValueMemberS{Value: "minute"}, ":lo": num(1700000000000), ":hi": num(1700000059999)},
	})
	if err != nil {
		t.Fatalf("query index: %v", err)
	}
	if got := len(q.Items); got != 1 {
		t.Fatalf("index items: got %d, want 1 (only m1 is indexed)", got)
	}
	item := q.Items[0]
	if sk, ok := item["sk"].(*ddbtypes.AttributeValueMemberS); !ok || sk.Value != "m1" {
		t.Errorf("index item sk: got %#v, want m1", item["sk"])
	}
	if n, ok := item["clicks"].(*ddbtypes.AttributeValueMemberN); !ok || n.Value != "7" {
		t.Errorf("index item clicks: got %#v, want 7 (5, a refused 5, then 2)", item["clicks"])
	}
}

func TestSmokeS3(t *testing.T) {
	endpoint := testenv.S3(t)
	ctx := testContext(t)
	c := s3.NewFromConfig(awsConfig(ctx, t), func(o *s3.Options) { o.UsePathStyle = true })
	if got := aws.ToString(c.Options().BaseEndpoint); got != endpoint {
		t.Fatalf("s3 client endpoint: got %q, want %q (AWS_ENDPOINT_URL_S3 not honoured)", got, endpoint)
	}

	bucket := aws.String("smoke-" + suffix(t))
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: bucket}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	key := aws.String("lake/dt=2023-11-14/hour=22/part-0001.ndjson")
	body := []byte(strings.Repeat(`{"ad_id":"ad-1","verdict":"on_time"}`+"\n", 100))
	t.Cleanup(func() {
		_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: bucket, Key: key})
		_, _ = c.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: bucket})
	})

	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket:      bucket,
		Key:         key,
		Body:        bytes.NewReader(body),
		ContentType: aws.String("application/x-ndjson"),
	}); err != nil {
		t.Fatalf("put object: %v", err)
	}

	b := getObject(ctx, t, c, bucket, key)
	if !bytes.Equal(b, body) {
		t.Fatalf("object body: got %d bytes %q..., want %d bytes %q...", len(b), head(b), len(body), head(body))
	}

	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("lake/dt=2023-11-14/")})
	if err != nil {
		t.Fatalf("list objects: %v", err)
	}
	if len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != aws.ToString(key) {
		t.Fatalf("list objects: got %d keys, want exactly %q", len(list.Contents), aws.ToString(key))
	}

	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: aws.String("missing")})
	var nsk *s3types.NoSuchKey
	if !errors.As(err, &nsk) {
		t.Fatalf("get of a missing key: got error %v, want NoSuchKey", err)
	}
}

// TestSmokeS3AbortedPut: a PUT whose client goes away before the body is
// complete (a job killed while it writes a checkpoint) leaves the object as
// it was, as in S3. Bare s3rver stored the cut body ("ne"), and a restore
// then read a corrupt epoch high-water mark; scripts/servers/s3rver.js
// makes its PUTs atomic.
func TestSmokeS3AbortedPut(t *testing.T) {
	testenv.S3(t)
	ctx := testContext(t)
	c := s3.NewFromConfig(awsConfig(ctx, t), func(o *s3.Options) { o.UsePathStyle = true })
	bucket, key := aws.String("smoke-"+suffix(t)), aws.String("_high")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: bucket}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: bucket, Key: key})
		_, _ = c.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: bucket})
	})
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, Body: strings.NewReader("41")}); err != nil {
		t.Fatalf("put object: %v", err)
	}
	cut := &http.Client{Transport: cutBody{http.DefaultTransport.(*http.Transport).Clone()}}
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: key, Body: strings.NewReader("1234567")},
		func(o *s3.Options) { o.HTTPClient = cut; o.RetryMaxAttempts = 1 })
	if err == nil {
		t.Fatal("a PUT whose body was cut after 2 bytes succeeded")
	}
	for i := range 10 { // the server may notice the cut a little later
		if b := getObject(ctx, t, c, bucket, key); string(b) != "41" {
			t.Fatalf("read %d after a cut PUT: object %q, want the old %q", i, b, "41")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getObject returns the object's body.
func getObject(ctx context.Context, t *testing.T, c *s3.Client, bucket, key *string) []byte {
	t.Helper()
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: key})
	if err != nil {
		t.Fatalf("get object: %v", err)
	}
	defer got.Body.Close()
	b, err := io.ReadAll(got.Body)
	if err != nil {
		t.Fatalf("read object: %v", err)
	}
	return b
}

// cutBody sends the first 2 bytes of a request's body, then fails it: the
// transport closes the connection mid-request, as a killed client does.
type cutBody struct{ *http.Transport }

func (c cutBody) RoundTrip(r *http.Request) (*http.Response, error) {
	defer c.CloseIdleConnections()
	r.Body = &cutReader{r: r.Body}
	return c.Transport.RoundTrip(r)
}

type cutReader struct {
	r io.ReadCloser
	n int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.n >= 2 {
		time.Sleep(100 * time.Millisecond) // the first bytes reach the server
		return 0, errors.New("client killed")
	}
	n, err := c.r.Read(p[:min(len(p), 2-c.n)])
	c.n += n
	return n, err
}

func (c *cutReader) Close() error { return c.r.Close() }

func head(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func TestSmokeValkey(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := testContext(t)
	// Default options: RESP3 and client-side caching (CLIENT TRACKING), which
	// Redis 7.0 supports.
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	t.Cleanup(c.Close) // registered first, so it runs after the cleanup below

	key := "smoke:" + suffix(t)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Do(cctx, c.B().Del().Key(key).Build()).Error()
	})

	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("ad-1", "3").FieldValue("ad-2", "4").Build()).Error(); err != nil {
		t.Fatalf("hset: %v", err)
	}
	got, err := c.Do(ctx, c.B().Hget().Key(key).Field("ad-1").Build()).ToString()
	if err != nil {
		t.Fatalf("hget: %v", err)
	}
	if got != "3" {
		t.Fatalf("hget ad-1: got %q, want %q", got, "3")
	}
	n, err := c.Do(ctx, c.B().Hincrby().Key(key).Field("ad-2").Increment(10).Build()).AsInt64()
	if err != nil {
		t.Fatalf("hincrby: %v", err)
	}
	if n != 14 {
		t.Fatalf("hincrby ad-2: got %d, want 14", n)
	}

	// Client-side caching: a cached read, a hit on the second read, and an
	// invalidation pushed by the server after a write.
	cached := func() (string, bool) {
		r := c.DoCache(ctx, c.B().Hget().Key(key).Field("ad-1").Cache(), time.Minute)
		v, err := r.ToString()
		if err != nil {
			t.Fatalf("cached hget: %v", err)
		}
		return v, r.IsCacheHit()
	}
	if v, _ := cached(); v != "3" {
		t.Fatalf("cached hget ad-1: got %q, want %q", v, "3")
	}
	if v, hit := cached(); v != "3" || !hit {
		t.Fatalf("second cached hget ad-1: got %q (hit %v), want %q from the cache", v, hit, "3")
	}
	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("ad-1", "8").Build()).Error(); err != nil {
		t.Fatalf("hset after caching: %v", err)
	}
	poll(t, "cache invalidation", func() (bool, error) {
		v, _ := cached()
		return v == "8", nil
	})
}
