package dynamo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
)

// TestPutSetsDefaultExpiry checks that a Store with the default options
// gives every row its TTL attribute: tagged writes SET expires_at to the
// end of the minute + 35 days or of the hour + 400 days, in Unix seconds;
// the recount's write sets it only if the row has none.
func TestPutSetsDefaultExpiry(t *testing.T) {
	f := &fakeAPI{update: func(context.Context, *dynamodb.UpdateItemInput) error { return nil }}
	s := newStore(t, f, Options{})
	ctx := context.Background()
	minute := sink.Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	hour := sink.Key{Entity: "ad_7", Bucket: "H2026-11-29T10Z"}
	if _, err := s.Put(ctx, []sink.Put{
		{Key: minute, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1, ClosedRow: true, RestoredCkpt: 2},
		{Key: hour, Writer: sink.Fast, Valid: 1, Epoch: 3, Gen: 1},
	}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: hour, Valid: 1, Gen: 1, AtMs: 5}}); err != nil {
		t.Fatalf("PutFinal: %v", err)
	}
	want := map[string]int64{
		minute.Bucket: time.Date(2026, 11, 29, 10, 15, 0, 0, time.UTC).Add(35 * 24 * time.Hour).Unix(),
		hour.Bucket:   time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC).Add(400 * 24 * time.Hour).Unix(),
	}
	if len(f.updates) != 3 {
		t.Fatalf("%d UpdateItem calls, want 3", len(f.updates))
	}
	for _, u := range f.updates {
		b, expr := testenv.AttrS(u.Key, "bucket"), aws.ToString(u.UpdateExpression)
		set := "#ea = :ea"
		if strings.Contains(expr, "#a = :a") { // the recount's
			set = "#ea = if_not_exists(#ea, :ea)"
		}
		if !strings.Contains(expr, set) || u.ExpressionAttributeNames["#ea"] != "expires_at" {
			t.Errorf("%s: update %q with names %v, want %q on expires_at", b, expr, u.ExpressionAttributeNames, set)
			continue
		}
		if got := testenv.AttrN(u.ExpressionAttributeValues, ":ea"); got != want[b] {
			t.Errorf("%s: expires_at %d (%v), want %d (%v)", b, got, time.Unix(got, 0).UTC(), want[b], time.Unix(want[b], 0).UTC())
		}
	}
}
