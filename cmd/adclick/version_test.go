package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"testing"
)

// TestVersionCommand: adclick version prints the stamped version (-X
// main.version), else "devel" for a plain build, with the Go version.
func TestVersionCommand(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	for _, tc := range []struct{ stamped, want string }{{"v1.4.2", "adclick v1.4.2 (revision "}, {"", "adclick devel (revision "}} {
		version = tc.stamped
		for _, arg := range []string{"version", "--version"} {
			var out, errb bytes.Buffer
			if code := realMain([]string{arg}, &out, &errb); code != 0 {
				t.Fatalf("%s: exit %d\n%s", arg, code, errb.String())
			}
			if !strings.HasPrefix(out.String(), tc.want) || !strings.Contains(out.String(), goruntime.Version()) {
				t.Errorf("%s (version %q): got %q, want %q… and %s", arg, tc.stamped, out.String(), tc.want, goruntime.Version())
			}
		}
	}
}

// TestBuildInfoMetric: a running job serves adclick_build_info = 1 on
// /metrics, labelled with what adclick version says, for a binary stamped
// with -ldflags "-X main.version=…".
func TestBuildInfoMetric(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "adclick")
	// The settings of the shared test binary (scripts/test.sh, TestMain):
	// every package's compile comes from the build cache, and only the
	// link, with the stamp, is done again.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=v0.0.0-metric-test", "-o", bin, ".")
	build.Env = sharedBuildEnv()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("adclick version: %v", err)
	}
	m := regexp.MustCompile(`^adclick (\S+) \(revision (\S+), (\S+)\)\n$`).FindStringSubmatch(string(out))
	if m == nil || m[1] != "v0.0.0-metric-test" {
		t.Fatalf("adclick version printed %q, want adclick v0.0.0-metric-test (revision …, go…)", out)
	}
	saved := binPath
	binPath = bin
	j := startJob(t, "gen job", "", "--source", "gen", "--gen-rate", "100", "--data", filepath.Join(t.TempDir(), "data"), "--parallelism", "1")
	binPath = saved
	j.waitReady()
	code, b, err := j.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	want := `adclick_build_info{goversion="` + m[3] + `",revision="` + m[2] + `",version="` + m[1] + `"} 1`
	if !strings.Contains(string(b), want+"\n") {
		var got []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "build_info") {
				got = append(got, l)
			}
		}
		t.Errorf("/metrics lacks %s; its build_info lines: %q", want, got)
	}
	j.stop(false)
}
