package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is the release, stamped at build time with
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/adclick
//
// Empty means unstamped: buildVersion then takes the module version from
// the build information (set by "go install module@version"), or "devel".
var version string

// build describes the binary.
type build struct {
	Version   string // the stamped version, the module version, or "devel"
	Revision  string // VCS revision, with "-dirty" for a modified tree; "unknown" if not recorded
	GoVersion string // the Go toolchain, like go1.26.8
}

// buildVersion returns what the binary knows about its build.
func buildVersion() build {
	b := build{Version: version, Revision: "unknown", GoVersion: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "devel"
		}
		return b
	}
	b.GoVersion = info.GoVersion
	if b.Version == "" {
		b.Version = info.Main.Version
		if b.Version == "" || b.Version == "(devel)" {
			b.Version = "devel"
		}
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "-dirty"
	}
	return b
}

// buildInfoGauge is adclick_build_info: 1, labelled with the version, the
// revision and the Go version, so that dashboards can tell versions apart
// (the Go collector's go_build_info carries only the module's).
func buildInfoGauge() prometheus.Collector {
	b := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "adclick_build_info",
		Help:        "Always 1; the labels say which build of adclick is running.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}

const versionSummary = `Prints the version (stamped with -ldflags "-X main.version=…", else the
module version or "devel"), the VCS revision and the Go version.`

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", versionSummary, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	b := buildVersion()
	_, err := fmt.Fprintf(stdout, "adclick %s (revision %s, %s)\n", b.Version, b.Revision, b.GoVersion)
	return err
}
