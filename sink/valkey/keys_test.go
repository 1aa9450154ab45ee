package valkey

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestTotalKeyNames(t *testing.T) {
	k := keys{prefix: "adclick"}
	for _, tc := range []struct {
		key  sink.TotalKey
		want string
	}{
		{sink.TotalKey{Ad: "ad_7", StartMs: ms("2026-11-29T10:14:00Z")}, "adclick:m:{ad_7}:2026-11-29T10:14Z"},
		{sink.TotalKey{Ad: "ad_7", StartMs: ms("2026-11-29T10:00:00Z"), Hour: true}, "adclick:h:{ad_7}:2026-11-29T10Z"},
		{sink.TotalKey{Ad: "ad}:7", StartMs: ms("1970-01-01T00:00:00Z")}, "adclick:m:{ad}:7}:1970-01-01T00:00Z"},
		{sink.TotalKey{Ad: "", StartMs: ms("9999-12-31T23:00:00Z"), Hour: true}, "adclick:h:{}:9999-12-31T23Z"},
		{sink.TotalKey{Ad: "x}:2026-11-29T10:14Z", StartMs: ms("2026-11-29T10:15:00Z")}, "adclick:m:{x}:2026-11-29T10:14Z}:2026-11-29T10:15Z"},
	} {
		got, err := k.total(tc.key)
		if err != nil || got != tc.want {
			t.Errorf("total(%+v) = %q, %v; want %q", tc.key, got, err, tc.want)
			continue
		}
		back, err := k.parseTotal(got)
		if err != nil || back != tc.key {
			t.Errorf("parseTotal(%q) = %+v, %v; want %+v", got, back, err, tc.key)
		}
	}
}

func TestTotalKeyRefused(t *testing.T) {
	k := keys{prefix: "adclick"}
	for _, tc := range []sink.TotalKey{
		{Ad: "a", StartMs: ms("2026-11-29T10:14:30Z")},
		{Ad: "a", StartMs: ms("2026-11-29T10:14:00Z"), Hour: true},
		{Ad: "a", StartMs: -60_000},
		{Ad: "a", StartMs: ms("9999-12-31T23:59:00Z") + 60_000},
		{Ad: "a", StartMs: 1<<63 - 1},
		{Ad: "a", StartMs: -1 << 63},
	} {
		if got, err := k.total(tc); !errors.Is(err, ErrBadTotal) {
			t.Errorf("total(%+v) = %q, %v; want ErrBadTotal", tc, got, err)
		}
	}
}

func TestParseTotalRefused(t *testing.T) {
	k := keys{prefix: "adclick"}
	for _, s := range []string{
		"", "adclick", "adclick:m:{", "adclick:m:{ad}", "adclick:m:{ad}:2026-11-29T10Z",
		"adclick:h:{ad}:2026-11-29T10:14Z", "other:m:{ad}:2026-11-29T10:14Z",
		"adclick:x:{ad}:2026-11-29T10:14Z", "adclick:m:{ad}x2026-11-29T10:14Z",
		"adclick:m:{ad}:2026-13-29T10:14Z",
	} {
		if got, err := k.parseTotal(s); !errors.Is(err, ErrBadTotal) {
			t.Errorf("parseTotal(%q) = %+v, %v; want ErrBadTotal", s, got, err)
		}
	}
}

func FuzzTotalKeyRoundTrip(f *testing.F) {
	f.Add("ad_7", int64(29_000_000), false)
	f.Add("}:{", int64(100), true)
	f.Fuzz(func(t *testing.T, ad string, n int64, hour bool) {
		unit := minuteMs
		if hour {
			unit = hourMs
		}
		k := keys{prefix: "p"}
		want := sink.TotalKey{Ad: ad, StartMs: n * unit, Hour: hour}
		name, err := k.total(want)
		if err != nil {
			if !errors.Is(err, ErrBadTotal) {
				t.Fatalf("total(%+v): %v, want nil or ErrBadTotal", want, err)
			}
			return
		}
		got, err := k.parseTotal(name)
		if err != nil || got != want {
			t.Fatalf("parseTotal(total(%+v) = %q) = %+v, %v", want, name, got, err)
		}
	})
}

func TestEpochKeys(t *testing.T) {
	k := keys{prefix: "adclick"}
	if got, want := k.epoch(41), "adclick:ep:41"; got != want {
		t.Errorf("epoch(41) = %q, want %q", got, want)
	}
	if got, want := k.epoch(-3), "adclick:ep:-3"; got != want {
		t.Errorf("epoch(-3) = %q, want %q", got, want)
	}
	if got, want := k.epochs(), "adclick:epochs"; got != want {
		t.Errorf("epochs() = %q, want %q", got, want)
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	want := Options{Prefix: "adclick", MinuteTTL: 48 * time.Hour, HourTTL: 192 * time.Hour, EpochTTL: 192 * time.Hour,
		Timeout: 2 * time.Second, DialTimeout: time.Second, BatchSize: 500}
	if o != want {
		t.Fatalf("defaults = %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v", err)
	}
	bad := Options{Prefix: "a{b", MinuteTTL: time.Hour, HourTTL: 2 * time.Hour, EpochTTL: time.Hour,
		Timeout: -1, DialTimeout: time.Second, BatchSize: -5}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate(bad) = nil, want errors")
	}
	for _, s := range []string{"prefix", "epoch TTL", "timeout", "batch size"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Validate(bad) = %q, want a problem with %s", err, s)
		}
	}
}

func TestScopedEpochKeys(t *testing.T) {
	k := keys{prefix: "adclick", scope: "kg0-16"}
	if got, want := k.epoch(41), "adclick:ep:kg0-16:41"; got != want {
		t.Errorf("epoch(41) = %q, want %q", got, want)
	}
	if got, want := k.epoch(-3), "adclick:ep:kg0-16:-3"; got != want {
		t.Errorf("epoch(-3) = %q, want %q", got, want)
	}
	if got, want := k.epochs(), "adclick:epochs:kg0-16"; got != want {
		t.Errorf("epochs() = %q, want %q", got, want)
	}
	// Totals stay per ad, whatever the scope.
	tk := sink.TotalKey{Ad: "ad_7", StartMs: time.Date(2026, 11, 29, 10, 14, 0, 0, time.UTC).UnixMilli()}
	name, err := k.total(tk)
	if err != nil || name != "adclick:m:{ad_7}:2026-11-29T10:14Z" {
		t.Errorf("total in a scope = %q, %v; want the unscoped name", name, err)
	}
	s, err := New(context.Background(), Options{Addr: closedAddr(t), Timeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	v, err := s.Scoped("kg0-16")
	if err != nil || v.Scope() != "kg0-16" || v.k != k || v.c != s.c || v.m != s.m || v.own {
		t.Fatalf("Scoped(kg0-16) = %+v, %v; want a view sharing the client and metrics, not owning the client", v, err)
	}
	if none, err := v.Scoped(""); err != nil || none.k != (keys{prefix: "adclick"}) {
		t.Fatalf("Scoped(\"\") = %+v, %v; want the unscoped keys", none, err)
	}
	for _, bad := range []string{"kg:1", "{kg}", "kg/1", "kg#1"} {
		if _, err := s.Scoped(bad); err == nil || !strings.HasPrefix(err.Error(), "valkey: ") {
			t.Errorf("Scoped(%q) = %v; want a valkey: error", bad, err)
		}
	}
}
