package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// peersHelp finds the names in the --peers entry of run.sh's help (its
// leading comment): "--peers LIST  comma-separated, in run order, from:
// a, b, … (default …".
var peersHelp = regexp.MustCompile(`--peers LIST\s+comma-separated, in run order, from:\s+(.*?)\s+\(default`)

// PeerNames returns the peers the run.sh of dir knows, in its order, read
// from its help, so that the list lives in one place. flink and
// flink-nockpt are Apache Flink 2.3's DataStream job in a local
// MiniCluster, with exactly-once checkpoints every 10 s and without; they
// need Java 17 and Maven (and Maven Central for their first build), and
// where those are missing run.sh reports them as not built and runs the
// others.
func PeerNames(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "run.sh"))
	if err != nil {
		return nil, fmt.Errorf("bench: peers: %w", err)
	}
	var help strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			help.WriteString(rest)
		}
	}
	m := peersHelp.FindStringSubmatch(help.String())
	if m == nil {
		return nil, fmt.Errorf("bench: peers: %s: its help has no --peers list", filepath.Join(dir, "run.sh"))
	}
	var names []string
	for _, n := range strings.Split(m[1], ",") {
		names = append(names, strings.Join(strings.Fields(n), ""))
	}
	return names, nil
}

// CheckPeerList reports a name in list (comma-separated; empty: run.sh's
// default set) that the run.sh of dir does not know, so that a typo fails
// before adclick's own variants have run rather than after.
func CheckPeerList(dir, list string) error {
	if list == "" {
		return nil
	}
	known, err := PeerNames(dir)
	if err != nil {
		return err
	}
	for _, p := range strings.Split(list, ",") {
		if !slices.Contains(known, p) {
			return fmt.Errorf("bench: peers: unknown peer %q (known: %s)", p, strings.Join(known, ", "))
		}
	}
	return nil
}

// PeerOptions configure Peers.
type PeerOptions struct {
	// Dir holds the peer programs and their run.sh (the peers folder beside
	// the project: Benthos, Apache Beam Go on Prism, DuckDB, Apache Flink).
	Dir string
	// Trace is the trace every system reads (required: it must outlive
	// the run). Clicks is its size, for a trace run.sh generates.
	Trace  string
	Clicks int64
	// Out is where the run writes its outputs and table; empty: a new
	// folder under Dir's run.sh default.
	Out string
	// List is run.sh's --peers, names from PeerNames(Dir) (empty: its default
	// set, which leaves out the Flink peers).
	List string
	// Src is the adclick source tree run.sh builds (empty: run.sh's
	// default, the checkout it runs in).
	Src string
	// Log receives run.sh's progress.
	Log io.Writer
}

// Peers runs the peer programs of o.Dir on the same trace, one after the
// other beside adclick bench's pipeline (each measured the same way,
// every output checked against DuckDB's), and returns the table run.sh
// wrote: clicks/s, CPU, peak RSS and the ratio to adclick per system.
func Peers(ctx context.Context, o PeerOptions) (string, error) {
	script := filepath.Join(o.Dir, "run.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("bench: peers: %w", err)
	}
	if o.Trace == "" {
		return "", errors.New("bench: peers: a trace file is required")
	}
	if err := CheckPeerList(o.Dir, o.List); err != nil {
		return "", err
	}
	out := o.Out
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "adclick-peers-run."); err != nil {
			return "", fmt.Errorf("bench: peers: %w", err)
		}
	}
	args := []string{"--trace", o.Trace, "--out", out}
	if o.Clicks > 0 {
		args = append(args, "--clicks", strconv.FormatInt(o.Clicks, 10))
	}
	if o.List != "" {
		args = append(args, "--peers", o.List)
	}
	if o.Src != "" {
		args = append(args, "--adclick-src", o.Src)
	}
	cmd := exec.CommandContext(ctx, script, args...)
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("bench: peers: %s: %w (outputs in %s)", script, err, out)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil {
		return "", fmt.Errorf("bench: peers: the run wrote no table: %w (outputs in %s)", err, out)
	}
	return string(table) + "\n(outputs, logs and results.json in " + out + ")\n", nil
}
