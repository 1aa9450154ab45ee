package runtime

import "testing"

func TestMetaSetting(t *testing.T) {
	const full = "format=1 window_ms=60000 horizon_ms=7200000 max_parallelism=128 dedup=true"
	for _, tc := range []struct {
		name, settings, key string
		want                int64
		ok                  bool
	}{
		{"first", full, "format", 1, true},
		{"middle", full, "horizon_ms", 7_200_000, true},
		{"window", full, "window_ms", 60_000, true},
		{"missing key", full, "allowance_ms", 0, false},
		{"not an integer", full, "dedup", 0, false},
		{"empty settings", "", "horizon_ms", 0, false},
		{"prefix of a key", full, "horizon", 0, false},
		{"key is a prefix", "horizon_ms_x=5 horizon_ms=9", "horizon_ms", 9, true},
		{"negative", "floor_ms=-60000", "floor_ms", -60_000, true},
		{"extra spaces", "  a=1\t\thorizon_ms=3  ", "horizon_ms", 3, true},
		{"empty value", "horizon_ms= window_ms=1", "horizon_ms", 0, false},
		{"no equals", "horizon_ms window_ms=1", "horizon_ms", 0, false},
		{"first of two", "horizon_ms=1 horizon_ms=2", "horizon_ms", 1, true},
		{"overflow", "horizon_ms=9223372036854775808", "horizon_ms", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Meta{Settings: tc.settings}.Setting(tc.key)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Meta{Settings: %q}.Setting(%q) = %d, %v, want %d, %v", tc.settings, tc.key, got, ok, tc.want, tc.ok)
			}
		})
	}
}
