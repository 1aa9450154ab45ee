package prometheus

import (
	"encoding/json"
	"go/ast"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/adclick/adclick/internal/codescan"
)

// runbooks are the runbook pages an alert may point at.
var runbooks = map[string]bool{
	"watermark-lag.md": true, "consumer-lag.md": true, "crash-restore.md": true, "blue-green.md": true,
	"rescaling.md": true, "resharding.md": true, "dynamodb-throttling.md": true, "valkey-outage.md": true,
	"recount-mismatch.md": true, "bad-deploy.md": true, "fleet.md": true,
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// repoRoot returns the module root (the folder holding go.mod).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// definedMetrics parses every non-test Go file under root and returns the
// series names of the Prometheus metrics defined there: the Namespace,
// Subsystem and Name of every *Opts literal, joined as prometheus.BuildFQName
// does, plus the _bucket/_sum/_count series of histograms and summaries.
func definedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := codescan.GoFiles(root, func(_ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			name := codescan.MetricName(codescan.KeyStrings(lit))
			if name == "" {
				return true
			}
			names[name] = true
			switch sel.Sel.Name {
			case "HistogramOpts":
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case "SummaryOpts":
				names[name+"_sum"], names[name+"_count"] = true, true
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var metricRef = regexp.MustCompile(`\badclick_[a-zA-Z0-9_]+`)

// unknownMetrics returns the adclick_* names used in expr that defined
// lacks.
func unknownMetrics(expr string, defined map[string]bool) []string {
	var out []string
	for _, m := range metricRef.FindAllString(expr, -1) {
		if !defined[m] {
			out = append(out, m)
		}
	}
	return out
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return rf
}

func TestDefinedMetricsFindsTheRuntimeMetrics(t *testing.T) {
	defined := definedMetrics(t, repoRoot(t))
	// Metrics built both ways: Name only, and Namespace+Subsystem+Name.
	for _, want := range []string{"adclick_watermark_lag_seconds", "adclick_checkpoint_duration_seconds_bucket", "adclick_http_requests_total"} {
		if !defined[want] {
			t.Errorf("the metric scanner misses %s; it found %d names", want, len(defined))
		}
	}
	if got := unknownMetrics(`rate(adclick_no_such_metric_total[5m]) > adclick_watermark_lag_seconds`, defined); len(got) != 1 || got[0] != "adclick_no_such_metric_total" {
		t.Errorf("unknownMetrics: got %v, want [adclick_no_such_metric_total]", got)
	}
}

func TestAlertRulesUseDefinedMetrics(t *testing.T) {
	defined := definedMetrics(t, repoRoot(t))
	rf := loadRules(t)
	used := map[string]bool{}
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("group %s: a rule must have exactly one of alert and record: %+v", g.Name, r)
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: empty expr", name)
			}
			for _, m := range unknownMetrics(r.Expr, defined) {
				t.Errorf("%s: metric %s is not defined in the code", name, m)
			}
			for _, m := range metricRef.FindAllString(r.Expr, -1) {
				used[m] = true
			}
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", name)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: needs summary and description annotations", name)
			}
			u := r.Annotations["runbook_url"]
			_, page, ok := strings.Cut(u, "/runbooks/")
			if !ok || !runbooks[page] {
				t.Errorf("%s: runbook_url %q does not point at one of runbooks/{%s}", name, u, strings.Join(sortedKeys(runbooks), ","))
			}
		}
	}
	if alerts < 7 {
		t.Errorf("got %d alerts, want at least 7", alerts)
	}
	for _, m := range []string{"adclick_watermark_lag_seconds", "adclick_kinesis_millis_behind_latest", "adclick_sink_refused_writes_total",
		"adclick_checkpoints_total", "adclick_checkpoint_last_id", "adclick_clicks_total", "adclick_valkey_up"} {
		if !used[m] {
			t.Errorf("no rule watches %s", m)
		}
	}
}

func TestDashboardUsesDefinedMetrics(t *testing.T) {
	defined := definedMetrics(t, repoRoot(t))
	b, err := os.ReadFile(filepath.Join("..", "grafana", "adclick.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("adclick.json: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(dash)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range unknownMetrics(e, defined) {
			t.Errorf("dashboard: metric %s is not defined in the code (in %q)", m, e)
		}
		for _, m := range metricRef.FindAllString(e, -1) {
			used[m] = true
		}
	}
	// The four numbers to watch.
	for _, m := range []string{"adclick_watermark_lag_seconds", "adclick_kinesis_millis_behind_latest", "adclick_clicks_total", "adclick_checkpoint_duration_seconds_bucket"} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
