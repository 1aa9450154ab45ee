package ckptstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adclick/adclick/ckptstore/ckpt"
)

func newFakeEnv(t *testing.T) (*remoteEnv, *fakeS3) {
	c := &clock{}
	f := newFakeS3("bkt", c.Now)
	return newRemoteEnv(t, f, "bkt", "jobs/blue", c), f
}

func TestRemoteIncremental(t *testing.T) {
	e, _ := newFakeEnv(t)
	scenarioIncremental(t, e)
}

func TestRemoteManifestLast(t *testing.T) {
	e, _ := newFakeEnv(t)
	scenarioManifestLast(t, e)
}

func TestRemotePrune(t *testing.T) {
	e, _ := newFakeEnv(t)
	scenarioPrune(t, e)
}

func TestRemotePruneDuringUpload(t *testing.T) {
	e, _ := newFakeEnv(t)
	scenarioPruneDuringUpload(t, e)
}

func TestRemoteRestoreEmpty(t *testing.T) {
	e, f := newFakeEnv(t)
	fresh := newRemoteEnv(t, f, "bkt", "jobs/blue", e.clock)
	scenarioRestoreEmpty(t, e, fresh)
}

func TestRemoteBasics(t *testing.T) {
	e, _ := newFakeEnv(t)
	scenarioBasics(t, e)
}

// TestRemoteLayout pins the object layout, which the documentation
// promises and operators may rely on.
func TestRemoteLayout(t *testing.T) {
	e, f := newFakeEnv(t)
	tree := writeTree(t, map[string]string{"state/000004.sst": "t", "state/CURRENT": "c", "meta.json": "{}"})
	mustUpload(t, e.r, tree, 42, ckpt.Checkpoint)
	mustUpload(t, e.r, tree, 42, ckpt.Savepoint)
	if err := e.r.SetHigh(context.Background(), 43); err != nil {
		t.Fatal(err)
	}
	sum := "e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8" // sha256("t")
	want := []string{
		"jobs/blue/checkpoints/ckpt-000000000042/files/meta.json",
		"jobs/blue/checkpoints/ckpt-000000000042/files/state/CURRENT",
		"jobs/blue/checkpoints/ckpt-000000000042/intent.json",
		"jobs/blue/epoch-high",
		"jobs/blue/manifests/ckpt-000000000042.json",
		"jobs/blue/manifests/sp-000000000042.json",
		"jobs/blue/savepoints/sp-000000000042/files/meta.json",
		"jobs/blue/savepoints/sp-000000000042/files/state/CURRENT",
		"jobs/blue/savepoints/sp-000000000042/intent.json",
		"jobs/blue/shared/" + sum + ".sst",
	}
	if got := f.keys(""); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("keys:\ngot  %v\nwant %v", got, want)
	}
	if got, want := e.r.Location(42, ckpt.Savepoint), "s3://bkt/jobs/blue/manifests/sp-000000000042.json"; got != want {
		t.Errorf("location: got %s, want %s", got, want)
	}
	// The manifest is the last object written.
	if last := f.puts[len(f.puts)-2]; last != "jobs/blue/manifests/sp-000000000042.json" {
		t.Errorf("last put of the savepoint upload: got %s, want its manifest", last)
	}
}

func TestRemoteMetrics(t *testing.T) {
	c := &clock{}
	reg := prometheus.NewRegistry()
	api := &faultAPI{API: newFakeS3("b", c.Now)}
	r, err := NewRemote(api, "b", "", Options{Registerer: reg, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t1 := writeTree(t, map[string]string{"1.sst": "aaaa", "m": "xy"})
	t2 := writeTree(t, map[string]string{"1.sst": "aaaa", "2.sst": "bbbbbbb", "m": "xyz"})
	mustUpload(t, r, t1, 1, ckpt.Checkpoint)
	mustUpload(t, r, t2, 2, ckpt.Checkpoint)
	api.setOnPut(func(string) error { return errors.New("down") })
	if _, err := r.Upload(context.Background(), t2, 3, ckpt.Checkpoint); err == nil {
		t.Fatal("upload with failing puts: got nil error")
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"uploaded bytes", value(t, r.m.uploaded.WithLabelValues("checkpoint")), 6 + 10},
		{"reused bytes", value(t, r.m.reused.WithLabelValues("checkpoint")), 4},
		{"uploaded files", value(t, r.m.files.WithLabelValues("checkpoint")), 4},
		{"upload failures", value(t, r.m.failures.WithLabelValues("upload")), 1},
		{"upload durations observed", histCount(t, r.m.duration.WithLabelValues("checkpoint")), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if _, err := NewRemote(api, "b", "", Options{Registerer: reg}); err == nil {
		t.Errorf("second Remote on the same registry: got nil error, want a registration error")
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in             string
		bucket, prefix string
		ok             bool
	}{
		{"s3://bkt/a/b", "bkt", "a/b", true},
		{"s3://bkt/a/b/", "bkt", "a/b", true},
		{"s3://bkt", "bkt", "", true},
		{"s3://bkt/", "bkt", "", true},
		{"s3:///a", "", "", false},
		{"http://bkt/a", "", "", false},
		{"bkt/a", "", "", false},
		{"s3://bkt/a//b", "", "", false},
		{"s3://bkt/a?x=1", "", "", false},
		{"s3://u@bkt/a", "", "", false},
	} {
		b, p, err := ParseURL(tc.in)
		if (err == nil) != tc.ok || b != tc.bucket || p != tc.prefix {
			t.Errorf("ParseURL(%q): got %q, %q, %v; want %q, %q, ok %v", tc.in, b, p, err, tc.bucket, tc.prefix, tc.ok)
		}
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
	}{
		{"not json", `{`},
		{"other id", `{"version":1,"kind":"checkpoint","id":8,"files":[]}`},
		{"other kind", `{"version":1,"kind":"savepoint","id":7,"files":[]}`},
		{"version", `{"version":2,"kind":"checkpoint","id":7,"files":[]}`},
		{"escaping path", `{"version":1,"kind":"checkpoint","id":7,"files":[{"path":"../x","size":1}]}`},
		{"absolute path", `{"version":1,"kind":"checkpoint","id":7,"files":[{"path":"/x","size":1}]}`},
		{"negative size", `{"version":1,"kind":"checkpoint","id":7,"files":[{"path":"x","size":-1}]}`},
		{"bad dir", `{"version":1,"kind":"checkpoint","id":7,"dirs":["a/../.."],"files":[]}`},
	} {
		if _, err := decodeManifest([]byte(tc.doc), 7, ckpt.Checkpoint); !errors.Is(err, ckpt.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, err)
		}
	}
	if _, err := decodeManifest([]byte(`{"version":1,"kind":"checkpoint","id":7,"dirs":["state"],"files":[{"path":"state/x","size":1}]}`), 7, ckpt.Checkpoint); err != nil {
		t.Errorf("valid manifest: got %v", err)
	}
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func histCount(t *testing.T, o prometheus.Observer) float64 {
	t.Helper()
	var d dto.Metric
	if err := o.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return float64(d.Histogram.GetSampleCount())
}
