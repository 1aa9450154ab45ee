package embedded

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/sink"
)

// TestExpireBoundary drives Expire with the time as an argument: a row
// expires once the time is past its expires_at (the end of its bucket plus
// the retention, in whole seconds), as DynamoDB's TTL does, and not before.
func TestExpireBoundary(t *testing.T) {
	vc := clock.NewVirtual(0) // no automatic pass: the clock stays before every expiry
	s := openTemp(t, Options{NoSync: true, Clock: vc, Retention: sink.Retention{Minute: 3 * day, Hour: 10 * day}})
	m, h := minuteKey("ad_1", t0), hourKey("ad_1", t0)
	put(t, s, fastPut(m, 1), fastPut(h, 1))
	minuteExp := (t0 + 60_000) + int64(3*day/time.Millisecond)
	hourExp := (t0 + 3_600_000) + int64(10*day/time.Millisecond)
	for _, c := range []struct {
		nowMs     int64
		wantN     int
		wantAlive []bool
	}{
		{minuteExp, 0, []bool{true, true}},       // expires_at == now: not before it
		{minuteExp + 999, 0, []bool{true, true}}, // same second
		{minuteExp + 1000, 1, []bool{false, true}},
		{hourExp, 0, []bool{false, true}},
		{hourExp + 1000, 1, []bool{false, false}},
		{hourExp + 5000, 0, []bool{false, false}},
	} {
		n, err := s.Expire(ctx, c.nowMs, 0)
		if err != nil {
			t.Fatalf("Expire(%d): %v", c.nowMs, err)
		}
		if got := present(t, s, m, h); n != c.wantN || !slices.Equal(got, c.wantAlive) {
			t.Fatalf("Expire(%v) = %d, present %v; want %d, %v", time.UnixMilli(c.nowMs).UTC(), n, got, c.wantN, c.wantAlive)
		}
	}
	if got := s.metrics.Writes.WithLabelValues("expire"); counterValue(t, got) != 2 {
		t.Errorf("expire writes %v, want 2", counterValue(t, got))
	}
}

// TestExpiryFollowsTheClock checks the automatic pass with Options.Clock:
// a write after the clock passed a row's expiry removes it.
func TestExpiryFollowsTheClock(t *testing.T) {
	vc := clock.NewVirtual(t0)
	s := openTemp(t, Options{NoSync: true, Clock: vc})
	m := minuteKey("ad_1", t0)
	put(t, s, fastPut(m, 1))
	vc.Set(t0 + int64(36*day/time.Millisecond))
	put(t, s, fastPut(minuteKey("ad_2", t0), 2)) // an old bucket: the clock, not the data, decides
	if got := present(t, s, m, minuteKey("ad_2", t0)); !slices.Equal(got, []bool{false, false}) {
		t.Fatalf("present %v after the clock passed their expiry, want neither", got)
	}
}

// TestExpiryLimitAndRewrites checks that a pass deletes at most its limit,
// that a rewrite under another retention moves the expiry (its old queue
// entry does not delete it), and that Forever and the recount's writes
// keep what the stream set.
func TestExpiryLimitAndRewrites(t *testing.T) {
	dir := t.TempDir()
	vc := clock.NewVirtual(0)
	s, err := Open(dir, Options{NoSync: true, Clock: vc})
	if err != nil {
		t.Fatal(err)
	}
	var keys []sink.Key
	for i := range 5 {
		keys = append(keys, minuteKey(fmt.Sprintf("ad_%d", i), t0))
	}
	kept := hourKey("ad_1", t0)
	for _, k := range keys {
		put(t, s, fastPut(k, 1))
	}
	put(t, s, fastPut(kept, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen with 100-day minute rows and rewrite ad_0: it now lives longer.
	s, err = Open(dir, Options{NoSync: true, Clock: vc, Retention: sink.Retention{Minute: 100 * day}})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, fastPut(keys[0], 2))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen keeping rows forever; rewrite ad_1 and recount the hour with a
	// 10-day retention: neither shortens nor drops the expiry they have.
	s, err = Open(dir, Options{NoSync: true, Clock: vc, Retention: sink.Retention{Minute: sink.Forever, Hour: 10 * day}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	put(t, s, fastPut(keys[1], 3))
	if _, err := s.PutFinal(ctx, []sink.FinalPut{{Key: kept, Valid: 1, Gen: 1, AtMs: 1}}); err != nil {
		t.Fatal(err)
	}

	at := t0 + int64(50*day/time.Millisecond)
	if n, err := s.Expire(ctx, at, 2); err != nil || n != 2 {
		t.Fatalf("Expire(limit 2) = %d, %v; want 2", n, err)
	}
	if n, err := s.Expire(ctx, at, 0); err != nil || n != 2 {
		t.Fatalf("Expire(no limit) = %d, %v; want the other 2", n, err)
	}
	if got := present(t, s, append(keys, kept)...); !slices.Equal(got, []bool{true, false, false, false, false, true}) {
		t.Fatalf("50 days on: present %v, want only ad_0's minute (100 days) and the hour (400 days)", got)
	}
	if n, err := s.Expire(ctx, t0+int64(102*day/time.Millisecond), 0); err != nil || n != 1 {
		t.Fatalf("Expire at 102 days = %d, %v; want ad_0's minute", n, err)
	}
	if n, err := s.Expire(ctx, t0+int64(399*day/time.Millisecond), 0); err != nil || n != 0 {
		t.Fatalf("Expire at 399 days = %d, %v; want 0: the recount must not shorten the hour row's 400 days", n, err)
	}
}

// TestForeverKeepsRows: with Forever, writes carry no expiry.
func TestForeverKeepsRows(t *testing.T) {
	s := openTemp(t, Options{NoSync: true, Retention: sink.Retention{Minute: sink.Forever, Hour: sink.Forever}})
	m, h := minuteKey("ad_1", t0), hourKey("ad_1", t0)
	put(t, s, fastPut(m, 1), fastPut(h, 1))
	if n, err := s.Expire(ctx, t0+int64(10_000*day/time.Millisecond), 0); err != nil || n != 0 {
		t.Fatalf("Expire = %d, %v; want 0", n, err)
	}
	put(t, s, fastPut(minuteKey("ad_1", t0+int64(10_000*day/time.Millisecond)), 2))
	if got := present(t, s, m, h); !slices.Equal(got, []bool{true, true}) {
		t.Fatalf("present %v, want both", got)
	}
}

func TestRetentionValidated(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{Retention: sink.Retention{Minute: time.Hour}}); err == nil {
		t.Fatal("Open with a one-hour minute retention: got nil error")
	}
}

// TestQueryBucketCostIndependentOfTable checks that a page of an hour
// visits only that page's bucket-index entries, whatever else the table
// holds.
func TestQueryBucketCostIndependentOfTable(t *testing.T) {
	s := openTemp(t, Options{NoSync: true})
	var batch []sink.Put
	for i := range 20_000 {
		ad := fmt.Sprintf("ad_%05d", i%2000)
		var k sink.Key
		if i < 2000 {
			k = hourKey(ad, t0) // the hour listed: 2,000 rows
		} else {
			k = minuteKey(ad, t0+int64(i/2000)*60_000) // 18,000 minute rows
		}
		batch = append(batch, fastPut(k, 1))
		if len(batch) == 1000 {
			put(t, s, batch...)
			batch = batch[:0]
		}
	}
	put(t, s, put1(hourKey("ad_00500", t0+3_600_000))) // the next hour
	var got []string
	before := s.bucketSteps.Load()
	err := s.QueryBucket(ctx, sink.HourBucket(t0), "ad_00499", 25, func(it sink.Item) error {
		got = append(got, it.Entity)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := s.bucketSteps.Load() - before
	if len(got) != 25 || got[0] != "ad_00500" || got[24] != "ad_00524" {
		t.Fatalf("QueryBucket returned %d entities %v…, want ad_00500 to ad_00524", len(got), got[:min(3, len(got))])
	}
	if steps > 26 {
		t.Errorf("a page of 25 took %d bucket-index steps in a table of 20,001 rows, want at most 26", steps)
	}
}

func put1(k sink.Key) sink.Put { return fastPut(k, 1) }

// TestBucketIndexBackfill opens a store written before the bucket index
// existed (no 'b' entries, no marker): Open indexes its items once.
func TestBucketIndexBackfill(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	h := sink.HourBucket(t0)
	for _, ad := range []string{"ad_3", "ad_1", "ad_2"} {
		put(t, s, put1(sink.Key{Entity: ad, Bucket: h}))
	}
	// Make it an old store: drop the bucket index and the marker.
	b := s.db.NewBatch()
	if err := b.DeleteRange([]byte{prefixBucket}, []byte{prefixBucket + 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(metaBucketIndex, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir)
	var got []string
	if err := s.QueryBucket(ctx, h, "", 0, func(it sink.Item) error { got = append(got, it.Entity); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"ad_1", "ad_2", "ad_3"}) {
		t.Fatalf("QueryBucket after reopening an old store = %v, want [ad_1 ad_2 ad_3]", got)
	}
}

func TestItemEncodingWithExpiry(t *testing.T) {
	k := sink.Key{Entity: "ad_1", Bucket: "H2026-11-29T10Z"}
	it := sink.Item{Key: k, JobGen: 2, HasJobGen: true, Final: sink.FinalAttrs{Present: true, Valid: 3, Gen: 1, AtMs: 9}}
	for _, exp := range []expiry{{}, {sec: 1_830_000_000, set: true}, {sec: -5, set: true}} {
		got, gotExp, err := decodeRecord(k, encodeRecord(&it, exp))
		if err != nil || got != it || gotExp != exp {
			t.Errorf("decodeRecord(encodeRecord(%+v)) = %+v, %+v, %v", exp, got, gotExp, err)
		}
		if got, err := decodeItem(k, encodeRecord(&it, exp)); err != nil || got != it {
			t.Errorf("decodeItem of a record with expiry %+v = %+v, %v; want %+v", exp, got, err, it)
		}
	}
	bad := encodeItem(&it)
	bad[1] |= 1 << 6
	if _, err := decodeItem(k, bad); err == nil {
		t.Errorf("decodeItem with an unknown flag: got nil error")
	}
}
