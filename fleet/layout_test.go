package fleet

import (
	"testing"

	"github.com/adclick/adclick/sink/sinktest"
	"github.com/adclick/adclick/windowing"
)

// Every worker derives a range's places from the range alone.
func TestLayout(t *testing.T) {
	r := windowing.KeyGroups{From: 16, To: 32}
	for _, c := range []struct {
		l                         Layout
		r                         windowing.KeyGroups
		data, checkpoints, consum string
	}{
		{Layout{DataDir: "/d", Checkpoints: "s3://b/ck", Consumer: "job"}, r, "/d/kg16-32", "s3://b/ck/kg16-32", "job-kg16-32"},
		{Layout{DataDir: "/d", Checkpoints: "s3://b/ck/"}, r, "/d/kg16-32", "s3://b/ck/kg16-32", ""},
		{Layout{DataDir: "/d", Checkpoints: "s3://b/ck", Consumer: "job"}, windowing.AllKeyGroups, "/d/kg0-128", "s3://b/ck/kg0-128", "job"},
	} {
		if got := c.l.DataDirOf(c.r); got != c.data {
			t.Errorf("%+v: DataDirOf(%s) = %q, want %q", c.l, c.r, got, c.data)
		}
		if got := c.l.CheckpointsOf(c.r); got != c.checkpoints {
			t.Errorf("%+v: CheckpointsOf(%s) = %q, want %q", c.l, c.r, got, c.checkpoints)
		}
		if got := c.l.ConsumerOf(c.r); got != c.consum {
			t.Errorf("%+v: ConsumerOf(%s) = %q, want %q", c.l, c.r, got, c.consum)
		}
	}
	if got := ShareOf(1<<30, r, 1<<20); got != 1<<30/8 {
		t.Errorf("ShareOf(1 GiB, %s) = %d, want an eighth", r, got)
	}
	if got := ShareOf(1<<20, windowing.KeyGroups{From: 0, To: 1}, 1<<20); got != 1<<20 {
		t.Errorf("ShareOf below the floor = %d, want the floor", got)
	}
	if _, _, err := ScopedSinks(sinktest.NewMemRows(), nil, r); err == nil {
		t.Error("ScopedSinks took a row store without range views")
	}
	if rows, totals, err := ScopedSinks(nil, nil, r); rows != nil || totals != nil || err != nil {
		t.Errorf("ScopedSinks(nil, nil) = %v, %v, %v; want nothing", rows, totals, err)
	}
}
