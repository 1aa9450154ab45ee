package runtime

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The dedup budget reaches the pre-aggregators: with a budget far below
// what the ids would take, the filters fold to fit it and the rows stay
// exact (every copy still found, by lookups in the state store).
func TestDedupMemoryBudgetHoldsAndCountsExactly(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(15_000, 41))
	const budget = 160 << 10
	for _, tc := range []struct {
		name   string
		budget int64
	}{{"default", 0}, {"quarter", budget}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			cfg := replayConfig(t.TempDir(), path)
			cfg.DedupMemoryBytes, cfg.Registerer = tc.budget, reg
			j := runToEnd(t, cfg)
			defer j.Close()
			checkRows(t, scanRows(t, j.rows), fileReference(t, path))
			bytes, ok := metricValue(t, reg, "adclick_dedup_filter_bytes")
			folds, _ := metricValue(t, reg, "adclick_dedup_filter_folds_total")
			vain, _ := metricValue(t, reg, "adclick_dedup_vain_lookups_total")
			t.Logf("filter bytes %.0f, folds %.0f, vain lookups %.0f", bytes, folds, vain)
			switch {
			case !ok:
				t.Fatal("adclick_dedup_filter_bytes is not exported")
			case tc.budget == 0 && bytes <= budget:
				t.Fatalf("default budget: filters %.0f B, want more than %d B (else the tiny budget proves nothing)", bytes, budget)
			case tc.budget > 0 && bytes > budget:
				t.Fatalf("filters hold %.0f B, budget %d B", bytes, budget)
			case tc.budget > 0 && folds == 0:
				t.Fatal("no filter folded under a budget the ids exceed")
			}
		})
	}
}
