package kinesis_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/ingest/kinesis/kinesistest"
	"github.com/adclick/adclick/ingest/kpl"
	"github.com/adclick/adclick/internal/testenv"
)

const clickHour = testenv.ClickHourMs // 2026-11-29T10:00Z

func lineHash(l string) string {
	h := sha256.Sum256([]byte(l))
	return hex.EncodeToString(h[:])
}

// userRecord is a user record as the stream holds it.
type userRecord struct{ shard, pk, data string }

// userRecords returns the stream's user records, shard by shard,
// de-aggregating KPL records.
func userRecords(t *testing.T, f *kinesistest.Fake) []userRecord {
	t.Helper()
	var out []userRecord
	for _, r := range f.Records(stream) {
		if !kpl.IsAggregated(r.Data) {
			out = append(out, userRecord{r.Shard, r.PartitionKey, string(r.Data)})
			continue
		}
		if _, err := kpl.Deaggregate(r.Data, func(_ int, pk string, data []byte) error {
			out = append(out, userRecord{r.Shard, pk, string(data)})
			return nil
		}); err != nil {
			t.Fatalf("record %s: %v", r.Seq, err)
		}
	}
	return out
}

func newPutter(t *testing.T, api kinesis.API, o kinesis.PutterOptions) *kinesis.Putter {
	t.Helper()
	p, err := kinesis.NewPutter(context.Background(), api, stream, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPartitionKey checks the key of a line: its click_id, or the hash of
// the line.
func TestPartitionKey(t *testing.T) {
	long := func(n int) string { return testenv.ClickLine(strings.Repeat("k", n), "hot", "s0", clickHour, 0) }
	for _, tc := range []struct {
		name, line, want string
	}{
		{"click_id", testenv.ClickLine("c-1", "hot", "s0", clickHour, 0), "c-1"},
		{"unicode_click_id", testenv.ClickLine("é🎉", "hot", "s0", clickHour, 0), "é🎉"},
		{"click_id_256_bytes", long(256), strings.Repeat("k", 256)},
		{"click_id_257_bytes", long(257), lineHash(long(257))},
		{"no_click_id", `{"ad_id":"hot"}`, lineHash(`{"ad_id":"hot"}`)},
		{"not_json", "not json", lineHash("not json")},
		{"invalid_click_still_keyed", `{"click_id":"c-2","ad_id":"hot","spend_micros":-1}`, "c-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ingest.Click
			ingest.Decode([]byte(tc.line), &c)
			if got := kinesis.PartitionKey([]byte(tc.line), &c); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPutterBatchesAndShards: a batch is one PutRecords call of at most
// 500 records and 5 MiB; the n-th distinct shard value goes to the n-th
// shard (wrapping around), in order; every record is keyed by its click id.
func TestPutterBatchesAndShards(t *testing.T) {
	f := newStream(t, 2)
	p := newPutter(t, f, kinesis.PutterOptions{})
	ctx := context.Background()
	values := []string{"b", "a", "c"} // first seen b, then a, then c: shards 0, 1, 0
	for i := range 1200 {
		if err := p.Add(ctx, []byte(testenv.ClickLine(fmt.Sprintf("c%04d", i), "hot", values[i%3], clickHour, 0)), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Calls("PutRecords"); got != 2 {
		t.Errorf("PutRecords calls before Flush: got %d, want 2 (two full batches of 500)", got)
	}
	if got := p.Sent(); got != 1000 {
		t.Errorf("sent before Flush: got %d, want 1000", got)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, sent := f.Calls("PutRecords"), p.Sent(); got != 3 || sent != 1200 {
		t.Errorf("after Flush: %d calls, %d sent; want 3 and 1200", got, sent)
	}
	const sh0, sh1 = "shardId-000000000000", "shardId-000000000001"
	n := map[string]int{}
	for _, r := range userRecords(t, f) {
		var c ingest.Click
		ingest.Decode([]byte(r.data), &c)
		want := map[string]string{"b": sh0, "a": sh1, "c": sh0}[c.Shard]
		if r.shard != want || r.pk != c.ClickID {
			t.Fatalf("%s (shard value %s): got shard %s, key %s; want %s, key %s", c.ClickID, c.Shard, r.shard, r.pk, want, c.ClickID)
		}
		n[r.shard]++
	}
	if n[sh0] != 800 || n[sh1] != 400 {
		t.Errorf("records per shard: got %v, want 800 on %s and 400 on %s", n, sh0, sh1)
	}

	// Bytes: five records of 1 MiB − 100 (and their keys) fill a call.
	f = newStream(t, 2)
	p = newPutter(t, f, kinesis.PutterOptions{})
	for i := range 11 {
		if err := p.Add(ctx, []byte(testenv.SizedClickLine(fmt.Sprintf("big%02d", i), 1<<20-100)), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls("PutRecords"); got != 3 {
		t.Errorf("PutRecords calls for 11 records of 1 MiB − 100: got %d, want 3 (5, 5, 1)", got)
	}
}

// TestPutterRefusesTooLargeLines: a line over the record limit (or over
// the aggregated record's, when aggregating) is refused with a
// *TooLargeError and changes nothing, not even the shard numbering.
func TestPutterRefusesTooLargeLines(t *testing.T) {
	ctx := context.Background()
	boundary := testenv.SizedClickLine("c4", kinesis.MaxRecordBytes-len("c4")) // exactly 1 MiB with its partition key
	for _, tc := range []struct {
		name      string
		aggregate bool
		line      string
		want      kinesis.TooLargeError
	}{
		{"over_limit", false, testenv.SizedClickLine("c2", kinesis.MaxRecordBytes+10), kinesis.TooLargeError{Bytes: kinesis.MaxRecordBytes + 12}},
		{"over_limit_aggregated", true, testenv.SizedClickLine("c2", kinesis.MaxRecordBytes+10), kinesis.TooLargeError{Bytes: kinesis.MaxRecordBytes + 12}},
		{"boundary_aggregated", true, boundary, kinesis.TooLargeError{Bytes: kinesis.MaxRecordBytes, Aggregated: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStream(t, 2)
			p := newPutter(t, f, kinesis.PutterOptions{Aggregate: tc.aggregate})
			// The refused line has shard value "s0"; the next line's "s1"
			// is then the first value seen and goes to the first shard.
			err := p.Add(ctx, []byte(tc.line), 1)
			var tl *kinesis.TooLargeError
			if !errors.As(err, &tl) || *tl != tc.want {
				t.Fatalf("got %v, want %+v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "kinesis: ") {
				t.Errorf("error %q is not kinesis:-prefixed", err)
			}
			if err := p.Add(ctx, []byte(testenv.ClickLine("c5", "hot", "s1", clickHour, 0)), 2); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			got := userRecords(t, f)
			if len(got) != 1 || got[0].pk != "c5" || got[0].shard != "shardId-000000000000" || p.Sent() != 1 {
				t.Errorf("got %+v (sent %d), want only c5, on the first shard", got, p.Sent())
			}
		})
	}
	// Without aggregation the boundary line fits.
	f := newStream(t, 1)
	p := newPutter(t, f, kinesis.PutterOptions{})
	if err := p.Add(ctx, []byte(boundary), 1); err != nil {
		t.Fatalf("a line of exactly 1 MiB with its key: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPutterAggregates: aggregated, the user records arrive in order on
// their shards, 5,000 to a batch.
func TestPutterAggregates(t *testing.T) {
	ctx := context.Background()
	f := newStream(t, 2)
	p := newPutter(t, f, kinesis.PutterOptions{Aggregate: true})
	var want []string
	for i := range 5001 {
		l := testenv.ClickLine(fmt.Sprintf("c%04d", i), "hot", "s0", clickHour, 0)
		want = append(want, l)
		if err := p.Add(ctx, []byte(l), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Sent(); got != 5000 {
		t.Errorf("sent before Flush: got %d, want one batch of 5000", got)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := userRecords(t, f)
	if len(got) != len(want) || p.Sent() != len(want) {
		t.Fatalf("got %d user records (sent %d), want %d", len(got), p.Sent(), len(want))
	}
	for i, r := range got {
		if r.data != want[i] || r.shard != "shardId-000000000000" {
			t.Fatalf("record %d: got %.40q on %s, want %.40q on the first shard", i, r.data, r.shard, want[i])
		}
	}
	if n := len(f.Records(stream)); n >= 100 {
		t.Errorf("%d Kinesis records for 5001 small user records, want them aggregated", n)
	}
}

// TestPutterCountsOldClicks: valid clicks the job will judge beyond the
// horizon (impression more than horizon + allowance before now) are
// counted, with the oldest; invalid lines are not clicks.
func TestPutterCountsOldClicks(t *testing.T) {
	now := time.UnixMilli(clickHour + 100*3_600_000)
	nowMs := now.UnixMilli()
	f := newStream(t, 1)
	p := newPutter(t, f, kinesis.PutterOptions{HorizonMs: 7_200_000, AllowanceMs: 5_000, Now: func() time.Time { return now }})
	for i, l := range []string{
		testenv.ClickLine("old1", "hot", "s0", nowMs-3*3_600_000, 0),
		testenv.ClickLine("new1", "hot", "s0", nowMs-60_000, 0),
		testenv.ClickLine("old2", "hot", "s0", nowMs-50*3_600_000, 0),
		"not json",
		testenv.ClickLine("edge", "hot", "s0", nowMs-7_200_000, 0),   // exactly the horizon: not old
		testenv.ClickLine("inside", "hot", "s0", nowMs-7_204_000, 0), // past the horizon, within the allowance: counted by the job
		testenv.ClickLine("edge2", "hot", "s0", nowMs-7_205_001, 0),  // arrival − allowance − 1 − horizon: still counted
		testenv.ClickLine("old3", "hot", "s0", nowMs-7_300_000, 0),
	} {
		if err := p.Add(context.Background(), []byte(l), i+1); err != nil {
			t.Fatal(err)
		}
	}
	want := kinesis.OldClicks{N: 3, Of: 7, OldestMs: nowMs - 50*3_600_000, MaxAgeMs: 50 * 3_600_000}
	if got := p.Old(); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestPutterFailedSaysWhatWasWritten: after a failed put, Failed names the
// records confirmed written and the last line among them.
func TestPutterFailedSaysWhatWasWritten(t *testing.T) {
	ctx := context.Background()
	ft := kinesistest.NewFaulty(newStream(t, 2))
	p := newPutter(t, ft, kinesis.PutterOptions{})
	gone := &types.ResourceNotFoundException{Message: aws.String("stream deleted")}
	if err := p.Failed(gone); err.Error() != "kinesis: no record confirmed written: ResourceNotFoundException: stream deleted" || !errors.Is(err, gone) {
		t.Errorf("before any put: got %q", err)
	}
	var err error
	for i := range 700 {
		if i == 600 {
			ft.Fail("PutRecords", 1, gone)
		}
		// Line numbers as a file with a blank first line gives them.
		if err = p.Add(ctx, []byte(testenv.ClickLine(fmt.Sprintf("c%d", i), "hot", "s0", clickHour, 0)), i+2); err != nil {
			break
		}
	}
	if err == nil {
		err = p.Flush(ctx)
	}
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("got %v, want the ResourceNotFoundException", err)
	}
	err = p.Failed(err)
	if want := "kinesis: 500 records confirmed written, through line 501; later lines may be partly written"; !strings.HasPrefix(err.Error(), want) || !errors.As(err, &rnf) {
		t.Errorf("got %q, want it to start with %q and wrap the cause", err, want)
	}
}

// TestNewPutterNeedsAnOpenShard: a stream that does not exist is an
// error.
func TestNewPutterNeedsAnOpenShard(t *testing.T) {
	if _, err := kinesis.NewPutter(context.Background(), kinesistest.NewFake(), "nope", kinesis.PutterOptions{}); err == nil {
		t.Fatal("NewPutter on a missing stream: got nil error")
	}
}
