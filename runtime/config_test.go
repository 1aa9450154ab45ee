package runtime

import (
	"strings"
	"testing"

	"github.com/adclick/adclick/ingest/source"
)

// TestConfigValidateReportsEveryProblem: the components' own rules
// (ingest's watermark options, preagg's options) and the runtime's are
// checked in one pass, and every problem is reported, not the first.
func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := Config{OpenSource: source.File("unused")}
	cfg.EnsureDefaults()
	cfg.Watermarks.IdleMs = -1
	cfg.PreAgg.WindowMs = 7_000 // does not divide an hour
	cfg.PreAgg.GuardMs = cfg.PreAgg.HorizonMs - 1
	cfg.EarlyFiringMs = -5
	cfg.OpenSinks = nil
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken configuration")
	}
	for _, want := range []string{"idle", "window 7000 ms", "guard", "early firing -5 ms", "no row store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v\nwant a problem mentioning %q", err, want)
		}
	}
}

// TestConfigDefaultsComeFromTheComponents: an empty configuration takes
// the components' defaults, and the one allowance reaches both the
// watermarks and the pre-aggregators.
func TestConfigDefaultsComeFromTheComponents(t *testing.T) {
	var cfg Config
	cfg.EnsureDefaults()
	if cfg.Watermarks.IntervalMs != 200 || cfg.Watermarks.IdleMs != 30_000 {
		t.Errorf("watermark defaults %+v, want interval 200 and idle 30000", cfg.Watermarks)
	}
	if cfg.PreAgg.WindowMs != 60_000 || cfg.PreAgg.HorizonMs != 7_200_000 || cfg.PreAgg.GuardMs != 93_600_000 || cfg.PreAgg.FlushIntervalMs != 500 {
		t.Errorf("pre-aggregation defaults %+v", cfg.PreAgg)
	}
	if cfg.Watermarks.AllowanceMs != 5_000 || cfg.PreAgg.AllowanceMs != 5_000 {
		t.Errorf("allowance %d / %d, want 5000 in both", cfg.Watermarks.AllowanceMs, cfg.PreAgg.AllowanceMs)
	}
	zero := Config{AllowanceMs: new(int64)}
	zero.EnsureDefaults()
	if zero.Watermarks.AllowanceMs != 0 || zero.PreAgg.AllowanceMs != 0 {
		t.Errorf("an allowance of zero became %d / %d", zero.Watermarks.AllowanceMs, zero.PreAgg.AllowanceMs)
	}
}
