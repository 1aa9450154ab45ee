package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// PeerOptions configure Peers.
type PeerOptions struct {
	// Dir holds the peer programs and their run.sh (the peers folder beside
	// the project: Benthos, Apache Beam Go on Prism, DuckDB).
	Dir string
	// Trace is the trace every system reads (required: it must outlive
	// the run). Clicks is its size, for a trace run.sh generates.
	Trace  string
	Clicks int64
	// Out is where the run writes its outputs and table; empty: a new
	// folder under Dir's run.sh default.
	Out string
	// List is run.sh's --peers (empty: its default set).
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
