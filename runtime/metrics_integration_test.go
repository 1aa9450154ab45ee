//go:build integration

package runtime

import (
	"bytes"
	"net/http/httptest"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestMetricsPassPromtool runs a job and checks its /metrics with
// `promtool check metrics` (installed by scripts/test.sh): names, units and
// help follow Prometheus's conventions. It failed while the watermarks were
// exported in milliseconds (adclick_watermark_ms).
func TestMetricsPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (%v): run ./scripts/test.sh, which installs it", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := replayConfig(t.TempDir(), writeTrace(t, t.TempDir(), traceOptions(2000, 4)))
	cfg.Registerer = reg
	runToEnd(t, cfg).Close()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(rec.Body.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
