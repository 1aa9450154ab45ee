// Package codescan reads the project's own Go source for tests that check
// other files against the code: alert rules and dashboards against the
// metrics defined, runbooks against metric names and API paths, the IAM
// policy against the SDK calls. Its own layering test holds the
// deterministic core (ingest decoding and watermarks, preagg, windowing,
// latepath, flush) to importing no I/O package and starting no goroutine.
package codescan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// GoFiles parses every non-test Go file under root (skipping hidden
// folders, node_modules, vendor and testdata) and calls fn with its path
// relative to root, slash-separated. A file that does not parse is passed
// over: it may be one being written.
func GoFiles(root string, fn func(rel string, f *ast.File)) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "vendor" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
}

// KeyStrings returns the fields of a composite literal given as
// Key: "string literal".
func KeyStrings(lit *ast.CompositeLit) map[string]string {
	parts := map[string]string{}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		k, ok1 := kv.Key.(*ast.Ident)
		v, ok2 := kv.Value.(*ast.BasicLit)
		if !ok1 || !ok2 || v.Kind != token.STRING {
			continue
		}
		if s, err := strconv.Unquote(v.Value); err == nil {
			parts[k.Name] = s
		}
	}
	return parts
}

// MetricName joins the Namespace, Subsystem and Name fields of a metric's
// options as prometheus.BuildFQName does ("" if Name is empty).
func MetricName(parts map[string]string) string {
	if parts["Name"] == "" {
		return ""
	}
	var segs []string
	for _, k := range []string{"Namespace", "Subsystem", "Name"} {
		if parts[k] != "" {
			segs = append(segs, parts[k])
		}
	}
	return strings.Join(segs, "_")
}
