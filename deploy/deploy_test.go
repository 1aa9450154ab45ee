package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"

	"github.com/adclick/adclick/ingest/kinesis"
	"github.com/adclick/adclick/internal/codescan"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/sink/dynamo"
	"github.com/adclick/adclick/windowing"
)

const (
	repoRoot     = ".."
	dockerfile   = "Dockerfile"
	dockerignore = "Dockerfile.dockerignore"
	templateFile = "cloudformation/adclick.yaml"
	unitFile     = "systemd/adclick.service"
	envFile      = "systemd/adclick.env"
)

var binPath string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

// runMain builds the binary once for the --help checks; ADCLICK_TEST_BINARY
// names a prebuilt one instead.
func runMain(m *testing.M) int {
	if p := os.Getenv("ADCLICK_TEST_BINARY"); p != "" {
		binPath = p
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "adclick-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "adclick")
	cmd := exec.Command("go", "build", "-o", binPath, "./cmd/adclick")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy: go build ./cmd/adclick failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// runFlags returns the flag names `adclick run --help` lists.
func runFlags(t *testing.T) map[string]bool {
	t.Helper()
	flags, _ := runHelp(t)
	return flags
}

// runHelp returns the flag names `adclick run --help` lists and, when the
// help names each flag's environment variables ("--job-gen
// [ADCLICK_RUN_JOB_GEN]"), every such variable with its flag.
func runHelp(t *testing.T) (flags map[string]bool, vars map[string]string) {
	t.Helper()
	cmd := exec.Command(binPath, "run", "--help")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ADCLICK_") })
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("adclick run --help: %v\n%s", err, out)
	}
	flags, vars = map[string]bool{}, map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)(?:\s+\[([A-Z0-9_, ]+)\])?\s`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
		for _, v := range strings.Split(m[2], ",") {
			if v = strings.TrimSpace(v); v != "" {
				vars[v] = m[1]
			}
		}
	}
	if !flags["data"] || !flags["source"] {
		t.Fatalf("could not read the flags of adclick run --help (got %v):\n%s", flags, out)
	}
	return flags, vars
}

// ---------------------------------------------------------------- Dockerfile

// instr is one Dockerfile instruction, continuation lines joined.
type instr struct {
	cmd  string // upper case: FROM, RUN, …
	args string
	line int
}

func parseDockerfile(t *testing.T) (stages [][]instr, args map[string]string) {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	args = map[string]string{}
	var cur []instr
	sc := bufio.NewScanner(bytes.NewReader(b))
	pending, at := "", 0
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if pending == "" && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasPrefix(l, "#") { // a comment inside a continued instruction
			continue
		}
		if pending == "" {
			at = n
		}
		if strings.HasSuffix(l, "\\") {
			pending += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		full := pending + l
		pending = ""
		cmd, rest, _ := strings.Cut(full, " ")
		in := instr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest), line: at}
		if in.cmd == "FROM" {
			if cur != nil || len(stages) > 0 {
				stages = append(stages, cur)
			}
			cur = nil
		}
		if in.cmd == "ARG" && len(stages) == 0 && cur == nil {
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
			continue
		}
		cur = append(cur, in)
	}
	stages = append(stages, cur)
	return stages, args
}

func TestDockerfileShape(t *testing.T) {
	stages, args := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("got %d stages, want a multi-stage build", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.Contains(build[0].args, "golang:${GO_VERSION}") || !strings.HasSuffix(build[0].args, "AS build") {
		t.Errorf("first stage is %q, want golang:${GO_VERSION}… AS build", build[0].args)
	}
	// The Go version must follow go.mod's go directive (major.minor).
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || args["GO_VERSION"] != string(m[1]) {
		t.Errorf("ARG GO_VERSION=%q, want go.mod's %q", args["GO_VERSION"], m)
	}
	from := final[0].args
	if !strings.HasPrefix(from, "gcr.io/distroless/static") && from != "scratch" {
		t.Errorf("final stage FROM %q, want distroless/static or scratch (no shell)", from)
	}
	var user, entry, health string
	labels := map[string]string{}
	finalArgs := map[string]bool{}
	copied := map[string]bool{}
	_, vars := runHelp(t)
	for _, in := range final {
		switch in.cmd {
		case "RUN", "SHELL":
			t.Errorf("line %d: %s in the final stage needs a shell, which the image must not have", in.line, in.cmd)
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entry = in.args
		case "CMD":
			if !strings.HasPrefix(in.args, "[") {
				t.Errorf("line %d: CMD in shell form needs a shell; use the exec form", in.line)
			}
		case "HEALTHCHECK":
			health = healthcheckCommand(in.args)
			if !strings.HasPrefix(health, "[") && health != "NONE" {
				t.Errorf("line %d: HEALTHCHECK %q: want CMD in the exec form (no shell) or NONE", in.line, in.args)
			}
		case "LABEL":
			for _, w := range shellWords(in.args) {
				k, v, _ := strings.Cut(w, "=")
				labels[k] = v
			}
		case "ARG":
			k, _, _ := strings.Cut(in.args, "=")
			finalArgs[k] = true
		case "COPY":
			if w := strings.Fields(in.args); len(w) > 0 {
				copied[w[len(w)-1]] = true
			}
		case "ENV":
			for _, w := range shellWords(in.args) {
				k, _, _ := strings.Cut(w, "=")
				checkEnvName(t, "Dockerfile ENV", k, nil, vars)
			}
		}
	}
	// OCI image labels, the version and revision from build arguments.
	for _, k := range []string{"title", "description", "source", "version", "revision", "created"} {
		if labels["org.opencontainers.image."+k] == "" {
			t.Errorf("no LABEL org.opencontainers.image.%s", k)
		}
	}
	for k, arg := range map[string]string{"version": "VERSION", "revision": "REVISION", "created": "CREATED"} {
		if got := labels["org.opencontainers.image."+k]; got != "${"+arg+"}" {
			t.Errorf("LABEL org.opencontainers.image.%s=%q, want ${%s}", k, got, arg)
		}
		if _, ok := args[arg]; !ok || !finalArgs[arg] {
			t.Errorf("ARG %s must be declared before the first FROM (its default) and in the final stage (to use it)", arg)
		}
	}
	if !copied["/healthcheck"] || !strings.Contains(health, `"/healthcheck"`) || !strings.Contains(health, "/healthz") {
		t.Errorf("HEALTHCHECK %s: want the probe /healthcheck (copied into the image) on /healthz", health)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("USER %q, want a non-root user", user)
	}
	if entry != `["/adclick"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/adclick\"]", entry)
	}
	cmd := buildCommand(t, stages)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "-X main.version=${VERSION}", "./cmd/adclick"} {
		if !slices.ContainsFunc(cmd, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("build command %q lacks %s", cmd, want)
		}
	}
	buildArgs := map[string]bool{}
	for _, in := range build {
		if in.cmd == "ARG" {
			k, _, _ := strings.Cut(in.args, "=")
			buildArgs[k] = true
		}
	}
	if !buildArgs["VERSION"] {
		t.Error("the build stage does not declare ARG VERSION, so ${VERSION} is empty in its go build")
	}
}

// healthcheckCommand returns a HEALTHCHECK's command without its options
// (--interval=…): "NONE", or the CMD's argument.
func healthcheckCommand(args string) string {
	rest := strings.TrimSpace(args)
	for strings.HasPrefix(rest, "--") {
		_, after, _ := strings.Cut(rest, " ")
		rest = strings.TrimSpace(after)
	}
	if c, ok := strings.CutPrefix(rest, "CMD "); ok {
		return strings.TrimSpace(c)
	}
	return rest
}

// buildCommand returns the words of the build stage's first `go build` RUN
// line, the binary's.
func buildCommand(t *testing.T, stages [][]instr) []string {
	t.Helper()
	return buildCommands(t, stages)[0]
}

// buildCommands returns the words of every `go build` RUN line of the
// build stage.
func buildCommands(t *testing.T, stages [][]instr) [][]string {
	t.Helper()
	var out [][]string
	for _, in := range stages[0] {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			out = append(out, shellWords(in.args))
		}
	}
	if len(out) == 0 {
		t.Fatal("the build stage has no RUN … go build")
	}
	return out
}

// shellWords splits a command line with single and double quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// ignoreMatcher implements the subset of .dockerignore syntax the file
// uses: patterns relative to the context root, * and ? within a path
// element, ** across elements, ! exceptions; a match on a directory
// excludes everything under it.
type ignoreMatcher struct {
	res []*regexp.Regexp
	neg []bool
}

func loadIgnore(t *testing.T) *ignoreMatcher {
	t.Helper()
	b, err := os.ReadFile(dockerignore)
	if err != nil {
		t.Fatal(err)
	}
	return parseIgnore(string(b))
}

func parseIgnore(text string) *ignoreMatcher {
	m := &ignoreMatcher{}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		neg := strings.HasPrefix(l, "!")
		l = strings.TrimPrefix(strings.TrimPrefix(l, "!"), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(l); i++ {
			switch {
			case strings.HasPrefix(l[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(l[i:], "**"):
				re.WriteString(".*")
				i++
			case l[i] == '*':
				re.WriteString("[^/]*")
			case l[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(l[i])))
			}
		}
		re.WriteString("(/.*)?$")
		m.res = append(m.res, regexp.MustCompile(re.String()))
		m.neg = append(m.neg, neg)
	}
	return m
}

func (m *ignoreMatcher) excluded(rel string) bool {
	ex := false
	for i, re := range m.res {
		if re.MatchString(rel) {
			ex = !m.neg[i]
		}
	}
	return ex
}

// TestDockerBuildCommand copies the build context the Dockerfile sees (the
// repository minus the ignore list), runs the build stage's own go build
// command in it, and checks that the result is a static binary identical to
// a plain `go build` with the same flags, and that it runs.
func TestDockerBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Log("-short: building anyway; the check is the point of this package")
	}
	stages, _ := parseDockerfile(t)
	cmds := buildCommands(t, stages)
	words := cmds[0]
	ctxDir := t.TempDir()
	ign := loadIgnore(t)
	for _, must := range []string{".git/HEAD", "scripts/servers/node_modules/x", "adclick-data/x", "sink/sink_test.go", "deploy/cfn-validate/validate.js"} {
		if !ign.excluded(must) {
			t.Errorf("%s does not exclude %s", dockerignore, must)
		}
	}
	if ign.excluded("go.mod") || ign.excluded("cmd/adclick/main.go") {
		t.Fatalf("%s excludes go.mod or cmd/adclick", dockerignore)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ign.excluded(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			if (strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")) || rel == "go.mod" || rel == "go.sum" {
				t.Errorf("%s excludes %s, which the build needs", dockerignore, rel)
			}
			return nil
		}
		dst := filepath.Join(ctxDir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, dst)
	})
	if err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	dockerBin := filepath.Join(out, "adclick-docker")
	refBin := filepath.Join(out, "adclick-ref")

	// The Dockerfile's command: VAR=value prefixes become the environment,
	// $TARGETOS/$TARGETARCH the host's, ${VERSION} a test version, -o goes
	// to the temp dir.
	const testVersion = "v9.8.7-deploytest"
	command := func(words []string, out string) (env, argv []string) {
		env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		for i := 0; i < len(words); i++ {
			w := strings.NewReplacer("$TARGETOS", runtime.GOOS, "$TARGETARCH", runtime.GOARCH,
				"${TARGETOS}", runtime.GOOS, "${TARGETARCH}", runtime.GOARCH,
				"${VERSION}", testVersion, "$VERSION", testVersion).Replace(words[i])
			if len(argv) == 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w) {
				env = append(env, w)
				continue
			}
			if w == "-o" && i+1 < len(words) {
				argv = append(argv, "-o", out)
				i++
				continue
			}
			argv = append(argv, w)
		}
		if len(argv) < 2 || argv[0] != "go" || argv[1] != "build" {
			t.Fatalf("build command %q: want go build …", words)
		}
		return env, argv
	}
	env, argv := command(words, dockerBin)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(dir string, env []string, argv ...string) {
		t.Helper()
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Dir, c.Env = dir, env
		if b, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s (in %s): %v\n%s", strings.Join(argv, " "), dir, err, b)
		}
	}
	run(ctxDir, env, argv...)
	// The reference build uses the same snapshot of the source (the tree
	// may change while the test runs).
	run(ctxDir, append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0"),
		"go", "build", "-trimpath", "-ldflags=-s -w -X main.version="+testVersion, "-o", refBin, "./cmd/adclick")
	// The other binaries of the image (the health probe) build from the
	// same context.
	for i, w := range cmds[1:] {
		env, argv := command(w, filepath.Join(out, fmt.Sprintf("extra-%d", i)))
		run(ctxDir, env, argv...)
	}

	if a, b := fileSum(t, dockerBin), fileSum(t, refBin); a != b {
		t.Errorf("the Dockerfile's build gives %s, plain go build -trimpath -ldflags='-s -w -X main.version=…' gives %s: not the same binary", a, b)
	}
	// -X names a variable that exists: a misspelt one is silently ignored.
	if b, err := exec.Command(dockerBin, "version").CombinedOutput(); err != nil || !strings.Contains(string(b), testVersion) {
		t.Errorf("adclick version of the image's binary built with VERSION=%s: %v\n%s", testVersion, err, b)
	}
	f, err := elf.Open(dockerBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v: not static", libs)
	}
	bi, err := buildinfo.ReadFile(dockerBin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	// With -trimpath the build info leaves -ldflags out; -s shows as a
	// missing symbol table.
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v: want CGO_ENABLED=0 and -trimpath=true", settings)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: built without -ldflags=-s")
	}
	c := exec.Command(dockerBin, "help")
	if b, err := c.CombinedOutput(); err != nil || !strings.Contains(string(b), "adclick run") {
		t.Errorf("adclick help: %v\n%s", err, b)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// ---------------------------------------------------------------- CloudFormation

// cfnValue converts a YAML node to plain Go values, turning CloudFormation's
// short-form tags into their long form: !Ref X → {"Ref": X}, !GetAtt A.B →
// {"Fn::GetAtt": [A, B]}, !Sub s → {"Fn::Sub": s}, and so on.
func cfnValue(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.DocumentNode:
		return cfnValue(n.Content[0])
	case yaml.AliasNode:
		return cfnValue(n.Alias)
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			val, err := cfnValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			val, err := cfnValue(c)
			if err != nil {
				return nil, err
			}
			l = append(l, val)
		}
		v = l
	case yaml.ScalarNode:
		v = n.Value
	}
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref", "Condition":
		return map[string]any{name: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			a, b, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q needs Resource.Attribute", n.Line, s)
			}
			v = []any{a, b}
		}
		return map[string]any{"Fn::GetAtt": v}, nil
	case "Sub", "If", "Equals", "Not", "And", "Or", "Join", "Select", "Split", "FindInMap",
		"GetAZs", "Base64", "ImportValue", "Cidr", "Length", "ToJsonString":
		return map[string]any{"Fn::" + name: v}, nil
	}
	return nil, fmt.Errorf("line %d: unknown tag %s", n.Line, n.Tag)
}

type template struct {
	Parameters map[string]any
	Rules      map[string]any
	Mappings   map[string]any
	Conditions map[string]any
	Resources  map[string]map[string]any
	Outputs    map[string]any
}

func loadTemplate(t *testing.T) template {
	t.Helper()
	b, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", templateFile, err)
	}
	v, err := cfnValue(&doc)
	if err != nil {
		t.Fatalf("%s: %v", templateFile, err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: top level is not a mapping", templateFile)
	}
	tp := template{Resources: map[string]map[string]any{}}
	tp.Parameters, _ = top["Parameters"].(map[string]any)
	tp.Conditions, _ = top["Conditions"].(map[string]any)
	tp.Rules, _ = top["Rules"].(map[string]any)
	tp.Mappings, _ = top["Mappings"].(map[string]any)
	tp.Outputs, _ = top["Outputs"].(map[string]any)
	res, _ := top["Resources"].(map[string]any)
	for name, r := range res {
		rm, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("resource %s is not a mapping", name)
		}
		tp.Resources[name] = rm
	}
	if top["AWSTemplateFormatVersion"] != "2010-09-09" {
		t.Errorf("AWSTemplateFormatVersion %v, want 2010-09-09", top["AWSTemplateFormatVersion"])
	}
	return tp
}

func (tp template) ofType(typ string) []string {
	var names []string
	for n, r := range tp.Resources {
		if r["Type"] == typ {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// get walks a path of map keys and list indexes.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// walk calls fn for every value in v.
func walk(v any, fn func(any)) {
	fn(v)
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			walk(x[k], fn)
		}
	case []any:
		for _, e := range x {
			walk(e, fn)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestTemplateReferences is a small lint: every Ref, GetAtt, Sub variable
// and condition names something the template declares.
func TestTemplateReferences(t *testing.T) {
	tp := loadTemplate(t)
	known := func(name string) bool {
		_, p := tp.Parameters[name]
		_, r := tp.Resources[name]
		return p || r || strings.HasPrefix(name, "AWS::")
	}
	subVar := regexp.MustCompile(`\$\{([^}!][^}]*)\}`)
	walk(map[string]any{"r": anyMap(tp.Resources), "o": tp.Outputs, "c": tp.Conditions, "u": tp.Rules}, func(v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			return
		}
		for k, arg := range m {
			switch k {
			case "Ref":
				if s, _ := arg.(string); !known(s) {
					t.Errorf("!Ref %v: no such parameter or resource", arg)
				}
			case "Fn::GetAtt":
				if s, _ := get(arg, 0).(string); tp.Resources[s] == nil {
					t.Errorf("!GetAtt %v: no such resource", arg)
				}
			case "Fn::Sub":
				s, _ := arg.(string)
				local := map[string]any{}
				if l, ok := arg.([]any); ok && len(l) == 2 {
					s, _ = l[0].(string)
					local, _ = l[1].(map[string]any)
				}
				for _, sm := range subVar.FindAllStringSubmatch(s, -1) {
					base, _, _ := strings.Cut(sm[1], ".")
					if _, ok := local[sm[1]]; !ok && !known(base) {
						t.Errorf("!Sub ${%s}: no such parameter or resource", sm[1])
					}
					if strings.Contains(sm[1], ".") && tp.Resources[base] == nil {
						t.Errorf("!Sub ${%s}: attribute of %s, which is not a resource", sm[1], base)
					}
				}
			case "Fn::If":
				if c, _ := get(arg, 0).(string); tp.Conditions[c] == nil {
					t.Errorf("!If %v: no such condition", c)
				}
			case "Fn::FindInMap":
				if m, _ := get(arg, 0).(string); tp.Mappings[m] == nil {
					t.Errorf("!FindInMap %v: no such mapping", arg)
				}
			}
		}
	})
	for name, r := range tp.Resources {
		if c, ok := r["Condition"].(string); ok && tp.Conditions[c] == nil {
			t.Errorf("resource %s: no such condition %s", name, c)
		}
		typ, _ := r["Type"].(string)
		if !regexp.MustCompile(`^AWS::[A-Za-z0-9]+::[A-Za-z0-9]+$`).MatchString(typ) {
			t.Errorf("resource %s: bad Type %q", name, typ)
		}
	}
}

func anyMap(m map[string]map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestTemplateResources checks that the template declares everything the
// service needs, configured as the code and the design require.
func TestTemplateResources(t *testing.T) {
	tp := loadTemplate(t)
	for typ, min := range map[string]int{
		"AWS::Kinesis::Stream":                 1,
		"AWS::DynamoDB::Table":                 2, // rows and leases
		"AWS::ElastiCache::ReplicationGroup":   1,
		"AWS::S3::Bucket":                      1,
		"AWS::ECS::Cluster":                    1,
		"AWS::ECS::TaskDefinition":             1,
		"AWS::ECS::Service":                    1,
		"AWS::IAM::Role":                       2, // task role and execution role
		"AWS::Logs::LogGroup":                  1,
		"AWS::CloudWatch::Alarm":               4,
		"AWS::EC2::SecurityGroup":              2,
		"AWS::SecretsManager::Secret":          1,
		"AWS::ElastiCache::SubnetGroup":        1,
		"AWS::IAM::ManagedPolicy":              1,
		"AWS::S3::BucketPolicy":                1,
		"AWS::EC2::SecurityGroupEgress":        0,
		"AWS::SecretsManager::SecretTargetAtt": 0,
	} {
		if got := len(tp.ofType(typ)); got < min {
			t.Errorf("%d resources of type %s, want at least %d", got, typ, min)
		}
	}

	for _, n := range tp.ofType("AWS::ElastiCache::ReplicationGroup") {
		if e := props(tp.Resources[n])["Engine"]; e != "valkey" {
			t.Errorf("%s: Engine %v, want valkey", n, e)
		}
		// The tasks connect with --valkey-tls (checked with their commands).
		if e := props(tp.Resources[n])["TransitEncryptionEnabled"]; fmt.Sprint(e) != "true" {
			t.Errorf("%s: TransitEncryptionEnabled %v, want true", n, e)
		}
	}
	for _, n := range tp.ofType("AWS::Kinesis::Stream") {
		if get(props(tp.Resources[n]), "StreamModeDetails", "StreamMode") == nil {
			t.Errorf("%s: no StreamModeDetails.StreamMode (on-demand or provisioned)", n)
		}
	}
	for _, n := range tp.ofType("AWS::S3::Bucket") {
		p := props(tp.Resources[n])
		if get(p, "VersioningConfiguration", "Status") != "Enabled" {
			t.Errorf("%s: versioning not enabled", n)
		}
		rules, _ := get(p, "LifecycleConfiguration", "Rules").([]any)
		var prefixes []string
		for _, r := range rules {
			if s, ok := get(r, "Prefix").(string); ok {
				prefixes = append(prefixes, s)
			}
		}
		if !slices.Contains(prefixes, "checkpoints/") || !slices.Contains(prefixes, "lake/") {
			t.Errorf("%s: lifecycle rule prefixes %v, want checkpoints/ and lake/", n, prefixes)
		}
	}
	for _, n := range tp.ofType("AWS::Logs::LogGroup") {
		if props(tp.Resources[n])["RetentionInDays"] == nil {
			t.Errorf("%s: no RetentionInDays", n)
		}
	}
	for _, n := range tp.ofType("AWS::ECS::Service") {
		p := props(tp.Resources[n])
		// A fleet's workers share their job by range leases, and its
		// deployments run an extra task (TestTemplateFleet); a single task
		// is its checkpoint prefix's only writer.
		if !tp.isFleetService(n) && get(p, "DeploymentConfiguration", "MaximumPercent") != "100" {
			t.Errorf("%s: MaximumPercent %v, want 100 (never two tasks on one checkpoint prefix)", n, get(p, "DeploymentConfiguration", "MaximumPercent"))
		}
		if get(p, "LaunchType") != "FARGATE" {
			t.Errorf("%s: LaunchType %v, want FARGATE", n, get(p, "LaunchType"))
		}
	}

	// The adclick container of every task definition: the flags exist, the
	// AWS mode is wired, stop leaves time for the final checkpoint, and each
	// colour has its own checkpoint prefix.
	flags, vars := runHelp(t)
	prefixes := map[string]string{}
	for _, n := range tp.ofType("AWS::ECS::TaskDefinition") {
		var c map[string]any
		defs, _ := props(tp.Resources[n])["ContainerDefinitions"].([]any)
		for _, d := range defs {
			if get(d, "Name") == "adclick" {
				c, _ = d.(map[string]any)
			}
		}
		if c == nil {
			t.Errorf("%s: no container named adclick", n)
			continue
		}
		cmd, _ := c["Command"].([]any)
		if len(cmd) == 0 || cmd[0] != "run" {
			t.Errorf("%s: command %v, want run …", n, cmd)
			continue
		}
		values := map[string]string{}
		given := map[string]bool{}
		for i := 1; i < len(cmd); i++ {
			w, ok := cmd[i].(string)
			if !ok || !strings.HasPrefix(w, "--") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
			given[name] = true
			if !flags[name] {
				t.Errorf("%s: command flag --%s is not in `adclick run --help`", n, name)
			}
			if i+1 < len(cmd) {
				values[name] = flatten(cmd[i+1])
			}
		}
		if !given["valkey-tls"] {
			t.Errorf("%s: no --valkey-tls: the Valkey group requires in-transit encryption", n)
		}
		for flag, prefix := range map[string]string{"source": "kinesis:", "sink": "dynamodb:", "checkpoints": "s3://", "valkey": "${Valkey.PrimaryEndPoint.Address}"} {
			if !strings.HasPrefix(values[flag], prefix) {
				t.Errorf("%s: --%s %q, want %s…", n, flag, values[flag], prefix)
			}
		}
		// The lake is in S3 (the task's disk goes with the task), one
		// prefix per generation like the checkpoints: the part and epoch
		// names of two jobs would collide.
		if !strings.HasPrefix(values["lake"], "s3://${Bucket}/lake/") {
			t.Errorf("%s: --lake %q, want s3://${Bucket}/lake/…", n, values["lake"])
		}
		for _, flag := range []string{"checkpoints", "lake"} {
			if other, dup := prefixes[values[flag]]; dup {
				t.Errorf("%s and %s share the --%s location %s", other, n, flag, values[flag])
			}
			prefixes[values[flag]] = n
		}
		envs, _ := c["Environment"].([]any)
		secrets, _ := c["Secrets"].([]any)
		for _, e := range append(envs, secrets...) {
			checkEnvName(t, n, flatten(get(e, "Name")), flags, vars)
		}
		if s, _ := strconv.Atoi(flatten(c["StopTimeout"])); s < 60 {
			t.Errorf("%s: StopTimeout %v, want at least 60 s for the final checkpoint", n, c["StopTimeout"])
		}
	}
}

// flatten renders a scalar or a Sub for messages and prefix checks.
func flatten(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if s, ok := x["Fn::Sub"].(string); ok {
			return s
		}
		if r, ok := x["Ref"].(string); ok {
			return "${" + r + "}"
		}
	}
	return fmt.Sprint(v)
}

// nonFlagEnv are environment variables the binary reads that are not flags.
var nonFlagEnv = map[string]bool{"ADCLICK_ADMIN_TOKEN": true, "ADCLICK_READ_TOKEN": true}

// checkEnvName checks that an ADCLICK_ variable is one `adclick run` reads:
// one that `adclick run --help` names (vars), or, for a binary whose help
// names none, ADCLICK_<FLAG> of one of its flags. A variable the binary
// does not read is dropped at best, and refused at worst.
func checkEnvName(t *testing.T, where, name string, flags map[string]bool, vars map[string]string) {
	t.Helper()
	if !strings.HasPrefix(name, "ADCLICK_") || nonFlagEnv[name] {
		return
	}
	if len(vars) > 0 {
		if _, ok := vars[name]; !ok {
			t.Errorf("%s: %s is not a variable of `adclick run` (its --help lists each flag's)", where, name)
		}
		return
	}
	flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "ADCLICK_"), "_", "-"))
	if !flags[flag] {
		t.Errorf("%s: %s is not the variable of any `adclick run` flag (no --%s)", where, name, flag)
	}
}

// TestTemplateTableMatchesCode runs sink/dynamo's and lease's CreateTable
// against a fake client and compares each request with the template's
// table: Table (ad_metrics) and LeaseTable.
func TestTemplateTableMatchesCode(t *testing.T) {
	tp := loadTemplate(t)
	if tables := tp.ofType("AWS::DynamoDB::Table"); !slices.Equal(tables, []string{"LeaseTable", "Table"}) {
		t.Fatalf("DynamoDB tables %v, want [LeaseTable Table]", tables)
	}
	fake := &tableFake{}
	st, err := dynamo.New(fake, dynamo.Options{Table: "ad_metrics"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(context.Background()); err != nil {
		t.Fatalf("CreateTable against the fake: %v", err)
	}
	if fake.in == nil {
		t.Fatal("sink/dynamo's CreateTable sent no CreateTableInput")
	}
	compareTable(t, "Table", "sink/dynamo", props(tp.Resources["Table"]), fake.in)
	// TTL: the attribute the code writes and setup turns on.
	ttl := get(props(tp.Resources["Table"]), "TimeToLiveSpecification")
	switch {
	case fake.ttl == nil:
		t.Error("sink/dynamo's CreateTable did not turn TTL on")
	case flatten(get(ttl, "AttributeName")) != aws.ToString(fake.ttl.AttributeName) || flatten(get(ttl, "Enabled")) != "true":
		t.Errorf("Table TimeToLiveSpecification %v, want AttributeName %s enabled, as sink/dynamo sets it", ttl, aws.ToString(fake.ttl.AttributeName))
	case aws.ToString(fake.ttl.AttributeName) != dynamo.TTLAttribute:
		t.Errorf("CreateTable turns TTL on for %s, but rows carry %s", aws.ToString(fake.ttl.AttributeName), dynamo.TTLAttribute)
	}

	lfake := &tableFake{}
	if err := lease.CreateTable(context.Background(), lfake, "ad_metrics"+lease.TableSuffix); err != nil {
		t.Fatalf("lease.CreateTable against the fake: %v", err)
	}
	if lfake.in == nil {
		t.Fatal("lease.CreateTable sent no CreateTableInput")
	}
	compareTable(t, "LeaseTable", "lease", props(tp.Resources["LeaseTable"]), lfake.in)
}

// compareTable reports every difference between the template's table
// properties p and the CreateTableInput the code sends.
func compareTable(t *testing.T, name, code string, p map[string]any, in *dynamodb.CreateTableInput) {
	t.Helper()
	// Render both sides as sorted strings.
	var wantAttrs, gotAttrs, wantKey, gotKey, wantGSI, gotGSI []string
	for _, a := range in.AttributeDefinitions {
		wantAttrs = append(wantAttrs, aws.ToString(a.AttributeName)+":"+string(a.AttributeType))
	}
	for _, a := range asList(p["AttributeDefinitions"]) {
		gotAttrs = append(gotAttrs, flatten(get(a, "AttributeName"))+":"+flatten(get(a, "AttributeType")))
	}
	keyStr := func(ks []types.KeySchemaElement) string {
		var s []string
		for _, k := range ks {
			s = append(s, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		return strings.Join(s, ",")
	}
	keyStrT := func(v any) string {
		var s []string
		for _, k := range asList(v) {
			s = append(s, flatten(get(k, "AttributeName"))+" "+flatten(get(k, "KeyType")))
		}
		return strings.Join(s, ",")
	}
	wantKey = []string{keyStr(in.KeySchema)}
	gotKey = []string{keyStrT(p["KeySchema"])}
	for _, g := range in.GlobalSecondaryIndexes {
		wantGSI = append(wantGSI, aws.ToString(g.IndexName)+"|"+keyStr(g.KeySchema)+"|"+string(g.Projection.ProjectionType))
	}
	for _, g := range asList(p["GlobalSecondaryIndexes"]) {
		gotGSI = append(gotGSI, flatten(get(g, "IndexName"))+"|"+keyStrT(get(g, "KeySchema"))+"|"+flatten(get(g, "Projection", "ProjectionType")))
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"attribute definitions", gotAttrs, wantAttrs}, {"key schema", gotKey, wantKey}, {"global secondary indexes", gotGSI, wantGSI}} {
		slices.Sort(c.got)
		slices.Sort(c.want)
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s %s: template has %v, %s creates %v", name, c.what, c.got, code, c.want)
		}
	}
	if got, want := flatten(p["BillingMode"]), string(in.BillingMode); got != want {
		t.Errorf("%s BillingMode: template %s, %s %s", name, got, code, want)
	}
}

// TestTemplateLeaseTable checks that every task finds the lease table the
// template creates, and may hold leases in it: its name is the one adclick
// run derives from --sink (the rows table's + lease.TableSuffix) unless the
// command names it with --lease-table, and the task role may read and
// conditionally update it.
func TestTemplateLeaseTable(t *testing.T) {
	tp := loadTemplate(t)
	if got := flatten(props(tp.Resources["Table"])["TableName"]); got != "${TableName}" {
		t.Fatalf("Table's TableName %q, want !Ref TableName", got)
	}
	if got, want := flatten(props(tp.Resources["LeaseTable"])["TableName"]), "${TableName}"+lease.TableSuffix; got != want {
		t.Errorf("LeaseTable's TableName %q, want %q (the default of adclick setup and run)", got, want)
	}
	for _, n := range tp.ofType("AWS::ECS::TaskDefinition") {
		for _, d := range asList(props(tp.Resources[n])["ContainerDefinitions"]) {
			if get(d, "Name") != "adclick" {
				continue
			}
			cmd := asList(get(d, "Command"))
			values := map[string]string{}
			for i := 0; i+1 < len(cmd); i++ {
				if w, ok := cmd[i].(string); ok && strings.HasPrefix(w, "--") {
					values[strings.TrimPrefix(w, "--")] = flatten(cmd[i+1])
				}
			}
			lt, given := values["lease-table"]
			switch {
			case given && lt != "${LeaseTable}":
				t.Errorf("%s: --lease-table %q, want ${LeaseTable}", n, lt)
			case !given && values["sink"] != "dynamodb:${Table}":
				t.Errorf("%s: --sink %q without --lease-table: the lease table run derives would not be LeaseTable", n, values["sink"])
			}
		}
	}
	// Every task role: GetItem and UpdateItem on the lease table (a fleet
	// worker's more: TestTemplateFleet).
	roles := tp.taskRoles()
	if !slices.Contains(roles, "TaskRole") {
		t.Errorf("task roles %v: want TaskRole among them", roles)
	}
	for _, role := range roles {
		allowed := tp.roleActionsOn(role, "LeaseTable")
		for _, a := range []string{"dynamodb:GetItem", "dynamodb:UpdateItem"} {
			if !allowed[a] {
				t.Errorf("%s does not allow %s on LeaseTable (allowed there: %v)", role, a, sortedKeys(allowed))
			}
		}
	}
}

// taskRoles returns the roles the task definitions run as (TaskRoleArn).
func (tp template) taskRoles() []string {
	var roles []string
	for _, n := range tp.ofType("AWS::ECS::TaskDefinition") {
		if r, _ := get(props(tp.Resources[n]), "TaskRoleArn", "Fn::GetAtt", 0).(string); r != "" && !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	return roles
}

// roleActionsOn returns the actions role's inline policies allow on
// resource (a statement whose Resource names it by GetAtt, Ref or Sub).
func (tp template) roleActionsOn(role, resource string) map[string]bool {
	allowed := map[string]bool{}
	for _, p := range asList(props(tp.Resources[role])["Policies"]) {
		for _, st := range asList(get(p, "PolicyDocument", "Statement")) {
			if get(st, "Effect") != "Allow" {
				continue
			}
			on := false
			walk(get(st, "Resource"), func(v any) {
				m, ok := v.(map[string]any)
				if !ok {
					return
				}
				s, _ := m["Fn::Sub"].(string)
				if get(m, "Fn::GetAtt", 0) == resource || m["Ref"] == resource || strings.Contains(s, "${"+resource+".") || strings.Contains(s, "${"+resource+"}") {
					on = true
				}
			})
			if !on {
				continue
			}
			acts := asList(get(st, "Action"))
			if a, ok := get(st, "Action").(string); ok {
				acts = []any{a}
			}
			for _, a := range acts {
				allowed[flatten(a)] = true
			}
		}
	}
	return allowed
}

// TestTemplateHealthCheck checks the ECS health check of every adclick
// container: the image's probe (the image has no shell or curl) on the
// job's liveness route, the one api serves, on the port --listen opens,
// with a -started file in the image's writable data directory, and
// parameters ECS accepts.
func TestTemplateHealthCheck(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "api", "server.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`routeHealth\s*=\s*"([^"]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("cannot find api's routeHealth in api/server.go")
	}
	healthz := string(m[1])
	stages, _ := parseDockerfile(t)
	var probe string
	for _, in := range stages[len(stages)-1] {
		if f := strings.Fields(in.args); in.cmd == "COPY" && len(f) > 0 && strings.HasSuffix(f[len(f)-1], "healthcheck") {
			probe = f[len(f)-1]
		}
	}
	if probe == "" {
		t.Fatal("the Dockerfile's final stage copies no health probe")
	}
	tp := loadTemplate(t)
	n := 0
	for _, name := range tp.ofType("AWS::ECS::TaskDefinition") {
		for _, d := range asList(props(tp.Resources[name])["ContainerDefinitions"]) {
			if get(d, "Name") != "adclick" {
				continue
			}
			n++
			hc := get(d, "HealthCheck")
			if hc == nil {
				t.Errorf("%s: the adclick container has no HealthCheck", name)
				continue
			}
			var cmd []string
			for _, w := range asList(get(hc, "Command")) {
				cmd = append(cmd, flatten(w))
			}
			if len(cmd) < 2 || cmd[0] != "CMD" || cmd[1] != probe {
				t.Errorf("%s: health check command %q, want [CMD %s …] (CMD-SHELL needs a shell)", name, cmd, probe)
				continue
			}
			opts := map[string]string{}
			for i := 2; i+1 < len(cmd); i += 2 {
				opts[cmd[i]] = cmd[i+1]
			}
			listen := ""
			c := asList(get(d, "Command"))
			for i := 0; i+1 < len(c); i++ {
				if c[i] == "--listen" {
					listen = flatten(c[i+1])
				}
			}
			_, port, _ := strings.Cut(listen, ":")
			if want := "http://127.0.0.1:" + port + healthz; opts["-url"] != want {
				t.Errorf("%s: health check -url %q, want %q (--listen %s, api's %s)", name, opts["-url"], want, listen, healthz)
			}
			if !strings.HasPrefix(opts["-started"], "/data/") {
				t.Errorf("%s: health check -started %q, want a file under /data (the image's writable directory)", name, opts["-started"])
			}
			for k, r := range map[string][2]int{"Interval": {5, 300}, "Timeout": {2, 60}, "Retries": {1, 10}, "StartPeriod": {0, 300}} {
				v, err := strconv.Atoi(flatten(get(hc, k)))
				if err != nil || v < r[0] || v > r[1] {
					t.Errorf("%s: health check %s %v, want %d to %d", name, k, get(hc, k), r[0], r[1])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no adclick container in the template")
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

// tableFake is the part of dynamo.API and lease.API CreateTable uses; other
// methods panic through the nil embedded interface, which would fail the
// test.
type tableFake struct {
	dynamo.API
	in  *dynamodb.CreateTableInput
	ttl *types.TimeToLiveSpecification
}

func (f *tableFake) UpdateTable(context.Context, *dynamodb.UpdateTableInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	return nil, errors.New("tableFake: UpdateTable on a table CreateTable just made")
}

func (f *tableFake) DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}}, nil
}

func (f *tableFake) UpdateTimeToLive(_ context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	f.ttl = in.TimeToLiveSpecification
	return &dynamodb.UpdateTimeToLiveOutput{}, nil
}

func (f *tableFake) CreateTable(_ context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	f.in = in
	return &dynamodb.CreateTableOutput{}, nil
}

func (f *tableFake) DescribeTable(_ context.Context, _ *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	td := &types.TableDescription{
		TableName: f.in.TableName, TableStatus: types.TableStatusActive,
		KeySchema: f.in.KeySchema, AttributeDefinitions: f.in.AttributeDefinitions,
	}
	for _, g := range f.in.GlobalSecondaryIndexes {
		td.GlobalSecondaryIndexes = append(td.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
			IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection, IndexStatus: types.IndexStatusActive,
		})
	}
	return &dynamodb.DescribeTableOutput{Table: td}, nil
}

// ---------------------------------------------------------------- IAM

// sdkServices are the AWS SDK packages whose calls need IAM permissions,
// with their IAM service prefix.
var sdkServices = map[string]string{
	"github.com/aws/aws-sdk-go-v2/service/kinesis":  "kinesis",
	"github.com/aws/aws-sdk-go-v2/service/dynamodb": "dynamodb",
	"github.com/aws/aws-sdk-go-v2/service/s3":       "s3",
}

// s3Actions maps S3 API operations to IAM actions where the names differ
// (S3's are the exception; Kinesis' and DynamoDB's are the operation names).
var s3Actions = map[string][]string{
	"GetObject":               {"s3:GetObject"},
	"HeadObject":              {"s3:GetObject"},
	"GetObjectAttributes":     {"s3:GetObject"},
	"PutObject":               {"s3:PutObject"},
	"CopyObject":              {"s3:GetObject", "s3:PutObject"},
	"CreateMultipartUpload":   {"s3:PutObject"},
	"UploadPart":              {"s3:PutObject"},
	"CompleteMultipartUpload": {"s3:PutObject"},
	"AbortMultipartUpload":    {"s3:AbortMultipartUpload"},
	"ListParts":               {"s3:ListMultipartUploadParts"},
	"DeleteObject":            {"s3:DeleteObject"},
	"DeleteObjects":           {"s3:DeleteObject"},
	"ListObjectsV2":           {"s3:ListBucket"},
	"ListObjects":             {"s3:ListBucket"},
	"HeadBucket":              {"s3:ListBucket"},
	"ListObjectVersions":      {"s3:ListBucketVersions"},
	"CreateBucket":            {"s3:CreateBucket"},
}

// s3Manager is the SDK's upload/download helper; it calls the multipart
// operations by itself.
const s3Manager = "github.com/aws/aws-sdk-go-v2/feature/s3/manager"

// codeActions lists the IAM actions of every SDK operation the repository's
// non-test Go source uses: each <service>.<Op>Input it names (in a narrow
// API interface's method list, or in a call), in packages other than test
// helpers (…test packages, internal/testenv). where says where each was seen.
func codeActions(t *testing.T) (actions map[string][]string) {
	t.Helper()
	actions = map[string][]string{}
	add := func(action, where string) {
		if !slices.Contains(actions[action], where) {
			actions[action] = append(actions[action], where)
		}
	}
	root, _ := filepath.Abs(repoRoot)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			n := d.Name()
			if rel != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" ||
				strings.HasSuffix(n, "test") || rel == "internal/testenv" || rel == "deploy") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v (cannot list its AWS calls)", rel, err)
			return nil
		}
		names := map[string]string{} // local import name → IAM service
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == s3Manager {
				for _, a := range []string{"s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"} {
					add(a, rel+" (s3 manager)")
				}
			}
			svc, ok := sdkServices[p]
			if !ok {
				continue
			}
			local := svc
			if imp.Name != nil {
				local = imp.Name.Name
			}
			names[local] = svc
		}
		if len(names) == 0 {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			svc, ok := names[id.Name]
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Input") {
				return true
			}
			op := strings.TrimSuffix(sel.Sel.Name, "Input")
			where := fmt.Sprintf("%s:%d", rel, fset.Position(sel.Pos()).Line)
			if svc != "s3" {
				add(svc+":"+op, where)
				return true
			}
			acts, known := s3Actions[op]
			if !known {
				t.Errorf("%s uses s3.%sInput: add its IAM action to s3Actions in deploy_test.go", where, op)
			}
			for _, a := range acts {
				add(a, where)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return actions
}

// policyActions returns, per IAM policy in the template (role inline
// policies and managed policies), the Allow actions.
func policyActions(t *testing.T, tp template) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	addDoc := func(where string, doc any) {
		for _, st := range asList(get(doc, "Statement")) {
			if get(st, "Effect") != "Allow" {
				continue
			}
			switch a := get(st, "Action").(type) {
			case string:
				out[where] = append(out[where], a)
			case []any:
				for _, x := range a {
					out[where] = append(out[where], flatten(x))
				}
			}
		}
	}
	for _, n := range tp.ofType("AWS::IAM::Role") {
		for _, p := range asList(props(tp.Resources[n])["Policies"]) {
			addDoc(n+"/"+flatten(get(p, "PolicyName")), get(p, "PolicyDocument"))
		}
	}
	for _, typ := range []string{"AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"} {
		for _, n := range tp.ofType(typ) {
			addDoc(n, props(tp.Resources[n])["PolicyDocument"])
		}
	}
	return out
}

// setupOnly are actions `adclick run` never needs: creating the stream, the
// table (its indexes and TTL) and the bucket, and putting records. They
// belong to the operator's policy.
var setupOnly = []string{"kinesis:CreateStream", "dynamodb:CreateTable", "dynamodb:UpdateTable", "dynamodb:UpdateTimeToLive",
	"dynamodb:DescribeTimeToLive", "kinesis:PutRecords", "s3:CreateBucket"}

// TestIAMMatchesCode checks that the template's policies together allow
// every Kinesis, DynamoDB and S3 action the code calls, that no policy
// allows one the code does not call (least privilege, no wildcards), and
// that the task role has none of the setup-only actions.
func TestIAMMatchesCode(t *testing.T) {
	tp := loadTemplate(t)
	code := codeActions(t)
	for _, want := range []string{"kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards", "dynamodb:UpdateItem", "dynamodb:Query"} {
		if code[want] == nil {
			t.Errorf("the scan of the Go source found no %s: is the scanner broken? (found %v)", want, sortedKeys(code))
		}
	}
	pols := policyActions(t, tp)
	granted := map[string]bool{}
	for where, acts := range pols {
		for _, a := range acts {
			granted[a] = true
			if strings.Contains(a, "*") {
				t.Errorf("%s allows %s: name the actions", where, a)
			}
			svc, _, _ := strings.Cut(a, ":")
			if (svc == "kinesis" || svc == "dynamodb" || svc == "s3") && code[a] == nil {
				t.Errorf("%s allows %s, which no Go source calls: remove it (least privilege)", where, a)
			}
		}
	}
	for _, a := range sortedKeys(code) {
		if !granted[a] {
			t.Errorf("the code calls %s (%s), but no policy in the template allows it", a, strings.Join(code[a], ", "))
		}
	}
	taskRoles := tp.taskRoles()
	for where, acts := range pols {
		if role, _, _ := strings.Cut(where, "/"); !slices.Contains(taskRoles, role) {
			continue
		}
		for _, a := range acts {
			if slices.Contains(setupOnly, a) {
				t.Errorf("%s allows %s, which only adclick setup/put need", where, a)
			}
		}
	}
	t.Logf("AWS actions the code calls: %v", sortedKeys(code))
}

// TestAlarmsUseRealMetrics checks that every alarm on the adclick namespace
// names a metric the code registers, and that the alarms the issue asks for
// exist.
func TestAlarmsUseRealMetrics(t *testing.T) {
	tp := loadTemplate(t)
	known := metricNames(t)
	var used []string
	// everyTask are the metrics of alarms that exist whatever the
	// parameters; the others are a fleet's (Condition IsFleet).
	everyTask := map[string]bool{}
	for _, n := range tp.ofType("AWS::CloudWatch::Alarm") {
		p := props(tp.Resources[n])
		var ms []string
		if p["Namespace"] == "adclick" {
			ms = append(ms, flatten(p["MetricName"]))
		}
		for _, m := range asList(p["Metrics"]) {
			if get(m, "MetricStat", "Metric", "Namespace") == "adclick" {
				ms = append(ms, flatten(get(m, "MetricStat", "Metric", "MetricName")))
			}
		}
		used = append(used, ms...)
		for _, m := range ms {
			if tp.Resources[n]["Condition"] != "IsFleet" {
				everyTask[m] = true
			}
		}
	}
	for _, m := range used {
		if !known[m] {
			t.Errorf("an alarm uses %s, which no Go source registers", m)
		}
	}
	for _, want := range []string{"adclick_watermark_lag_seconds", "adclick_kinesis_millis_behind_latest", "adclick_sink_refused_writes_total", "adclick_checkpoints_total", "adclick_valkey_up", "adclick_recount_unbalanced_hours"} {
		if !slices.Contains(used, want) {
			t.Errorf("no alarm on %s", want)
		}
	}
	// The agent must publish every metric an alarm uses: every task's
	// agent, for an alarm that exists whatever the parameters; the fleet
	// task's, for a fleet alarm (Condition IsFleet). The single-task
	// definitions stay as they were.
	for _, n := range tp.ofType("AWS::ECS::TaskDefinition") {
		fleetDef := tp.isFleetTaskDefinition(n)
		cfg := ""
		for _, d := range asList(props(tp.Resources[n])["ContainerDefinitions"]) {
			for _, e := range asList(get(d, "Environment")) {
				if get(e, "Name") == "CW_CONFIG_CONTENT" {
					cfg = flatten(get(e, "Value"))
				}
			}
		}
		for _, m := range used {
			if !everyTask[m] && !fleetDef {
				continue
			}
			if !strings.Contains(cfg, "^"+m+"$") {
				t.Errorf("%s: the CloudWatch agent does not publish %s, which an alarm uses", n, m)
			}
		}
	}
}

// metricNames returns the Prometheus metric names registered in the
// repository's non-test Go source.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	full := regexp.MustCompile(`^adclick_[a-z0-9_]*[a-z0-9]$`)
	root, _ := filepath.Abs(repoRoot)
	err := codescan.GoFiles(root, func(_ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING && full.MatchString(s) {
					names[s] = true
				}
			case *ast.CompositeLit:
				parts := codescan.KeyStrings(x)
				if parts["Namespace"] != "" || parts["Subsystem"] != "" {
					if name := codescan.MetricName(parts); name != "" {
						names[name] = true
					}
				}
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// ---------------------------------------------------------------- fleet

// adclickContainer returns the container named adclick of a task
// definition, or nil.
func (tp template) adclickContainer(def string) map[string]any {
	for _, d := range asList(props(tp.Resources[def])["ContainerDefinitions"]) {
		if get(d, "Name") == "adclick" {
			c, _ := d.(map[string]any)
			return c
		}
	}
	return nil
}

// commandFlags returns the flags of a container's command: each with the
// word after it (rendered by flatten), and which were given at all.
func commandFlags(c map[string]any) (values map[string]string, given map[string]bool) {
	values, given = map[string]string{}, map[string]bool{}
	cmd := asList(c["Command"])
	for i := 1; i < len(cmd); i++ {
		w, ok := cmd[i].(string)
		if !ok || !strings.HasPrefix(w, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		given[name] = true
		if i+1 < len(cmd) {
			values[name] = flatten(cmd[i+1])
		}
	}
	return values, given
}

// isFleetTaskDefinition reports whether a task definition runs a fleet
// worker (run --fleet).
func (tp template) isFleetTaskDefinition(def string) bool {
	c := tp.adclickContainer(def)
	if c == nil {
		return false
	}
	_, given := commandFlags(c)
	return given["fleet"]
}

// isFleetService reports whether a service runs fleet workers.
func (tp template) isFleetService(svc string) bool {
	def, _ := get(props(tp.Resources[svc]), "TaskDefinition", "Ref").(string)
	return def != "" && tp.isFleetTaskDefinition(def)
}

// refsOf returns the parameters and resources v names (Ref, GetAtt, Sub).
func refsOf(v any) map[string]bool {
	out := map[string]bool{}
	subVar := regexp.MustCompile(`\$\{([^}!][^}.]*)[^}]*\}`)
	walk(v, func(x any) {
		m, ok := x.(map[string]any)
		if !ok || len(m) != 1 {
			return
		}
		if r, ok := m["Ref"].(string); ok {
			out[r] = true
		}
		if r, ok := get(m, "Fn::GetAtt", 0).(string); ok {
			out[r] = true
		}
		s, _ := m["Fn::Sub"].(string)
		if l, ok := m["Fn::Sub"].([]any); ok && len(l) > 0 {
			s, _ = l[0].(string)
		}
		for _, sm := range subVar.FindAllStringSubmatch(s, -1) {
			out[sm[1]] = true
		}
	})
	return out
}

// TestTemplateFleet checks the fleet (run --fleet, FleetWorkers above 0):
// it exists only under IsFleet, and nothing else depends on it, so that
// FleetWorkers 0 leaves the single-task services as they were; its worker
// gets what run --fleet requires; its deployments run one task more than
// FleetWorkers, and --max-workers leaves a slot for it; its role may read
// the lease table as lease.Worker does and the stream as ingest/kinesis
// does (enhanced fan-out included); its setup command names the job and
// lease table its workers use; it runs alone; and it has an alarm.
func TestTemplateFleet(t *testing.T) {
	tp := loadTemplate(t)
	if d := flatten(get(tp.Parameters, "FleetWorkers", "Default")); d != "0" {
		t.Errorf("FleetWorkers defaults to %s, want 0 (no fleet: the single-task services as before)", d)
	}
	isFleet := tp.Conditions["IsFleet"]
	if get(isFleet, "Fn::Not", 0, "Fn::Equals", 0, "Ref") != "FleetWorkers" || flatten(get(isFleet, "Fn::Not", 0, "Fn::Equals", 1)) != "0" {
		t.Errorf("condition IsFleet %v, want !Not [!Equals [!Ref FleetWorkers, 0]]", isFleet)
	}

	// What belongs to the fleet: every resource under IsFleet, and the
	// fleet parameters. Nothing else may name them.
	fleet := map[string]bool{}
	for n, r := range tp.Resources {
		if r["Condition"] == "IsFleet" {
			fleet[n] = true
		}
	}
	for n := range tp.Parameters {
		if strings.HasPrefix(n, "Fleet") {
			fleet[n] = true
		}
	}
	for _, n := range sortedKeys(tp.Resources) {
		if tp.Resources[n]["Condition"] == "IsFleet" {
			continue
		}
		for r := range refsOf(tp.Resources[n]) {
			if fleet[r] {
				t.Errorf("%s names %s, which is the fleet's: only resources under Condition IsFleet may", n, r)
			}
		}
	}
	for _, n := range sortedKeys(tp.Outputs) {
		if get(tp.Outputs[n], "Condition") == "IsFleet" {
			continue
		}
		for r := range refsOf(tp.Outputs[n]) {
			if fleet[r] {
				t.Errorf("output %s names %s, which is the fleet's: give it Condition IsFleet", n, r)
			}
		}
	}

	var defs, svcs []string
	for _, n := range tp.ofType("AWS::ECS::TaskDefinition") {
		if tp.isFleetTaskDefinition(n) {
			defs = append(defs, n)
		}
	}
	for _, n := range tp.ofType("AWS::ECS::Service") {
		if tp.isFleetService(n) {
			svcs = append(svcs, n)
		}
	}
	if len(defs) != 1 || len(svcs) != 1 {
		t.Fatalf("fleet task definitions %v and services %v, want one of each", defs, svcs)
	}
	def, svc := defs[0], svcs[0]
	role, _ := get(props(tp.Resources[def]), "TaskRoleArn", "Fn::GetAtt", 0).(string)
	for _, n := range []string{def, svc, role} {
		if !fleet[n] {
			t.Errorf("%s is the fleet's but has no Condition IsFleet", n)
		}
	}

	// The worker's command: what checkFleet (cmd/adclick/fleet.go) requires,
	// nothing it refuses, and no worker id (every task would share it).
	c := tp.adclickContainer(def)
	values, given := commandFlags(c)
	for flag, prefix := range map[string]string{"source": "kinesis:${Stream}", "sink": "dynamodb:${Table}", "checkpoints": "s3://${Bucket}/checkpoints/", "lake": "s3://${Bucket}/lake/"} {
		if !strings.HasPrefix(values[flag], prefix) {
			t.Errorf("%s: --%s %q, want %s…", def, flag, values[flag], prefix)
		}
	}
	for _, flag := range []string{"job-name", "kinesis-read", "max-workers"} {
		if values[flag] == "" {
			t.Errorf("%s: no --%s", def, flag)
		}
	}
	_, vars := runHelp(t)
	env := map[string]any{}
	for _, e := range append(asList(c["Environment"]), asList(c["Secrets"])...) {
		env[flatten(get(e, "Name"))] = get(e, "Value")
	}
	for _, flag := range []string{"from-savepoint", "exit-when-idle", "exit-after-restore", "key-groups", "worker-id"} {
		if given[flag] {
			t.Errorf("%s: --%s: a fleet worker does not take it", def, flag)
		}
		for v, f := range vars {
			if _, set := env[v]; set && f == flag {
				t.Errorf("%s: %s (--%s): a fleet worker does not take it", def, v, flag)
			}
		}
	}
	if values["kinesis-read"] != "${FleetKinesisRead}" {
		t.Errorf("%s: --kinesis-read %q, want !Ref FleetKinesisRead", def, values["kinesis-read"])
	}
	for _, v := range asList(get(tp.Parameters, "FleetKinesisRead", "AllowedValues")) {
		if v != "efo" && v != "poll" {
			t.Errorf("FleetKinesisRead allows %v, want efo or poll", v)
		}
	}
	// With efo, each range's consumer is <name>-kg<from>-<to>; poll refuses
	// a name. The name is the job's own.
	consumer := env["ADCLICK_RUN_KINESIS_CONSUMER"]
	fo := tp.Conditions["FleetReadsByFanOut"]
	switch {
	case get(consumer, "Fn::If", 0) != "FleetReadsByFanOut" || flatten(get(consumer, "Fn::If", 2)) != "":
		t.Errorf("%s: ADCLICK_RUN_KINESIS_CONSUMER %v, want !If [FleetReadsByFanOut, NAME, \"\"]", def, consumer)
	case get(fo, "Fn::Equals", 0, "Ref") != "FleetKinesisRead" || get(fo, "Fn::Equals", 1) != "efo":
		t.Errorf("condition FleetReadsByFanOut %v, want !Equals [!Ref FleetKinesisRead, efo]", fo)
	case flatten(get(consumer, "Fn::If", 1)) != values["job-name"]:
		t.Errorf("%s: consumer %q, want the job's own name, --job-name %q", def, flatten(get(consumer, "Fn::If", 1)), values["job-name"])
	}
	sample := strings.NewReplacer("${AWS::StackName}", "adclick", "${FleetJobGen}", "1").Replace(flatten(get(consumer, "Fn::If", 1)))
	if rs, err := lease.EvenRanges(windowing.MaxParallelism); err == nil {
		last := rs[len(rs)-1]
		if name := sample + "-" + (windowing.KeyGroups{From: last.From, To: last.To}).String(); !kinesis.ValidConsumerName(name) {
			t.Errorf("%s: a range's consumer would be %q, which Kinesis refuses", def, name)
		}
	}
	// Slots for every worker and the deployment's extra one.
	maxWorkers, err := strconv.Atoi(values["max-workers"])
	if err != nil {
		t.Errorf("%s: --max-workers %q: %v", def, values["max-workers"], err)
	}
	allowed := asList(get(tp.Parameters, "FleetWorkers", "AllowedValues"))
	if len(allowed) == 0 {
		t.Fatal("FleetWorkers has no AllowedValues (one row of FleetDeployment each)")
	}
	if s, _ := strconv.Atoi(flatten(c["StopTimeout"])); s != 120 {
		t.Errorf("%s: StopTimeout %v, want 120 (each range's final checkpoint, Fargate's most)", def, c["StopTimeout"])
	}

	// The service: FleetWorkers tasks; a deployment starts one more before
	// it stops one.
	p := props(tp.Resources[svc])
	if get(p, "DesiredCount", "Ref") != "FleetWorkers" {
		t.Errorf("%s: DesiredCount %v, want !Ref FleetWorkers", svc, get(p, "DesiredCount"))
	}
	if v := flatten(get(p, "DeploymentConfiguration", "MinimumHealthyPercent")); v != "100" {
		t.Errorf("%s: MinimumHealthyPercent %s, want 100 (stop a worker only once its replacement runs)", svc, v)
	}
	fm := asList(get(p, "DeploymentConfiguration", "MaximumPercent", "Fn::FindInMap"))
	if len(fm) != 3 || get(fm[1], "Ref") != "FleetWorkers" {
		t.Fatalf("%s: MaximumPercent %v, want !FindInMap [MAP, !Ref FleetWorkers, KEY]", svc, get(p, "DeploymentConfiguration", "MaximumPercent"))
	}
	for _, v := range allowed {
		n, _ := strconv.Atoi(flatten(v))
		maxPct, err := strconv.Atoi(flatten(get(tp.Mappings, flatten(fm[0]), flatten(v), flatten(fm[2]))))
		switch {
		case err != nil:
			t.Errorf("mapping %v has no %s for %d workers", fm[0], fm[2], n)
		case n == 0:
		case n*maxPct/100 != n+1:
			t.Errorf("%d workers: MaximumPercent %d lets a deployment run %d tasks, want %d (one extra)", n, maxPct, n*maxPct/100, n+1)
		case maxWorkers < n+1:
			t.Errorf("%d workers: --max-workers %d leaves no slot for a deployment's extra task", n, maxWorkers)
		}
	}

	// The role: every call lease.Worker and fleet make on the lease table
	// (lease.CreateTable's are setup's), and every read ingest/kinesis
	// makes, with SubscribeToShard on the stream's consumers.
	code := codeActions(t)
	leaseActs, readActs := map[string]bool{}, map[string]bool{}
	for a, wheres := range code {
		for _, w := range wheres {
			switch {
			case strings.HasPrefix(w, "lease/") && !strings.HasPrefix(w, "lease/table.go") && !slices.Contains(setupOnly, a) && a != "dynamodb:DescribeTable":
				leaseActs[a] = true
			case strings.HasPrefix(w, "ingest/kinesis/") && !strings.HasPrefix(w, "ingest/kinesis/put.go") && !slices.Contains(setupOnly, a):
				readActs[a] = true
			}
		}
	}
	for _, a := range []string{"dynamodb:Scan", "dynamodb:GetItem", "dynamodb:UpdateItem"} {
		if !leaseActs[a] {
			t.Errorf("the scan of lease/ found no %s (found %v): is it broken?", a, sortedKeys(leaseActs))
		}
	}
	for _, a := range []string{"kinesis:SubscribeToShard", "kinesis:RegisterStreamConsumer", "kinesis:DescribeStreamConsumer", "kinesis:GetRecords"} {
		if !readActs[a] {
			t.Errorf("the scan of ingest/kinesis/ found no %s (found %v): is it broken?", a, sortedKeys(readActs))
		}
	}
	onLease := tp.roleActionsOn(role, "LeaseTable")
	for _, a := range sortedKeys(leaseActs) {
		if !onLease[a] {
			t.Errorf("%s does not allow %s on LeaseTable (the fleet's workers call it; allowed there: %v)", role, a, sortedKeys(onLease))
		}
	}
	onStream := tp.roleActionsOn(role, "Stream")
	onConsumers := map[string]bool{}
	for _, p := range asList(props(tp.Resources[role])["Policies"]) {
		for _, st := range asList(get(p, "PolicyDocument", "Statement")) {
			if res := flatten(get(st, "Resource")); strings.HasPrefix(res, "${Stream.Arn}/consumer/") {
				for _, a := range asList(get(st, "Action")) {
					onConsumers[flatten(a)] = true
				}
			}
		}
	}
	for _, a := range sortedKeys(readActs) {
		if !onStream[a] {
			t.Errorf("%s does not allow %s on Stream (ingest/kinesis calls it)", role, a)
		}
	}
	if !onConsumers["kinesis:SubscribeToShard"] || !onConsumers["kinesis:DescribeStreamConsumer"] {
		t.Errorf("%s allows %v on ${Stream.Arn}/consumer/…, want SubscribeToShard and DescribeStreamConsumer", role, sortedKeys(onConsumers))
	}

	// The one-off setup: adclick setup with the flags it has, the ranges,
	// the job the workers run, and the lease table run derives.
	out := tp.Outputs["FleetSetupCommand"]
	if get(out, "Condition") != "IsFleet" {
		t.Errorf("output FleetSetupCommand %v, want one with Condition IsFleet", out)
	}
	words := strings.Fields(flatten(get(out, "Value")))
	if len(words) < 2 || words[0] != "adclick" || words[1] != "setup" {
		t.Fatalf("FleetSetupCommand %q, want adclick setup …", words)
	}
	cmd := exec.Command(binPath, "setup", "--help")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ADCLICK_") })
	help, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("adclick setup --help: %v\n%s", err, help)
	}
	setup := map[string]string{}
	for i := 2; i < len(words); i++ {
		f, ok := strings.CutPrefix(words[i], "--")
		if !ok {
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+--` + regexp.QuoteMeta(f) + `\s`).Match(help) {
			t.Errorf("FleetSetupCommand: --%s is not in `adclick setup --help`", f)
		}
		if i+1 < len(words) {
			setup[f] = words[i+1]
		}
	}
	for f, want := range map[string]string{"ranges": "${FleetRanges}", "job-name": values["job-name"], "lease-table": "${LeaseTable}"} {
		if setup[f] != want {
			t.Errorf("FleetSetupCommand: --%s %q, want %q", f, setup[f], want)
		}
	}
	// With efo, one consumer per range: 20 per stream, doubled during a
	// blue/green switch.
	if mx, err := strconv.Atoi(flatten(get(tp.Parameters, "FleetRanges", "MaxValue"))); err != nil || mx > 10 {
		t.Errorf("FleetRanges MaxValue %v, want at most 10 (20 consumers per stream, doubled during a switch)", get(tp.Parameters, "FleetRanges", "MaxValue"))
	}

	// A fleet runs alone: a rule refuses FleetWorkers above 0 unless every
	// single-task service's DesiredCount parameter is 0.
	zeroed := map[string]bool{}
	for _, n := range sortedKeys(tp.Rules) {
		r := tp.Rules[n]
		if !refsOf(get(r, "RuleCondition"))["FleetWorkers"] {
			continue
		}
		walk(get(r, "Assertions"), func(v any) {
			if eq := asList(get(v, "Fn::Equals")); len(eq) == 2 && flatten(eq[1]) == "0" {
				if p, ok := get(eq[0], "Ref").(string); ok {
					zeroed[p] = true
				}
			}
		})
	}
	for _, n := range tp.ofType("AWS::ECS::Service") {
		if n == svc {
			continue
		}
		if p, _ := get(props(tp.Resources[n]), "DesiredCount", "Ref").(string); !zeroed[p] {
			t.Errorf("%s: no rule refuses a fleet while its DesiredCount (%v) is above 0", n, get(props(tp.Resources[n]), "DesiredCount"))
		}
	}

	// At least one alarm on the fleet's own metrics.
	n := 0
	for _, a := range tp.ofType("AWS::CloudWatch::Alarm") {
		if tp.Resources[a]["Condition"] == "IsFleet" && strings.HasPrefix(flatten(props(tp.Resources[a])["MetricName"]), "adclick_fleet_") {
			n++
		}
	}
	if n == 0 {
		t.Error("no alarm on adclick_fleet_* under Condition IsFleet")
	}
}

// ---------------------------------------------------------------- systemd

// unitKeys parses a systemd unit: section → key → values (keys may repeat).
func unitKeys(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "["):
			section = strings.Trim(l, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Errorf("%s: cannot parse %q", path, l)
				continue
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnit(t *testing.T) {
	u := unitKeys(t, unitFile)
	svc := u["Service"]
	if svc == nil {
		t.Fatal("no [Service] section")
	}
	one := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	for k, want := range map[string]string{
		"KillSignal": "SIGTERM", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "DynamicUser": "yes", "StateDirectory": "adclick",
		"CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes", "MemoryDenyWriteExecute": "yes",
	} {
		if _, ok := svc[k]; !ok || one(k) != want {
			t.Errorf("[Service] %s=%q, want %q", k, one(k), want)
		}
	}
	d, err := parseSeconds(one("TimeoutStopSec"))
	if err != nil || d < 90 {
		t.Errorf("TimeoutStopSec=%q, want at least 90 s for the final checkpoint (its timeout is 60 s)", one("TimeoutStopSec"))
	}
	if !strings.HasPrefix(one("EnvironmentFile"), "/etc/adclick/") && !strings.HasPrefix(one("EnvironmentFile"), "-/etc/adclick/") {
		t.Errorf("EnvironmentFile=%q, want /etc/adclick/…", one("EnvironmentFile"))
	}
	flags, vars := runHelp(t)
	words := strings.Fields(one("ExecStart"))
	if len(words) < 2 || !strings.HasSuffix(words[0], "/adclick") || words[1] != "run" {
		t.Fatalf("ExecStart=%q, want …/adclick run …", one("ExecStart"))
	}
	for _, w := range words[2:] {
		if strings.HasPrefix(w, "--") {
			if name, _, _ := strings.Cut(w[2:], "="); !flags[name] {
				t.Errorf("ExecStart flag --%s is not in `adclick run --help`", name)
			}
		}
	}

	// Every ADCLICK_ variable of the example environment file, commented
	// out or not, names a flag.
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^#?(ADCLICK_[A-Z0-9_]+)=`).FindAllStringSubmatch(string(b), -1) {
		n++
		checkEnvName(t, envFile, m[1], flags, vars)
	}
	if n < 5 {
		t.Errorf("%s sets %d ADCLICK_ variables, want the common ones", envFile, n)
	}

	// systemd's own check, when systemd-analyze is installed (it is on
	// Debian with systemd): the unit with ExecStart pointing at the binary
	// just built, so that verify can check it is executable.
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: structural checks only")
		return
	}
	raw, _ := os.ReadFile(unitFile)
	txt := strings.ReplaceAll(string(raw), "/usr/local/bin/adclick", binPath)
	txt = regexp.MustCompile(`(?m)^EnvironmentFile=.*$`).ReplaceAllString(txt, "EnvironmentFile=-"+filepath.Join(t.TempDir(), "none.env"))
	tmp := filepath.Join(t.TempDir(), "adclick.service")
	if err := os.WriteFile(tmp, []byte(txt), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", tmp).CombinedOutput()
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "adclick.service") {
			mine = append(mine, l)
		}
	}
	if err != nil || len(mine) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(mine, "\n"))
	}
}

func parseSeconds(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1
	switch {
	case strings.HasSuffix(s, "min"):
		mult, s = 60, strings.TrimSuffix(s, "min")
	case strings.HasSuffix(s, "s"):
		s = strings.TrimSuffix(s, "s")
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n * mult, err
}

// TestShellWords and TestIgnoreMatcher test the helpers the checks above
// rely on.
func TestShellWords(t *testing.T) {
	got := shellWords(`CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "/out/a b" ./cmd/adclick`)
	want := []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w", "-o", "/out/a b", "./cmd/adclick"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestIgnoreMatcher(t *testing.T) {
	m := parseIgnore("# comment\n**/*_test.go\n.git\ndeploy/systemd\n!deploy/systemd/keep\n")
	for path, want := range map[string]bool{
		"a_test.go": true, "sink/x_test.go": true, "sink/x.go": false, ".git/HEAD": true, ".gitignore": false,
		"deploy/systemd/adclick.service": true, "deploy/systemd/keep": false, "deploy/Dockerfile": false,
	} {
		if got := m.excluded(path); got != want {
			t.Errorf("excluded(%q) = %v, want %v", path, got, want)
		}
	}
}
