package codescan

import (
	"go/ast"
	"os"
	"path/filepath"
	"testing"
)

func TestGoFilesAndMetricNames(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := "package m\nvar o = x.CounterOpts{Namespace: \"adclick\", Subsystem: \"sink\", Name: \"writes_total\"}\n"
	write("a/m.go", src)
	write("a/m_test.go", src)
	write("testdata/m.go", src)
	write("node_modules/m.go", src)
	write("b/broken.go", "package")
	var files []string
	var names []string
	err := GoFiles(root, func(rel string, f *ast.File) {
		files = append(files, rel)
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.CompositeLit); ok {
				names = append(names, MetricName(KeyStrings(lit)))
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0] != "a/m.go" {
		t.Errorf("files %v, want [a/m.go] (tests, testdata, node_modules and unparsable files skipped)", files)
	}
	if len(names) != 1 || names[0] != "adclick_sink_writes_total" {
		t.Errorf("names %v, want [adclick_sink_writes_total]", names)
	}
	if got := MetricName(map[string]string{"Namespace": "x"}); got != "" {
		t.Errorf("MetricName without Name = %q, want empty", got)
	}
}
