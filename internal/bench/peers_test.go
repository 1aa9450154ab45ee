package bench

import (
	"context"
	"os"
	"path/filepath"
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
# A stand-in for the peers folder's run.sh.
#   --peers LIST   comma-separated, in run order, from: duckdb, duckdb-loose,
#                  benthos, flink,
#                  flink-nockpt (default duckdb,benthos).
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
	for _, tc := range []struct {
		name string
		o    PeerOptions
		args string // run.sh's arguments after --trace and --out
	}{
		{"every option", PeerOptions{Clicks: 1000, List: "duckdb,benthos", Src: "/src"}, "--clicks 1000 --peers duckdb,benthos --adclick-src /src"},
		{"the Flink peers", PeerOptions{List: "duckdb,flink,flink-nockpt"}, "--peers duckdb,flink,flink-nockpt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, out := fakePeers(t, false), t.TempDir()
			o := tc.o
			o.Dir, o.Trace, o.Out = dir, "/data/trace.jsonl", out
			table, err := Peers(context.Background(), o)
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
			if got, want := strings.TrimSpace(string(args)), "--trace /data/trace.jsonl --out "+out+" "+tc.args; got != want {
				t.Fatalf("run.sh got %q, want %q", got, want)
			}
		})
	}
}

func TestCheckPeerList(t *testing.T) {
	dir := fakePeers(t, false)
	if got, want := mustPeerNames(t, dir), []string{"duckdb", "duckdb-loose", "benthos", "flink", "flink-nockpt"}; !slices.Equal(got, want) {
		t.Fatalf("PeerNames = %q, want %q (the fake run.sh's help)", got, want)
	}
	for _, ok := range []string{"", "flink", "flink-nockpt", "duckdb,flink,flink-nockpt", strings.Join(mustPeerNames(t, dir), ",")} {
		if err := CheckPeerList(dir, ok); err != nil {
			t.Errorf("CheckPeerList(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"flink-nocheckpoint", "duckdb,,flink", "duckdb, flink", "Flink", ",", "beam-prism"} {
		if err := CheckPeerList(dir, bad); err == nil {
			t.Errorf("CheckPeerList(%q) accepted it", bad)
		}
	}
	// run.sh is not started for an unknown peer
	if _, err := Peers(context.Background(), PeerOptions{Dir: dir, Trace: "t", Out: t.TempDir(), List: "duckdb,flnk"}); err == nil || !strings.Contains(err.Error(), `"flnk"`) {
		t.Errorf("an unknown peer gave %v, want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "args")); err == nil {
		t.Error("run.sh ran for an unknown peer")
	}
	// A run.sh whose help names no peers cannot check a list.
	bare := t.TempDir()
	if err := os.WriteFile(filepath.Join(bare, "run.sh"), []byte("#!/bin/sh\n# no help here\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckPeerList(bare, "duckdb"); err == nil || !strings.Contains(err.Error(), "no --peers list") {
		t.Errorf("a run.sh without a --peers list gave %v, want an error saying so", err)
	}
}

func mustPeerNames(t *testing.T, dir string) []string {
	t.Helper()
	names, err := PeerNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
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
