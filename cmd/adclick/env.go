package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// Environment variables. Every flag of a command can be set with
// ADCLICK_<COMMAND>_<FLAG> (the flag in upper case, '-' as '_'): --shards
// of gen is ADCLICK_GEN_SHARDS, --job-gen of run is ADCLICK_RUN_JOB_GEN. So
// one command's variable never changes another command.
//
// The shared flags below mean the same in every command that has them
// (where the job keeps its data, rows, checkpoints and lake; how to reach
// its API; its secrets; how to log). They are also read from
// ADCLICK_<FLAG> (ADCLICK_DATA, ADCLICK_SINK, ADCLICK_TOKEN, …); the
// command's own variable wins over the shared one, and a flag on the
// command line over both.
//
// An unscoped ADCLICK_<FLAG> naming a flag of the command that is not
// shared was read before the variables were scoped; it is refused, with
// the new name, so that a setting is never dropped silently. So is an
// ADCLICK_<COMMAND>_<NAME> naming no flag of the command (a typo).

// sharedFlags are the flags also read from ADCLICK_<FLAG>.
var sharedFlags = []string{"data", "sink", "checkpoints", "lake", "api", "token", "admin-token", "read-token", "log-format", "log-level"}

// printConfigFlag is the flag, on every command, that prints the effective
// settings and exits. It has no variable.
const printConfigFlag = "print-config"

func envWord(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// envName returns the variable of command cmd's flag: ADCLICK_<CMD>_<FLAG>.
func envName(cmd, flagName string) string {
	return "ADCLICK_" + envWord(cmd) + "_" + envWord(flagName)
}

// sharedEnvName returns the shared variable of a flag, ADCLICK_<FLAG>, or
// "" if the flag is not shared.
func sharedEnvName(flagName string) string {
	if !slices.Contains(sharedFlags, flagName) {
		return ""
	}
	return "ADCLICK_" + envWord(flagName)
}

// envNames returns the variables of a flag, the one that wins first.
func envNames(cmd, flagName string) []string {
	if flagName == printConfigFlag {
		return nil
	}
	names := []string{envName(cmd, flagName)}
	if s := sharedEnvName(flagName); s != "" {
		names = append(names, s)
	}
	return names
}

// lookupEnv returns the value of the first variable of the flag that is
// set, and its name.
func lookupEnv(cmd, flagName string) (value, name string, ok bool) {
	for _, n := range envNames(cmd, flagName) {
		if v, ok := os.LookupEnv(n); ok {
			return v, n, true
		}
	}
	return "", "", false
}

// scopedToAnyCommand reports whether name is ADCLICK_<COMMAND>_… of some
// command.
func scopedToAnyCommand(name string) bool {
	for _, c := range commands {
		if strings.HasPrefix(name, "ADCLICK_"+envWord(c.name)+"_") {
			return true
		}
	}
	return false
}

// envProblems reports the variables that would be silently dropped: an
// unscoped one naming a flag of fs that is not shared (its old name), and
// a scoped one naming no flag of fs.
func envProblems(fs *flag.FlagSet) []error {
	cmd := fs.Name()
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		old := "ADCLICK_" + envWord(f.Name)
		if f.Name == printConfigFlag || sharedEnvName(f.Name) != "" || scopedToAnyCommand(old) {
			return
		}
		if _, ok := os.LookupEnv(old); ok {
			errs = append(errs, fmt.Errorf("%s is not read: variables are per command; for adclick %s --%s set %s", old, cmd, f.Name, envName(cmd, f.Name)))
		}
	})
	prefix := "ADCLICK_" + envWord(cmd) + "_"
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		fl := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
		if fs.Lookup(fl) == nil || fl == printConfigFlag {
			errs = append(errs, fmt.Errorf("%s: adclick %s has no flag --%s", name, cmd, fl))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

// parse applies the environment variables, then the command line. With
// --print-config it returns a configPrinted holding the effective
// settings instead of running the command.
func parse(fs *flag.FlagSet, args []string) error {
	cmd := fs.Name()
	errs := envProblems(fs)
	fromEnv := map[string]string{} // flag → variable
	fs.VisitAll(func(f *flag.Flag) {
		v, name, ok := lookupEnv(cmd, f.Name)
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			return
		}
		fromEnv[f.Name] = name
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if pc := fs.Lookup(printConfigFlag); pc != nil && pc.Value.String() == "true" {
		return configPrinted{effectiveConfig(fs, fromEnv)}
	}
	return nil
}

// explicit reports whether flag name of fs was given, on the command line
// or by a variable (after parse).
func explicit(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	_, _, env := lookupEnv(fs.Name(), name)
	return set || env
}

// configPrinted is what parse returns for --print-config: the command does
// not run, and realMain prints the text on standard output.
type configPrinted struct{ text string }

func (c configPrinted) Error() string { return "configuration printed" }

// effectiveConfig lists every flag of fs with its value and where the
// value came from: the command line, a variable (named), or the default.
// Secrets (the tokens) are shown only as set or not.
func effectiveConfig(fs *flag.FlagSet, fromEnv map[string]string) string {
	onCmdLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdLine[f.Name] = true })
	var b strings.Builder
	fmt.Fprintf(&b, "# adclick %s: effective settings\n", fs.Name())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == printConfigFlag {
			return
		}
		from := "default"
		switch {
		case onCmdLine[f.Name]:
			from = "flag"
		case fromEnv[f.Name] != "":
			from = "env " + fromEnv[f.Name]
		}
		v := f.Value.String()
		if strings.HasSuffix(f.Name, "token") && v != "" {
			v = "(set, not shown)"
		}
		fmt.Fprintf(tw, "--%s=%s\t%s\n", f.Name, v, from)
	})
	tw.Flush()
	return b.String()
}

// envHelp describes the variables in "adclick help".
func envHelp() string {
	return `Environment: every flag of a command can also be set with
ADCLICK_<COMMAND>_<FLAG>, the flag in upper case with '-' as '_': --shards
of gen is ADCLICK_GEN_SHARDS, --job-gen of run is ADCLICK_RUN_JOB_GEN. One
command's variable never changes another command.
These flags mean the same in every command that has them and are also read
from ADCLICK_<FLAG>:
  ` + strings.Join(sharedFlags, ", ") + `
(ADCLICK_DATA, ADCLICK_SINK, ADCLICK_TOKEN, …); the command's own variable
wins over it. A flag on the command line wins over the environment. An
unscoped variable of a flag that is not shared (ADCLICK_SHARDS, the name
before the variables were scoped), or a scoped one naming no flag, is
refused with a usage error.
AWS endpoints, region and credentials come from the AWS SDK's own variables
(AWS_REGION, AWS_ENDPOINT_URL_KINESIS, …).
--print-config, on every command, prints the effective settings, each with
where it came from (flag, env VARIABLE or default), and exits.
`
}
