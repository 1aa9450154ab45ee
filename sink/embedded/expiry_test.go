package embedded

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

const day = 24 * time.Hour

// t0 is 2026-11-29T10:00:00Z.
const t0 = int64(1_795_946_400_000)

func minuteKey(ad string, ms int64) sink.Key {
	return sink.Key{Entity: ad, Bucket: sink.MinuteBucket(ms)}
}

func hourKey(ad string, ms int64) sink.Key { return sink.Key{Entity: ad, Bucket: sink.HourBucket(ms)} }

func fastPut(k sink.Key, epoch int64) sink.Put {
	return sink.Put{Key: k, Writer: sink.Fast, Valid: 1, SpendMicros: 10, Epoch: epoch, Gen: 1}
}

// present returns which of keys the store holds.
func present(t *testing.T, s *Store, keys ...sink.Key) []bool {
	t.Helper()
	out := make([]bool, len(keys))
	for i, k := range keys {
		_, out[i] = get(t, s, k)
	}
	return out
}

// TestRowsExpireByDataClock writes rows, then rows 36 and 401 days later,
// through Put and PutFinal only: with the default retention (35 days for
// minute rows, 400 for hour rows) and the default clock (the newest bucket
// written), the old minute row goes at the first, the old hour row at the
// second, with their tag-index entries; nothing sleeps.
func TestRowsExpireByDataClock(t *testing.T) {
	s := openTemp(t, Options{NoSync: true})
	oldMinute, oldHour, finalOnly := minuteKey("ad_1", t0+14*60_000), hourKey("ad_1", t0), hourKey("ad_2", t0)
	put(t, s, fastPut(oldMinute, 3), fastPut(oldHour, 3))
	if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: finalOnly, Valid: 2, Gen: 1, AtMs: 1}}); err != nil {
		t.Fatalf("PutFinal: %v", err)
	}

	// 35 days after the minute's end: not yet past its expires_at.
	put(t, s, fastPut(minuteKey("ad_9", t0+14*60_000+35*int64(day/time.Millisecond)-60_000), 4))
	if got := present(t, s, oldMinute, oldHour, finalOnly); !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("35 days on: present %v, want all", got)
	}
	// 36 days on: the minute row has expired, the hour rows stay.
	put(t, s, fastPut(minuteKey("ad_9", t0+36*int64(day/time.Millisecond)), 5))
	if got := present(t, s, oldMinute, oldHour, finalOnly); !slices.Equal(got, []bool{false, true, true}) {
		t.Fatalf("36 days on: present %v, want [false true true]", got)
	}
	if keys := queryKeys(t, s, sink.Fast, sink.IndexKey(3, oldMinute)); slices.Contains(keys, oldMinute.Entity+"/"+oldMinute.Bucket) {
		t.Errorf("the expired minute row is still in the tag index: %v", keys)
	}
	// 401 days on: the hour rows too, the recount's own included.
	put(t, s, fastPut(minuteKey("ad_9", t0+401*int64(day/time.Millisecond)), 6))
	if got := present(t, s, oldMinute, oldHour, finalOnly); !slices.Equal(got, []bool{false, false, false}) {
		t.Fatalf("401 days on: present %v, want none", got)
	}
	for _, e := range indexEntries(t, s) {
		if e == fmt.Sprintf("fast|%s|%s|%s", sink.IndexKey(3, oldHour), oldHour.Entity, oldHour.Bucket) {
			t.Errorf("tag-index entry of the expired hour row is left: %s", e)
		}
	}
	n := 0
	if err := s.Scan(ctx, func(sink.Item) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d items left, want 1 (the newest minute row)", n)
	}
}
