package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// fakePeers writes a run.sh that records its arguments and writes a table
// into its --out folder, or fails if fail.
func fakePeers(t *testing.T, fail bool) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
echo "$*" >"$(dirname "$0")/args"
out=""
while [ $# -gt 0 ]; do
  case "$1" in --out) out=$2; shift 2 ;; *) shift ;; esac
done
`
	if fail {
		script += "echo boom >&2; exit 3\n"
	} else {
		script += `printf '%s\n' "| system | clicks/s | × adclick |" "| adclick | 100 | 1.00 |" "| duckdb | 50 | 0.50 |" >"$out/table.md"` + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPeersRunsTheScriptOnTheSameTrace(t *testing.T) {
	dir := fakePeers(t, false)
	out := t.TempDir()
	table, err := Peers(context.Background(), PeerOptions{Dir: dir, Trace: "/data/trace.jsonl", Clicks: 1000, Out: out, List: "duckdb,benthos", Src: "/src"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "| duckdb | 50 | 0.50 |") || !strings.Contains(table, out) {
		t.Fatalf("table:\n%s\nwant the run's table and where its outputs are", table)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	want := "--trace /data/trace.jsonl --out " + out + " --clicks 1000 --peers duckdb,benthos --adclick-src /src"
	if got := strings.TrimSpace(string(args)); got != want {
		t.Fatalf("run.sh got %q, want %q", got, want)
	}
}

func TestPeersPassesTheFlinkPeers(t *testing.T) {
	dir := fakePeers(t, false)
	out := t.TempDir()
	if _, err := Peers(context.Background(), PeerOptions{Dir: dir, Trace: "/data/trace.jsonl", Out: out, List: "duckdb,flink,flink-nockpt"}); err != nil {
		t.Fatal(err)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	want := "--trace /data/trace.jsonl --out " + out + " --peers duckdb,flink,flink-nockpt"
	if got := strings.TrimSpace(string(args)); got != want {
		t.Fatalf("run.sh got %q, want %q", got, want)
	}
}

func TestCheckPeerList(t *testing.T) {
	for _, ok := range []string{"", "flink", "flink-nockpt", "duckdb,flink,flink-nockpt", strings.Join(PeerNames, ",")} {
		if err := CheckPeerList(ok); err != nil {
			t.Errorf("CheckPeerList(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"flink-nocheckpoint", "duckdb,,flink", "duckdb, flink", "Flink", ","} {
		if err := CheckPeerList(bad); err == nil {
			t.Errorf("CheckPeerList(%q) accepted it", bad)
		}
	}
	// run.sh is not started for an unknown peer
	dir := fakePeers(t, false)
	if _, err := Peers(context.Background(), PeerOptions{Dir: dir, Trace: "t", Out: t.TempDir(), List: "duckdb,flnk"}); err == nil || !strings.Contains(err.Error(), `"flnk"`) {
		t.Errorf("an unknown peer gave %v, want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "args")); err == nil {
		t.Error("run.sh ran for an unknown peer")
	}
}

// TestPeerNamesMatchRunSh checks PeerNames against the --peers list in the
// help of the peers folder's run.sh, where that folder is checked out
// beside the repository (../shared/peers); elsewhere it is skipped.
func TestPeerNamesMatchRunSh(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "peers", "run.sh"))
	if err != nil {
		t.Skipf("no peers folder beside the repository: %v", err)
	}
	var help strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			help.WriteString(rest)
		}
	}
	m := regexp.MustCompile(`--peers LIST\s+comma-separated, in run order, from:\s+(.*?)\s+\(default`).FindStringSubmatch(help.String())
	if m == nil {
		t.Fatal("run.sh's help has no --peers list")
	}
	var names []string
	for _, n := range strings.Split(m[1], ",") {
		names = append(names, strings.Join(strings.Fields(n), ""))
	}
	if !slices.Equal(names, PeerNames) {
		t.Errorf("run.sh's peers %q, PeerNames %q", names, PeerNames)
	}
}

func TestPeersFailures(t *testing.T) {
	if _, err := Peers(context.Background(), PeerOptions{Dir: t.TempDir(), Trace: "t"}); err == nil {
		t.Error("a folder without run.sh was accepted")
	}
	if _, err := Peers(context.Background(), PeerOptions{Dir: fakePeers(t, false)}); err == nil {
		t.Error("no trace was accepted")
	}
	out := t.TempDir()
	_, err := Peers(context.Background(), PeerOptions{Dir: fakePeers(t, true), Trace: "t", Out: out})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), out) {
		t.Errorf("a failing run.sh gave %v, want its exit status and the outputs folder", err)
	}
}
