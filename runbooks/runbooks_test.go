package runbooks

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/adclick/adclick/internal/codescan"
)

// pages are the situations issue 7 asks for; README.md is the index.
var pages = []string{
	"watermark-lag.md",
	"consumer-lag.md",
	"crash-restore.md",
	"blue-green.md",
	"rescaling.md",
	"resharding.md",
	"dynamodb-throttling.md",
	"valkey-outage.md",
	"recount-mismatch.md",
	"bad-deploy.md",
	"fleet.md",
}

// sections every page must have, as "## <title>" headings.
var sections = []string{"Symptoms", "Confirm", "Commands", "Verify"}

var binPath string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

// runMain builds the binary once; ADCLICK_TEST_BINARY names a prebuilt one
// instead (a release binary, or while other packages are half-written).
func runMain(m *testing.M) int {
	if p := os.Getenv("ADCLICK_TEST_BINARY"); p != "" {
		binPath = p
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "adclick-runbooks-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbooks: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "adclick")
	cmd := exec.Command("go", "build", "-o", binPath, "./cmd/adclick")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "runbooks: go build ./cmd/adclick failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// command is one `adclick …` invocation found in a runbook.
type command struct {
	file  string
	line  int
	words []string // the words from "adclick" on, quotes removed
}

func (c command) String() string {
	return fmt.Sprintf("%s:%d: %s", c.file, c.line, strings.Join(c.words, " "))
}

// sub returns the subcommand ("help" for a bare `adclick` or `adclick --help`).
func (c command) sub() string {
	if len(c.words) < 2 || strings.HasPrefix(c.words[1], "-") {
		return "help"
	}
	return c.words[1]
}

// flags returns the flag names the command uses, without dashes or values.
func (c command) flags() []string {
	var out []string
	for _, w := range c.words[1:] {
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" || isNumber(w) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
		out = append(out, name)
	}
	return out
}

func isNumber(w string) bool {
	_, err := strconv.ParseFloat(w, 64)
	return err == nil
}

var fenceRE = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// shBlocks returns the lines of the sh/bash/shell fenced blocks of a
// Markdown document with their 1-based line numbers, backslash
// continuations joined (numbered by their first line).
func shBlocks(md string) (lines []string, nums []int) {
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in, isSh := false, false
	fence := ""
	pending, pendingAt := "", 0
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if m := fenceRE.FindStringSubmatch(text); m != nil {
			if !in {
				in, fence = true, m[1][:3]
				isSh = slices.Contains([]string{"sh", "bash", "shell", "console"}, m[2])
				continue
			}
			if strings.HasPrefix(m[1], fence) && m[2] == "" {
				in, isSh = false, false
				continue
			}
		}
		if !in || !isSh {
			continue
		}
		if pending == "" {
			pendingAt = n
		}
		if strings.HasSuffix(text, "\\") {
			pending += strings.TrimSuffix(text, "\\") + " "
			continue
		}
		lines = append(lines, pending+text)
		nums = append(nums, pendingAt)
		pending = ""
	}
	return lines, nums
}

// splitShell splits a shell line into simple commands (at |, ||, &&, ;, &,
// $( and ) and backquotes), each a list of words with quotes removed.
// Comments (# at the start of a word) end the line. It is not a shell
// parser, only good enough for the commands a runbook quotes.
func splitShell(line string) [][]string {
	var cmds [][]string
	var words []string
	var cur strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case ch == '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				j++
			}
			q := line[i+1 : min(j, len(line))]
			if k := strings.Index(q, "$("); k >= 0 {
				// A command substitution inside double quotes.
				cmds = append(cmds, splitShell(q[k+2:])...)
			}
			cur.WriteString(q)
			inWord = true
			i = j
		case ch == '#' && !inWord:
			endCmd()
			return cmds
		case ch == ' ' || ch == '\t':
			endWord()
		case ch == '|' || ch == ';' || ch == '&' || ch == '`' || ch == ')' || ch == '(':
			endCmd()
		case ch == '$' && i+1 < len(line) && line[i+1] == '(':
			endCmd()
			i++
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

var assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// prefixCommands run the command that follows them.
var prefixCommands = map[string]bool{"sudo": true, "env": true, "exec": true, "time": true, "nohup": true, "command": true}

// adclickWords returns the words of words from "adclick" on if the simple
// command runs adclick, after environment assignments and prefix commands.
func adclickWords(words []string) ([]string, bool) {
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case assignRE.MatchString(w), prefixCommands[w]:
			continue
		case w == "adclick" || strings.HasSuffix(w, "/adclick"):
			return words[i:], true
		}
		return nil, false
	}
	return nil, false
}

// commandsIn returns the adclick commands of a Markdown document.
func commandsIn(file, md string) []command {
	var out []command
	lines, nums := shBlocks(md)
	for i, l := range lines {
		for _, words := range splitShell(l) {
			if w, ok := adclickWords(words); ok {
				out = append(out, command{file: file, line: nums[i], words: w})
			}
		}
	}
	return out
}

// unknownFlags returns every flag of c (as --name) that help, the output
// of `adclick <sub> --help`, does not list.
func unknownFlags(c command, help string) []string {
	var bad []string
	for _, f := range c.flags() {
		if f == "help" || f == "h" {
			continue
		}
		re := regexp.MustCompile(`(^|\s)--?` + regexp.QuoteMeta(f) + `([\s=,\[]|$)`)
		if !re.MatchString(help) {
			bad = append(bad, "--"+f)
		}
	}
	return bad
}

var (
	helpMu    sync.Mutex
	helpCache = map[string]helpResult{}
)

type helpResult struct {
	out string
	err error
}

// helpOf runs `adclick <sub> --help` once per subcommand.
func helpOf(sub string) (string, error) {
	helpMu.Lock()
	defer helpMu.Unlock()
	if r, ok := helpCache[sub]; ok {
		return r.out, r.err
	}
	args := []string{sub, "--help"}
	if sub == "help" {
		args = []string{"help"}
	}
	cmd := exec.Command(binPath, args...)
	cmd.Env = cleanEnv()
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(buf.String()), "\n")
		err = fmt.Errorf("`adclick %s` failed (%v: %s): %q is not a subcommand of this binary", strings.Join(args, " "), err, first, sub)
	}
	helpCache[sub] = helpResult{buf.String(), err}
	return buf.String(), err
}

// cleanEnv drops ADCLICK_* variables, so a developer's settings cannot make
// --help fail or pass.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ADCLICK_") {
			env = append(env, kv)
		}
	}
	return env
}

func readPages(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		b, err := os.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		docs[e.Name()] = string(b)
	}
	return docs
}

// TestCommandsMatchCLI checks every adclick command quoted in a runbook
// against the real binary: the subcommand must exist and every flag must be
// in its --help. Commands that need a running job are checked this way too
// (flags only).
func TestCommandsMatchCLI(t *testing.T) {
	docs := readPages(t)
	var all []command
	for _, name := range sortedKeys(docs) {
		all = append(all, commandsIn(name, docs[name])...)
	}
	if len(all) < 40 {
		t.Fatalf("found %d adclick commands in the runbooks, want at least 40: is the extractor broken?", len(all))
	}
	for _, c := range all {
		help, err := helpOf(c.sub())
		if err != nil {
			t.Errorf("%s\n    unknown subcommand: %v", c, err)
			continue
		}
		for _, f := range unknownFlags(c, help) {
			t.Errorf("%s\n    unknown flag %s: `adclick %s --help` does not list it", c, f, c.sub())
		}
	}
}

// TestPagesComplete checks that every situation has its page with the four
// sections and at least one adclick command, and that the index links them.
func TestPagesComplete(t *testing.T) {
	docs := readPages(t)
	index, ok := docs["README.md"]
	if !ok {
		t.Fatal("runbooks/README.md (the index) is missing")
	}
	for _, p := range pages {
		md, ok := docs[p]
		if !ok {
			t.Errorf("runbook %s is missing", p)
			continue
		}
		if !strings.Contains(index, "("+p+")") {
			t.Errorf("README.md does not link %s", p)
		}
		for _, s := range sections {
			if !regexp.MustCompile(`(?m)^## ` + s + `\b`).MatchString(md) {
				t.Errorf("%s has no \"## %s\" section", p, s)
			}
		}
		if n := len(commandsIn(p, md)); n == 0 {
			t.Errorf("%s quotes no adclick command in a sh block", p)
		}
	}
	for name := range docs {
		if name != "README.md" && !slices.Contains(pages, name) {
			t.Errorf("%s is not one of the pages this test knows; add it to pages", name)
		}
	}
}

var (
	metricRE   = regexp.MustCompile(`\badclick_[a-z0-9_]*[a-z0-9]\b`)
	apiPathRE  = regexp.MustCompile(`/v1/[a-z][a-z0-9-]*`)
	histSuffix = []string{"_bucket", "_sum", "_count"}
)

// TestMetricsExist checks that every adclick_* metric a runbook names is
// registered by the code (a string literal, or a Namespace/Subsystem/Name
// triple in an Opts literal).
func TestMetricsExist(t *testing.T) {
	known, _ := scanSource(t)
	docs := readPages(t)
	n := 0
	for _, name := range sortedKeys(docs) {
		for _, m := range uniq(metricRE.FindAllString(docs[name], -1)) {
			n++
			base := m
			for _, s := range histSuffix {
				if k := strings.TrimSuffix(m, s); k != m && known[k] {
					base = k
				}
			}
			if !known[base] {
				t.Errorf("%s names metric %s, which no Go source registers", name, m)
			}
		}
	}
	if n < 10 {
		t.Errorf("the runbooks name %d metrics, want at least 10", n)
	}
}

// TestAPIPathsExist checks that every /v1/<resource> path a runbook quotes
// is served by the api package.
func TestAPIPathsExist(t *testing.T) {
	_, apiLits := scanSource(t)
	docs := readPages(t)
	for _, name := range sortedKeys(docs) {
		for _, p := range uniq(apiPathRE.FindAllString(docs[name], -1)) {
			found := false
			for _, l := range apiLits {
				if strings.HasPrefix(l, p) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s quotes %s, which no route in api/ serves", name, p)
			}
		}
	}
}

var (
	scanOnce  sync.Once
	scanNames map[string]bool
	scanAPI   []string
	scanErr   error
)

// scanSource returns the metric names registered in the repository's
// non-test Go source, and the string literals of the api package.
func scanSource(t *testing.T) (map[string]bool, []string) {
	t.Helper()
	scanOnce.Do(func() { scanNames, scanAPI, scanErr = scan("..") })
	if scanErr != nil {
		t.Fatal(scanErr)
	}
	return scanNames, scanAPI
}

func scan(root string) (map[string]bool, []string, error) {
	names := map[string]bool{}
	var apiLits []string
	err := codescan.GoFiles(root, func(rel string, f *ast.File) {
		inAPI := strings.HasPrefix(rel, "api/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BasicLit:
				if x.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(x.Value)
				if err != nil {
					return true
				}
				if metricRE.MatchString(s) && metricRE.FindString(s) == s {
					names[s] = true
				}
				if inAPI {
					apiLits = append(apiLits, s)
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
	return names, apiLits, err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// The extractor and the flag check are tested on their own, so that a
// broken parser cannot make TestCommandsMatchCLI pass vacuously.

func TestCommandsIn(t *testing.T) {
	md := "text `adclick run --nope` outside a block is ignored\n" +
		"```sh\n" +
		"# a comment: adclick run --ignored\n" +
		"adclick run --data /d --job-gen=8 \\\n" +
		"    --from-savepoint 51\n" +
		"ADCLICK_API=x sudo /usr/local/bin/adclick rows --sink dynamodb:t | jq .\n" +
		"aws ecs update-service --cluster adclick --force-new-deployment\n" +
		"echo \"$(adclick status --api 'http://h:8080')\" # adclick run --x\n" +
		"adclick --help\n" +
		"adclick sweep --gen -1\n" +
		"```\n" +
		"```json\n" +
		"adclick run --not-sh\n" +
		"```\n"
	got := commandsIn("p.md", md)
	type want struct {
		line  int
		sub   string
		flags []string
	}
	wants := []want{
		{4, "run", []string{"data", "job-gen", "from-savepoint"}},
		{6, "rows", []string{"sink"}},
		{8, "status", []string{"api"}},
		{9, "help", []string{"help"}},
		{10, "sweep", []string{"gen"}},
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d commands %v, want %d", len(got), got, len(wants))
	}
	for i, w := range wants {
		g := got[i]
		if g.line != w.line || g.sub() != w.sub || !slices.Equal(g.flags(), w.flags) {
			t.Errorf("command %d: got line %d sub %q flags %v, want line %d sub %q flags %v",
				i, g.line, g.sub(), g.flags(), w.line, w.sub, w.flags)
		}
	}
}

func TestCheckFlags(t *testing.T) {
	help := "Usage: adclick run [flags]\n\n  --data  [ADCLICK_DATA]\n      dir\n  --job-gen  [ADCLICK_JOB_GEN]\n      gen (default 1)\n  --gen-ads  [ADCLICK_GEN_ADS]\n"
	tests := []struct {
		words []string
		bad   []string // flags that must be reported
	}{
		{[]string{"adclick", "run", "--data", "x", "--job-gen=2"}, nil},
		{[]string{"adclick", "run", "-data", "x", "--help"}, nil},
		{[]string{"adclick", "run", "--gen"}, []string{"--gen"}}, // a prefix of --gen-ads is not a flag
		{[]string{"adclick", "run", "--datum", "--job-gen", "1", "--nope=3"}, []string{"--datum", "--nope"}},
	}
	for _, tt := range tests {
		if got := unknownFlags(command{words: tt.words}, help); !slices.Equal(got, tt.bad) {
			t.Errorf("%v: got unknown flags %v, want %v", tt.words, got, tt.bad)
		}
	}
}

// TestUnknownSubcommandFails proves helpOf fails for a subcommand the
// binary does not have, so a runbook cannot quote one.
func TestUnknownSubcommandFails(t *testing.T) {
	if _, err := helpOf("no-such-subcommand"); err == nil {
		t.Fatal("got no error for `adclick no-such-subcommand --help`, want one")
	}
	if _, err := helpOf("run"); err != nil {
		t.Fatalf("adclick run --help: %v", err)
	}
}
