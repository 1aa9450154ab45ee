package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
)

// Limits of the Kinesis service that kinesisHTTP enforces on PutRecords the
// way the service does: a violation fails the whole call with a
// ValidationException, not just the entry.
const (
	serviceMaxPartitionKey = 256     // characters
	serviceMaxRecordBytes  = 1 << 20 // data plus partition key, bytes
)

// kinesisHTTP serves the Kinesis JSON protocol (awsJson1.1) for ListShards
// and PutRecords from a kinesistest.Fake, so a command that builds its own
// SDK client (through AWS_ENDPOINT_URL_KINESIS) can be tested in-process.
// It checks the service limits the fake does not: partition keys of 1 to
// 256 characters, and at most 1 MiB of data plus partition key a record.
type kinesisHTTP struct {
	fake *kinesistest.Fake
	// putsLeft, if not nil, counts the PutRecords calls that may still
	// succeed; later ones fail with ResourceNotFoundException (a fatal
	// error: the stream was deleted).
	putsLeft *atomic.Int64
}

// newKinesisHTTP starts the server and points the AWS SDK's configuration
// (environment variables, for this test) at it.
func newKinesisHTTP(t *testing.T, k *kinesisHTTP) {
	t.Helper()
	srv := httptest.NewServer(k)
	t.Cleanup(srv.Close)
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_KINESIS":    srv.URL,
		"AWS_REGION":                  "us-east-1",
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             "/nonexistent",
		"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_MAX_ATTEMPTS":            "1",
	} {
		t.Setenv(k, v)
	}
}

type awsError struct {
	Type    string `json:"__type"`
	Message string `json:"message"`
}

func (k *kinesisHTTP) fail(w http.ResponseWriter, typ, format string, args ...any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", typ)
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(awsError{Type: typ, Message: fmt.Sprintf(format, args...)})
}

func (k *kinesisHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	var out any
	var err error
	switch op {
	case "ListShards":
		var in struct {
			StreamName *string
			NextToken  *string
			MaxResults *int32
		}
		if e := json.NewDecoder(r.Body).Decode(&in); e != nil {
			k.fail(w, "SerializationException", "%v", e)
			return
		}
		var o *kinesis.ListShardsOutput
		o, err = k.fake.ListShards(r.Context(), &kinesis.ListShardsInput{StreamName: in.StreamName, NextToken: in.NextToken, MaxResults: in.MaxResults})
		if err == nil {
			out = listShardsJSON(o)
		}
	case "PutRecords":
		if k.putsLeft != nil && k.putsLeft.Add(-1) < 0 {
			k.fail(w, "ResourceNotFoundException", "Stream clicks under account 000000000000 not found.")
			return
		}
		var in struct {
			StreamName *string
			Records    []struct {
				Data            []byte
				PartitionKey    string
				ExplicitHashKey *string
			}
		}
		if e := json.NewDecoder(r.Body).Decode(&in); e != nil {
			k.fail(w, "SerializationException", "%v", e)
			return
		}
		entries := make([]types.PutRecordsRequestEntry, len(in.Records))
		for i, rec := range in.Records {
			if n := utf8.RuneCountInString(rec.PartitionKey); n < 1 || n > serviceMaxPartitionKey {
				k.fail(w, "ValidationException", "1 validation error detected: Value at 'records.%d.member.partitionKey' failed to satisfy constraint: Member must have length between 1 and %d (has %d)", i+1, serviceMaxPartitionKey, n)
				return
			}
			if n := len(rec.Data) + len(rec.PartitionKey); n > serviceMaxRecordBytes {
				k.fail(w, "ValidationException", "1 validation error detected: records.%d: %d bytes of data plus partition key, more than %d", i+1, n, serviceMaxRecordBytes)
				return
			}
			entries[i] = types.PutRecordsRequestEntry{Data: rec.Data, PartitionKey: aws.String(rec.PartitionKey), ExplicitHashKey: rec.ExplicitHashKey}
		}
		var o *kinesis.PutRecordsOutput
		o, err = k.fake.PutRecords(r.Context(), &kinesis.PutRecordsInput{StreamName: in.StreamName, Records: entries})
		if err == nil {
			out = putRecordsJSON(o)
		}
	default:
		k.fail(w, "UnknownOperationException", "operation %q is not served by this test server", op)
		return
	}
	if err != nil {
		var rnf *types.ResourceNotFoundException
		var inv *types.InvalidArgumentException
		switch {
		case errors.As(err, &rnf):
			k.fail(w, "ResourceNotFoundException", "%s", aws.ToString(rnf.Message))
		case errors.As(err, &inv):
			k.fail(w, "InvalidArgumentException", "%s", aws.ToString(inv.Message))
		default:
			k.fail(w, "InternalFailure", "%v", err)
		}
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	json.NewEncoder(w).Encode(out)
}

func listShardsJSON(o *kinesis.ListShardsOutput) any {
	type hashRange struct{ StartingHashKey, EndingHashKey string }
	type seqRange struct {
		StartingSequenceNumber string
		EndingSequenceNumber   *string `json:",omitempty"`
	}
	type shard struct {
		ShardId             string
		ParentShardId       *string `json:",omitempty"`
		HashKeyRange        hashRange
		SequenceNumberRange seqRange
	}
	var out struct {
		Shards    []shard
		NextToken *string `json:",omitempty"`
	}
	for _, s := range o.Shards {
		out.Shards = append(out.Shards, shard{ShardId: aws.ToString(s.ShardId), ParentShardId: s.ParentShardId,
			HashKeyRange:        hashRange{aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey)},
			SequenceNumberRange: seqRange{aws.ToString(s.SequenceNumberRange.StartingSequenceNumber), s.SequenceNumberRange.EndingSequenceNumber}})
	}
	out.NextToken = o.NextToken
	return out
}

func putRecordsJSON(o *kinesis.PutRecordsOutput) any {
	type result struct {
		SequenceNumber, ShardId string
	}
	var out struct {
		FailedRecordCount int32
		Records           []result
	}
	out.FailedRecordCount = aws.ToInt32(o.FailedRecordCount)
	for _, r := range o.Records {
		out.Records = append(out.Records, result{aws.ToString(r.SequenceNumber), aws.ToString(r.ShardId)})
	}
	return out
}
