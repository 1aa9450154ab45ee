//go:build integration

package valkey

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// TestWipedMarker: a prefix never armed reads as wiped; Arm after
// BeginRebuild clears it; an empty restart sets it again; and a restart
// during a rebuild makes Arm report false.
func TestWipedMarker(t *testing.T) {
	r := startOwnRedis(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Addr: r.addr, Prefix: testPrefix(t), Timeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wiped := func(when string, want bool) {
		t.Helper()
		got, err := s.Wiped(ctx)
		if err != nil || got != want {
			t.Fatalf("Wiped %s = %v, %v; want %v, nil", when, got, err, want)
		}
	}
	wiped("on a prefix never armed", true)
	if armed, err := s.Arm(ctx); err != nil || armed {
		t.Fatalf("Arm without BeginRebuild = %v, %v; want false, nil (nothing to arm)", armed, err)
	}
	if err := s.BeginRebuild(ctx); err != nil {
		t.Fatal(err)
	}
	wiped("during a rebuild", true)
	if armed, err := s.Arm(ctx); err != nil || !armed {
		t.Fatalf("Arm after BeginRebuild = %v, %v; want true, nil", armed, err)
	}
	wiped("once armed", false)

	// Wiped renews the marker's expiry.
	raw := rawClient(t, r.addr)
	if err := raw.Do(ctx, raw.B().Pexpire().Key(s.k.marker()).Milliseconds(10_000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	wiped("after shortening its expiry", false)
	wantTTL(t, raw, s.k.marker(), s.opts.EpochTTL)

	r.restart()
	wiped("after an empty restart", true)

	if err := s.BeginRebuild(ctx); err != nil {
		t.Fatal(err)
	}
	r.restart()
	if armed, err := s.Arm(ctx); err != nil || armed {
		t.Fatalf("Arm after a restart during the rebuild = %v, %v; want false, nil", armed, err)
	}
	wiped("after a restart during the rebuild", true)
}

// TestWipeAndRebuild is the audit's story: the job wrote its totals, Valkey
// restarted empty, the job found it wiped and rebuilt the closed windows
// from the rows (flush.RebuildTotals); the open ones are the job's to
// rewrite from state.
func TestWipeAndRebuild(t *testing.T) {
	r := startOwnRedis(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Addr: r.addr, Prefix: testPrefix(t), Timeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.BeginRebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if armed, err := s.Arm(ctx); err != nil || !armed {
		t.Fatalf("Arm = %v, %v", armed, err)
	}

	at := func(rfc string) int64 {
		tm, err := time.Parse(time.RFC3339, rfc)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	m1013, m1014, m1105 := at("2026-11-29T10:13:00Z"), at("2026-11-29T10:14:00Z"), at("2026-11-29T11:05:00Z")
	h09, h10, h11 := at("2026-11-29T09:00:00Z"), at("2026-11-29T10:00:00Z"), at("2026-11-29T11:00:00Z")
	rows := sinktest.NewMemRows()
	key := func(ad, bucket string) sink.Key { return sink.Key{Entity: ad, Bucket: bucket} }
	if _, err := rows.Put(ctx, []sink.Put{
		{Key: key("ad_7", sink.MinuteBucket(m1013)), Writer: sink.Fast, Valid: 6, SpendMicros: 60, Epoch: 39, Gen: 1},
		{Key: key("ad_7", sink.MinuteBucket(m1014)), Writer: sink.Fast, Valid: 5, SpendMicros: 50, Epoch: 41, Gen: 1},
		{Key: key("ad_7", sink.HourBucket(h10)), Writer: sink.Fast, Valid: 11, SpendMicros: 110, Epoch: 41, Gen: 1},
		{Key: key("ad_7", sink.HourBucket(h10)), Writer: sink.Late, Valid: 2, SpendMicros: 20, Epoch: 44, Gen: 1},
		{Key: key("ad_9", sink.HourBucket(h09)), Writer: sink.Fast, Valid: 50, SpendMicros: 500, Epoch: 30, Gen: 1},
		{Key: key("ad_9", sink.HourBucket(h11)), Writer: sink.Fast, Valid: 3, SpendMicros: 30, Epoch: 47, Gen: 1},
		{Key: key("ad_late", sink.HourBucket(h09)), Writer: sink.Late, Valid: 4, Epoch: 40, Gen: 1},
	}); err != nil {
		t.Fatal(err)
	}
	closed := []sink.Total{
		{Ad: "ad_7", StartMs: m1013, Valid: 6, SpendMicros: 60, Epoch: 39},
		{Ad: "ad_7", StartMs: m1014, Valid: 5, SpendMicros: 50, Epoch: 41},
		{Ad: "ad_7", StartMs: h10, Hour: true, Valid: 11, SpendMicros: 110, Epoch: 41},
		{Ad: "ad_9", StartMs: h09, Hour: true, Valid: 50, SpendMicros: 500, Epoch: 30},
	}
	open := []sink.Total{
		{Ad: "ad_9", StartMs: m1105, Valid: 2, SpendMicros: 20, Epoch: 47},
		{Ad: "ad_9", StartMs: h11, Hour: true, Valid: 5, SpendMicros: 50, Epoch: 47},
	}
	if err := s.SetTotals(ctx, append(append([]sink.Total(nil), closed...), open...)); err != nil {
		t.Fatal(err)
	}

	r.restart()
	if got, ok, err := s.GetTotal(ctx, closed[0].Key()); err != nil || ok {
		t.Fatalf("GetTotal after an empty restart = %+v, %v, %v; want none", got, ok, err)
	}
	wiped, err := s.Wiped(ctx)
	if err != nil || !wiped {
		t.Fatalf("Wiped after an empty restart = %v, %v; want true", wiped, err)
	}
	if err := s.BeginRebuild(ctx); err != nil {
		t.Fatal(err)
	}
	minTTL, hourTTL := s.TTLs()
	now := at("2026-11-29T11:06:00Z")
	n, err := flush.RebuildTotals(ctx, rows, s, now-minTTL.Milliseconds(), flush.RebuildOptions{
		ClosedBy:     h11 - 1, // the last checkpoint's watermark: hour 10 is complete, 11 is not
		HourFromMs:   now - hourTTL.Milliseconds(),
		WritesPerSec: math.Inf(1),
	})
	if err != nil {
		t.Fatalf("RebuildTotals: %v", err)
	}
	if n != len(closed) {
		t.Errorf("RebuildTotals wrote %d totals, want %d", n, len(closed))
	}
	for _, want := range closed {
		if got, ok, err := s.GetTotal(ctx, want.Key()); err != nil || !ok || got != want {
			t.Errorf("GetTotal(%+v) after the rebuild = %+v, %v, %v; want %+v", want.Key(), got, ok, err, want)
		}
		found := false
		if err := s.TotalsWritten(ctx, want.Epoch, func(k sink.TotalKey) error {
			found = found || k == want.Key()
			return nil
		}); err != nil || !found {
			t.Errorf("TotalsWritten(%d) = %v, found %v; want %+v recorded under its row's epoch", want.Epoch, err, found, want.Key())
		}
	}
	for _, o := range open {
		if got, ok, err := s.GetTotal(ctx, o.Key()); err != nil || ok {
			t.Errorf("open window %+v after the rebuild = %+v, %v, %v; want it left to the job", o.Key(), got, ok, err)
		}
	}
	if armed, err := s.Arm(ctx); err != nil || !armed {
		t.Fatalf("Arm after the rebuild = %v, %v; want true", armed, err)
	}
	if wiped, err := s.Wiped(ctx); err != nil || wiped {
		t.Fatalf("Wiped after Arm = %v, %v; want false", wiped, err)
	}
}

// TestEachRangeDetectsTheWipe: two range pipelines share the server, each
// through its view. After one empty restart both see the wipe; the first
// rebuilding and arming does not hide it from the second, which sees it
// until it arms itself.
func TestEachRangeDetectsTheWipe(t *testing.T) {
	r := startOwnRedis(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Addr: r.addr, Prefix: testPrefix(t), Timeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var views []*Store
	for _, scope := range []string{"kg0-64", "kg64-128"} {
		v, err := s.Scoped(scope)
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	arm := func(v *Store) {
		t.Helper()
		if err := v.BeginRebuild(ctx); err != nil {
			t.Fatal(err)
		}
		if armed, err := v.Arm(ctx); err != nil || !armed {
			t.Fatalf("%s: Arm = %v, %v; want true, nil", v.Scope(), armed, err)
		}
	}
	wiped := func(v *Store, want bool, when string) {
		t.Helper()
		waitUntil(t, 10*time.Second, "the server answers", func() error { return v.Ping(ctx) })
		if got, err := v.Wiped(ctx); err != nil || got != want {
			t.Fatalf("%s: Wiped %s = %v, %v; want %v", v.Scope(), when, got, err, want)
		}
	}
	for _, v := range views {
		arm(v)
		wiped(v, false, "once armed")
	}
	r.restart()
	wiped(views[0], true, "after the restart")
	arm(views[0])
	wiped(views[0], false, "after its own rebuild")
	wiped(views[1], true, "after the other range rebuilt")
	arm(views[1])
	wiped(views[1], false, "after its own rebuild")
}
