//go:build integration

package valkey

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/internal/testenv"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

func TestFencedConformance(t *testing.T) {
	addr := testenv.Valkey(t)
	sinktest.FencedTotals(t, func(t *testing.T) sink.FencedTotals { return openStore(t, addr, Options{BatchSize: 7}) })
}

// TestLateOlderFenceRefused is a takeover against a real server: the new
// holder (fence 4) rewrote a total, then the old holder (fence 3), paused
// past its lease check, sends its late write and its flush's delete. Both
// are refused and counted; the stored total keeps the new holder's token.
func TestLateOlderFenceRefused(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := openStore(t, addr, Options{Registerer: reg})
	a, err := s.Scoped("kg0-16")
	if err != nil {
		t.Fatal(err)
	}
	oldH, err := sink.TotalsUnder(a, sink.Token{Gen: 2, Fence: 3})
	if err != nil {
		t.Fatal(err)
	}
	newH, err := sink.TotalsUnder(a, sink.Token{Gen: 2, Fence: 4})
	if err != nil {
		t.Fatal(err)
	}
	k := sink.TotalKey{Ad: "ad_7", StartMs: 1795946400000}
	if err := oldH.SetTotals(ctx, []sink.Total{{Ad: k.Ad, StartMs: k.StartMs, Valid: 5, SpendMicros: 50, Epoch: 41}}); err != nil {
		t.Fatal(err)
	}
	want := sink.Total{Ad: k.Ad, StartMs: k.StartMs, Valid: 4, SpendMicros: 40, Epoch: 41}
	if err := newH.SetTotals(ctx, []sink.Total{want}); err != nil {
		t.Fatal(err)
	}
	if err := oldH.SetTotals(ctx, []sink.Total{{Ad: k.Ad, StartMs: k.StartMs, Valid: 6, SpendMicros: 60, Epoch: 42}}); err != nil {
		t.Fatal(err)
	}
	if err := oldH.DeleteTotals(ctx, []sink.TotalKey{k}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.GetTotal(ctx, k); err != nil || !ok || got != want {
		t.Fatalf("GetTotal after the old holder's late write and delete = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	raw := rawClient(t, addr)
	name, _ := s.k.total(k)
	vals, err := raw.Do(ctx, raw.B().Hmget().Key(name).Field(fieldGen, fieldFence).Build()).AsStrSlice()
	if err != nil || len(vals) != 2 || vals[0] != "2" || vals[1] != "4" {
		t.Fatalf("HMGET %s gen fence = %q, %v; want [2 4]", name, vals, err)
	}
	if ttl, err := raw.Do(ctx, raw.B().Pttl().Key(name).Build()).AsInt64(); err != nil || ttl <= 0 || ttl > s.opts.MinuteTTL.Milliseconds() {
		t.Fatalf("PTTL %s = %d, %v; want in (0, %v]", name, ttl, err, s.opts.MinuteTTL)
	}
	for _, op := range []string{opSet, opDelete} {
		if got := value(t, s.m.refused.WithLabelValues(op)); got != 1 {
			t.Fatalf("adclick_valkey_totals_refused_total{op=%q} = %v, want 1", op, got)
		}
	}
	if n := series(t, reg, "adclick_valkey_totals_refused_total"); n != 2 {
		t.Fatalf("registered adclick_valkey_totals_refused_total series = %d, want 2", n)
	}
}

// TestScriptFlushed: a server that lost its script cache (SCRIPT FLUSH, as
// after a restart) answers NOSCRIPT to EVALSHA; the store loads the script
// and the write lands.
func TestScriptFlushed(t *testing.T) {
	addr := testenv.Valkey(t)
	ctx := context.Background()
	s := openStore(t, addr, Options{BatchSize: 3})
	raw := rawClient(t, addr)
	var ts []sink.Total
	for i := range 7 {
		ts = append(ts, sink.Total{Ad: "ad_f", StartMs: int64(i) * 60_000, Valid: int64(i + 1), Epoch: 3})
	}
	for round := range 2 {
		if err := raw.Do(ctx, raw.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.SetTotals(ctx, ts); err != nil {
			t.Fatalf("round %d: SetTotals after SCRIPT FLUSH: %v", round, err)
		}
		for _, want := range ts {
			if got, ok, err := s.GetTotal(ctx, want.Key()); err != nil || !ok || got != want {
				t.Fatalf("round %d: GetTotal = %+v, %v, %v; want %+v", round, got, ok, err, want)
			}
		}
		if err := raw.Do(ctx, raw.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTotals(ctx, []sink.TotalKey{ts[0].Key()}); err != nil {
			t.Fatalf("round %d: DeleteTotals after SCRIPT FLUSH: %v", round, err)
		}
		if _, ok, err := s.GetTotal(ctx, ts[0].Key()); err != nil || ok {
			t.Fatalf("round %d: GetTotal after DeleteTotals = ok %v, %v; want gone", round, ok, err)
		}
	}
}
