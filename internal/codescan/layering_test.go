package codescan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layering test: the deterministic core imports nothing that does I/O
// or owns goroutines, directly or through any package it brings in, and
// starts no goroutine itself.

const module = "github.com/adclick/adclick"

// core is the deterministic core, as import paths relative to the module.
// Each is driven from outside (records, watermarks, barriers and
// processing time are arguments) and returns what to emit.
var core = []struct{ pkg, what string }{
	{"ingest", "decoding, validation, the device-time clamp, per-shard watermarks (not the adapter ingest/kinesis)"},
	{"ingest/kpl", "KPL de-aggregation"},
	{"preagg", "per-click verdicts and partial sums"},
	{"windowing", "minute windows, early firings, the hour roll-up, key groups"},
	{"latepath", "late totals and the exceptions-log record"},
	{"flush", "Decide, and drivers that do their I/O through the sink interfaces only"},
	{"eventtime", "event-time arithmetic: no watermark, minutes, hours, closed windows, saturating sums"},
	{"operator", "the subtasks as machines: Step a message, carry out the Ready, Advance"},
}

// forbidden are the packages no core package may bring in, directly or
// transitively. "p/..." is p and every package under it.
var forbidden = []string{
	"os/...", "syscall", "net/...", "plugin",
	"github.com/aws/...",
	"github.com/valkey-io/...",
	"github.com/cockroachdb/pebble/...", // also pebble/v2
	module + "/runtime/...",
	module + "/sink/...",
	module + "/state/...",
	module + "/ckptstore/...",
	module + "/lease/...",
	module + "/recount/...",
	module + "/api/...",
	module + "/cmd/...",
	module + "/internal/pebbleutil/...",
}

// pureStd are standard packages under a forbidden tree that do no I/O.
var pureStd = map[string]bool{"net/url": true, "net/netip": true}

// allowance is an import of a forbidden package the core may make, with
// the reason. If files is set, only those files of from may make it. A
// project package it admits is walked like a core package.
type allowance struct {
	from, to string
	files    []string
	why      string
}

var allowed = []allowance{
	{from: module + "/ingest", to: "os", files: []string{"filesource.go"},
		why: "the JSON Lines file source, an adapter that lives in package ingest, opens its file; decoding and watermarks do not use os"},
	{from: module + "/flush", to: module + "/sink",
		why: "sink holds the row and total interfaces (and their value types) through which the flush drivers do their I/O; it is walked like a core package"},
	{from: module + "/operator", to: module + "/sink",
		why: "the window machine decides sink.Put and sink.Total values (the caller writes them); it is walked like a core package"},
}

// opaque are dependencies the walk does not enter, with the reason.
var opaque = map[string]string{
	"github.com/prometheus/client_golang/prometheus": "in-memory metric collectors; the package imports os (process and Go collectors) and expvar, but serving /metrics is api's",
	"google.golang.org/protobuf/encoding/protowire":  "wire-format varints and tags (ingest/kpl); it reaches os only through protobuf's internal detrand, which hashes the executable once to randomise its error text",
}

// pkgInfo is the part of `go list -json` the test reads.
type pkgInfo struct {
	ImportPath string
	Dir        string
	Standard   bool
	Imports    []string
}

// matches reports whether path is pattern or, for "p/...", p or under it.
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func isForbidden(path string) bool {
	if pureStd[path] {
		return false
	}
	return slices.ContainsFunc(forbidden, func(p string) bool { return matches(p, path) })
}

func findAllowance(from, to string) *allowance {
	for i := range allowed {
		if allowed[i].from == from && allowed[i].to == to {
			return &allowed[i]
		}
	}
	return nil
}

func short(p string) string {
	if p == module {
		return "."
	}
	return strings.TrimPrefix(p, module+"/")
}

// walked is what walk found from one core package.
type walked struct {
	problems []string     // one per forbidden import reached, with its chain
	used     []*allowance // allowances the walk relied on
	opaque   []string     // opaque dependencies reached
	entered  []string     // project packages walked, the root included
}

// walk follows the imports of root through every non-standard package
// (standard packages are the platform: fmt imports os, and is not I/O of the
// core's) and reports each forbidden import reached with the chain of
// imports that brings it in.
func walk(graph map[string]*pkgInfo, root string) walked {
	var w walked
	parent := map[string]string{root: ""}
	chain := func(p string) string {
		var c []string
		for ; p != ""; p = parent[p] {
			c = append(c, short(p))
		}
		slices.Reverse(c)
		return strings.Join(c, " → ")
	}
	queue := []string{root}
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(from, module+"/") || from == module {
			w.entered = append(w.entered, from)
		}
		p := graph[from]
		if p == nil {
			w.problems = append(w.problems, fmt.Sprintf("%s: not in the package graph", chain(from)))
			continue
		}
		for _, to := range p.Imports {
			if _, seen := parent[to]; seen {
				continue
			}
			if isForbidden(to) {
				a := findAllowance(from, to)
				if a == nil {
					w.problems = append(w.problems, fmt.Sprintf("%s imports %s: %s → %s", short(root), to, chain(from), short(to)))
					parent[to] = from
					continue
				}
				w.used = append(w.used, a)
			}
			parent[to] = from
			if _, ok := opaque[to]; ok {
				w.opaque = append(w.opaque, to)
				continue
			}
			if q := graph[to]; q != nil && q.Standard {
				continue
			}
			queue = append(queue, to)
		}
	}
	return w
}

// goList returns the packages of `go list -deps` for pkgs (the core
// packages if none are given), by import path.
func goList(t *testing.T, root string, pkgs ...string) map[string]*pkgInfo {
	t.Helper()
	args := []string{"list", "-deps", "-json=ImportPath,Dir,Standard,Imports"}
	if len(pkgs) == 0 {
		for _, c := range core {
			pkgs = append(pkgs, c.pkg)
		}
	}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	graph := map[string]*pkgInfo{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		graph[p.ImportPath] = &p
	}
	return graph
}

// goroutines returns where f starts a goroutine: go statements, calls of
// a method named Go (sync.WaitGroup.Go, errgroup.Group.Go) and
// time.AfterFunc (which runs its function in a goroutine of its own).
func goroutines(f *ast.File) []ast.Node {
	timeName := ""
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == "time" {
			timeName = "time"
			if im.Name != nil {
				timeName = im.Name.Name
			}
		}
	}
	var found []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			found = append(found, n)
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				break
			}
			if sel.Sel.Name == "Go" {
				found = append(found, n)
			}
			if x, ok := sel.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && sel.Sel.Name == "AfterFunc" {
				found = append(found, n)
			}
		}
		return true
	})
	return found
}

// lineOf returns the line of the byte offset off in the file at path.
func lineOf(t *testing.T, path string, off int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || off > len(b) {
		return 0
	}
	return 1 + bytes.Count(b[:off], []byte("\n"))
}

// TestCoreLayering: no core package brings in AWS, Valkey, Pebble, os,
// syscall, net (net/http included) or the project's runtime, sink adapters,
// state or other I/O packages, except through the allowances listed; and no
// core package, nor a project package it brings in, starts a goroutine.
func TestCoreLayering(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	graph := goList(t, root)
	usedAll := map[*allowance]bool{}
	opaqueUsed := map[string]bool{}
	scan := map[string]bool{}
	for _, c := range core {
		path := module + "/" + c.pkg
		if graph[path] == nil {
			t.Errorf("core package %s (%s) is not in `go list` output: renamed or removed? update the table", c.pkg, c.what)
			continue
		}
		w := walk(graph, path)
		for _, p := range w.problems {
			t.Errorf("%s (%s)", p, c.what)
		}
		for _, a := range w.used {
			usedAll[a] = true
		}
		for _, p := range w.opaque {
			opaqueUsed[p] = true
		}
		for _, p := range w.entered {
			scan[p] = true
		}
	}
	for i := range allowed {
		if a := &allowed[i]; !usedAll[a] {
			t.Errorf("allowance %s → %s is no longer used: remove it from the table", short(a.from), short(a.to))
		}
	}
	for p := range opaque {
		if !opaqueUsed[p] {
			t.Errorf("opaque dependency %s is no longer reached: remove it from the table", p)
		}
	}

	// Every file of each package the walk entered, whatever its build
	// constraints: no goroutine, and a forbidden import only where an
	// allowance names the file.
	for _, path := range slices.Sorted(maps.Keys(scan)) {
		dir := graph[path].Dir
		err := GoFiles(dir, func(rel string, f *ast.File) {
			if strings.Contains(rel, "/") {
				return // a package of its own
			}
			for _, n := range goroutines(f) {
				t.Errorf("%s/%s:%d starts a goroutine; the core is driven by the runtime's goroutines",
					short(path), rel, lineOf(t, filepath.Join(dir, rel), int(n.Pos()-f.FileStart)))
			}
			for _, im := range f.Imports {
				to, _ := strconv.Unquote(im.Path.Value)
				if !isForbidden(to) {
					continue
				}
				a := findAllowance(path, to)
				if a == nil {
					t.Errorf("%s/%s imports %s", short(path), rel, to)
				} else if a.files != nil && !slices.Contains(a.files, rel) {
					t.Errorf("%s/%s imports %s: allowed only in %v (%s)", short(path), rel, to, a.files, a.why)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestWalkReportsForbiddenChains checks the walk itself on a made-up graph:
// a forbidden package imported directly or through a third-party package is
// reported with its chain; an allowance holds only for its own edge; an
// opaque dependency is not entered; standard packages are not entered.
func TestWalkReportsForbiddenChains(t *testing.T) {
	std := func(path string, imports ...string) *pkgInfo {
		return &pkgInfo{ImportPath: path, Standard: true, Imports: imports}
	}
	dep := func(path string, imports ...string) *pkgInfo {
		return &pkgInfo{ImportPath: path, Imports: imports}
	}
	m := module + "/"
	graph := map[string]*pkgInfo{}
	for _, p := range []*pkgInfo{
		std("fmt", "os"), std("os", "syscall"), std("syscall"), std("net/http", "net"), std("net"), std("net/url"),
		dep(m+"preagg", "fmt", "os", m+"ingest", m+"sink"),
		dep(m+"ingest", "os"),
		dep(m+"windowing", "net/url", "example.com/helper"),
		dep("example.com/helper", "net/http"),
		dep(m+"latepath", "github.com/cockroachdb/pebble/v2"),
		dep("github.com/cockroachdb/pebble/v2"),
		dep(m+"flush", m+"sink", "github.com/aws/aws-sdk-go-v2/aws", "github.com/prometheus/client_golang/prometheus"),
		dep(m+"sink", "fmt"),
		dep("github.com/aws/aws-sdk-go-v2/aws"),
		dep("github.com/prometheus/client_golang/prometheus", "os", "net/http"),
	} {
		graph[p.ImportPath] = p
	}
	for _, tc := range []struct {
		root string
		want []string
	}{
		// ingest → os is allowed (file source), preagg → os and → sink are not.
		{"preagg", []string{"preagg imports os: preagg → os", "preagg imports " + m + "sink: preagg → sink"}},
		{"windowing", []string{"windowing imports net/http: windowing → example.com/helper → net/http"}},
		{"latepath", []string{"latepath imports github.com/cockroachdb/pebble/v2: latepath → github.com/cockroachdb/pebble/v2"}},
		{"flush", []string{"flush imports github.com/aws/aws-sdk-go-v2/aws: flush → github.com/aws/aws-sdk-go-v2/aws"}},
		{"ingest", nil},
	} {
		got := walk(graph, m+tc.root).problems
		if !slices.Equal(got, tc.want) {
			t.Errorf("walk(%s): got %q, want %q", tc.root, got, tc.want)
		}
	}
	if w := walk(graph, m+"flush"); !slices.Equal(w.entered, []string{m + "flush", m + "sink"}) || len(w.opaque) != 1 {
		t.Errorf("walk(flush): entered %v, opaque %v; want [flush sink] entered and prometheus opaque", w.entered, w.opaque)
	}
}

func TestGoroutines(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"package p\nfunc f() { go f() }", 1},
		{"package p\nimport \"sync\"\nfunc f(wg *sync.WaitGroup) { wg.Go(func() {}) }", 1},
		{"package p\nimport t \"time\"\nfunc f() { t.AfterFunc(0, f) }", 1},
		{"package p\nimport \"time\"\nfunc f() { time.Sleep(0); time.Now() }", 0},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), "p.go", tc.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(goroutines(f)); got != tc.want {
			t.Errorf("goroutines(%q): got %d, want %d", tc.src, got, tc.want)
		}
	}
}
