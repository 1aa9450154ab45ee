package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// unsetenv removes a variable for the rest of the test (t.Setenv restores
// it afterwards).
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "")
	os.Unsetenv(k)
}

// genOut runs adclick gen for a small reproducible trace and returns its
// exit code, standard output and standard error.
func genOut(t *testing.T, extra ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(append([]string{"gen", "--clicks", "200", "--start-ms", "1795946400000"}, extra...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestEnvScopedPerCommand: a variable is read by its own command only
// (ADCLICK_<COMMAND>_<FLAG>). ADCLICK_SHARDS used to change gen's output,
// whichever command it was meant for; now another command's variable
// changes nothing, gen's own does, and the old unscoped name is refused
// with the new one rather than dropped silently.
func TestEnvScopedPerCommand(t *testing.T) {
	code, base, errs := genOut(t)
	if code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, errs)
	}
	// Other commands' variables, and a shared one gen has no flag for.
	t.Setenv("ADCLICK_SETUP_SHARDS", "8")
	t.Setenv("ADCLICK_RUN_GEN_SHARDS", "8")
	t.Setenv("ADCLICK_PUT_FROM", "clicks.jsonl")
	t.Setenv("ADCLICK_RECOUNT_TO", "2026-11-29T10Z")
	t.Setenv("ADCLICK_DATA", t.TempDir())
	if code, out, errs := genOut(t); code != 0 || out != base {
		t.Fatalf("gen with other commands' variables: exit %d, output changed %v\n%s", code, out != base, errs)
	}

	// gen's own variable.
	t.Setenv("ADCLICK_GEN_SHARDS", "8")
	code, out, errs := genOut(t)
	if code != 0 || out == base || !strings.Contains(out, `"shard":"S7"`) {
		t.Fatalf("ADCLICK_GEN_SHARDS=8: exit %d, output changed %v, want 8 shards\n%s", code, out != base, errs)
	}
	// The command line wins over it.
	if code, out, _ := genOut(t, "--shards", "4"); code != 0 || out != base {
		t.Errorf("--shards 4 with ADCLICK_GEN_SHARDS=8: exit %d, output changed %v, want the flag's", code, out != base)
	}
	unsetenv(t, "ADCLICK_GEN_SHARDS")

	// The old, unscoped name: refused, naming the new one.
	t.Setenv("ADCLICK_SHARDS", "8")
	code, _, errs = genOut(t)
	if code != 2 || !strings.Contains(errs, "ADCLICK_SHARDS is not read") || !strings.Contains(errs, "ADCLICK_GEN_SHARDS") {
		t.Errorf("ADCLICK_SHARDS=8: exit %d, stderr %q; want exit 2 naming ADCLICK_GEN_SHARDS", code, errs)
	}
	unsetenv(t, "ADCLICK_SHARDS")

	// A scoped variable naming no flag of the command is a typo.
	t.Setenv("ADCLICK_GEN_SHARD", "8")
	code, _, errs = genOut(t)
	if code != 2 || !strings.Contains(errs, "ADCLICK_GEN_SHARD: adclick gen has no flag --shard") {
		t.Errorf("ADCLICK_GEN_SHARD=8: exit %d, stderr %q; want exit 2 naming the variable", code, errs)
	}
}

// configOf returns the value and the source --print-config shows for a
// flag ("" if it shows none; the value "" if it is empty).
func configOf(out, flag string) (value, source string) {
	for _, l := range strings.Split(out, "\n") {
		v, ok := strings.CutPrefix(l, "--"+flag+"=")
		if !ok {
			continue
		}
		if strings.HasPrefix(v, " ") {
			return "", strings.TrimSpace(v)
		}
		value, source, _ = strings.Cut(v, " ")
		return value, strings.TrimSpace(source)
	}
	return "", ""
}

// TestEnvShared: a shared flag (--data here) is read from ADCLICK_DATA by
// every command that has it; the command's own variable wins.
func TestEnvShared(t *testing.T) {
	for _, tc := range []struct {
		env         map[string]string
		val, source string
	}{
		{map[string]string{"ADCLICK_DATA": "/shared"}, "/shared", "env ADCLICK_DATA"},
		{map[string]string{"ADCLICK_DATA": "/shared", "ADCLICK_ROWS_DATA": "/own"}, "/own", "env ADCLICK_ROWS_DATA"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		if code := realMain([]string{"rows", "--print-config"}, &out, &errb); code != 0 {
			t.Fatalf("rows --print-config: exit %d\n%s", code, errb.String())
		}
		if v, src := configOf(out.String(), "data"); v != tc.val || src != tc.source {
			t.Errorf("%v: --data is %q from %q, want %q from %q:\n%s", tc.env, v, src, tc.val, tc.source, out.String())
		}
	}
}

// TestPrintConfig: --print-config lists every setting with where it came
// from, shows no secret, and runs nothing.
func TestPrintConfig(t *testing.T) {
	t.Setenv("ADCLICK_GEN_ADS", "30")
	var out, errb bytes.Buffer
	if code := realMain([]string{"gen", "--shards", "3", "--out", "/nonexistent/dir/x.jsonl", "--print-config"}, &out, &errb); code != 0 {
		t.Fatalf("gen --print-config: exit %d\n%s", code, errb.String())
	}
	for _, w := range []struct{ flag, val, source string }{
		{"ads", "30", "env ADCLICK_GEN_ADS"}, {"shards", "3", "flag"}, {"seed", "1", "default"}, {"start-ms", "now", "default"},
	} {
		if v, src := configOf(out.String(), w.flag); v != w.val || src != w.source {
			t.Errorf("gen --print-config: --%s is %q from %q, want %q from %q:\n%s", w.flag, v, src, w.val, w.source, out.String())
		}
	}

	t.Setenv("ADCLICK_ADMIN_TOKEN", "s3cr3t-token")
	out.Reset()
	if code := realMain([]string{"run", "--read-token", "other-s3cr3t", "--print-config"}, &out, &errb); code != 0 {
		t.Fatalf("run --print-config: exit %d\n%s", code, errb.String())
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Errorf("run --print-config shows a token:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "--admin-token=(set, not shown)") {
		t.Errorf("run --print-config does not say the admin token is set:\n%s", out.String())
	}
	if v, src := configOf(out.String(), "job-gen"); v != "1" || src != "default" {
		t.Errorf("run --print-config: --job-gen is %q from %q, want 1 from default", v, src)
	}
}

// TestHelpNamesScopedVariables: --help gives each flag its variables.
func TestHelpNamesScopedVariables(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"gen", []string{"--shards  [ADCLICK_GEN_SHARDS]"}},
		{"run", []string{"--job-gen  [ADCLICK_RUN_JOB_GEN]", "--data  [ADCLICK_RUN_DATA, ADCLICK_DATA]", "--gen-shards  [ADCLICK_RUN_GEN_SHARDS]"}},
		{"status", []string{"--token  [ADCLICK_STATUS_TOKEN, ADCLICK_TOKEN]"}},
	} {
		var out, errb bytes.Buffer
		if code := realMain([]string{tc.cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d", tc.cmd, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%s --help lacks %q", tc.cmd, w)
			}
		}
	}
	var out, errb bytes.Buffer
	realMain([]string{"help"}, &out, &errb)
	if !strings.Contains(out.String(), "ADCLICK_<COMMAND>_<FLAG>") {
		t.Errorf("adclick help does not state the rule:\n%s", out.String())
	}
}
