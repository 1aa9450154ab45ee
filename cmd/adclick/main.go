// Command adclick counts ad clicks by event time, exactly once. See
// "adclick help" and the README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/term"
)

const usageHead = `adclick counts ad clicks by event time, exactly once.

Usage:
  adclick run   [flags]   run the job (embedded mode by default: built-in
                          generator, Pebble state and store under --data)
  adclick gen   [flags]   write a synthetic click file (JSON Lines)
  adclick rows  [flags]   print the stored ad_metrics rows as JSON Lines
  adclick setup [flags]   create the DynamoDB table (and other AWS resources)
  adclick put   [flags]   put a click file into a Kinesis stream
  adclick bench [flags]   measure the pipeline against this machine's limit
  adclick savepoint       take a savepoint of the running job (HTTP API)
  adclick stop            stop the running job with a final checkpoint (API)
  adclick sweep           second sweep after blue/green: remove an old
                          generation's writes since a savepoint (API)
  adclick status          print the running job's status (API)
  adclick recount         make hours final: recount them from the lake
  adclick reconcile       compare fast + late with the recount, per ad/hour
  adclick version         print the version, revision and Go version
  adclick help            this text

`

const usageTail = `
Run "adclick <command> --help" for the flags of a command.
`

var usage = usageHead + envHelp() + usageTail

// command is a subcommand: its name and what runs it.
type command struct {
	name string
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the subcommands. Their names also scope the environment
// variables (env.go).
var commands []command

func init() {
	commands = []command{
		{"run", cmdRun}, {"gen", cmdGen}, {"rows", cmdRows}, {"setup", cmdSetup},
		{"savepoint", cmdSavepoint}, {"stop", cmdStop}, {"sweep", withSpinner("sweep", cmdSweep)}, {"status", cmdStatus},
		{"recount", cmdRecount}, {"reconcile", cmdReconcile}, {"put", cmdPut}, {"bench", cmdBench},
		{"version", cmdVersion},
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	raiseFileLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first Ctrl-C or SIGTERM stops cleanly (a final checkpoint); after
	// it, the signals' default action is back, so a second one ends the
	// process at once.
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-returned:
		}
	}()
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version":
		args[0] = "version"
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(stderr, "adclick: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := commands[i].run(ctx, args[1:], stdout, stderr)
	var cp configPrinted
	if errors.As(err, &cp) {
		fmt.Fprint(stdout, cp.text)
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "adclick %s: %v\n", args[0], err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "adclick %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

// newFlags returns a flag set whose usage lists every flag with its default
// and its environment variable.
func newFlags(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool(printConfigFlag, false, "print the effective settings, each with where it came from (flag, env VARIABLE, default), and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: adclick %s [flags]\n\n%s\n\nFlags (environment variables in brackets, the first wins; see adclick help):\n", name, summary)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			env := ""
			if names := envNames(name, f.Name); len(names) > 0 {
				env = "  [" + strings.Join(names, ", ") + "]"
			}
			fmt.Fprintf(stderr, "  --%s%s\n      %s%s\n", f.Name, env, f.Usage, def)
		})
	}
	return fs
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// raiseFileLimit lifts the soft limit on open descriptors to the hard one:
// Pebble keeps a descriptor per table, and the HTTP API's connections
// must not be what runs them out (the API also caps its connections).
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
