package runtime

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestFingerprintRefusal: a checkpoint taken with one window or horizon is
// refused by a job with another, with a message that names both settings
// and says what to do; the same settings restore it. The refused start
// changes nothing. (The bad-deploy runbook depends on this refusal.)
func TestFingerprintRefusal(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir(), traceOptions(1500, 11))
	cfg := replayConfig(dir, path)
	cfg.PreAgg.WindowMs = 60_000
	j := runToEnd(t, cfg)
	before := scanRows(t, j.Rows())
	last := j.Status().LastCheckpoint
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if last == nil || last.ID == 0 {
		t.Fatalf("the run left no checkpoint: %+v", last)
	}

	for _, tc := range []struct {
		name       string
		edit       func(*Config)
		have, want string
	}{
		{"window 30 s", func(c *Config) { c.PreAgg.WindowMs = 30_000 }, "window_ms=60000", "window_ms=30000"},
		{"horizon 1 h", func(c *Config) { c.PreAgg.HorizonMs = 3_600_000 }, "horizon_ms=7200000", "horizon_ms=3600000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := replayConfig(dir, path)
			c.PreAgg.WindowMs = 60_000
			tc.edit(&c)
			j, err := Open(context.Background(), c)
			if err == nil {
				j.Close()
				t.Fatalf("open with %s: got no error, want a refusal of checkpoint %d", tc.name, last.ID)
			}
			msg := err.Error()
			for _, want := range []string{tc.have, tc.want, "same settings", "new --data directory"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not mention %q", msg, want)
				}
			}
			// The settings the checkpoint was taken with come first, the
			// job's second.
			if i, k := strings.Index(msg, tc.have), strings.Index(msg, tc.want); i > k {
				t.Errorf("refusal %q: checkpoint's setting %q should come before the job's %q", msg, tc.have, tc.want)
			}
		})
	}

	// The same settings restore the final checkpoint, and the refused
	// starts left the rows alone.
	j, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open with the same settings: %v", err)
	}
	defer j.Close()
	if got := j.Status().Restored; got != last.ID {
		t.Errorf("restored checkpoint %d, want %d", got, last.ID)
	}
	if after := scanRows(t, j.Rows()); !reflect.DeepEqual(after, before) {
		t.Errorf("rows changed across refused starts and a restore: %d items before, %d after", len(before), len(after))
	}
}

// TestRestoreIdempotent: a job that ran to the end of its input, started
// again on the same data, restores the final checkpoint, flushes, reads
// nothing more and leaves every row as it was.
func TestRestoreIdempotent(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, t.TempDir(), traceOptions(3000, 5))
	ref := fileReference(t, path)
	cfg := replayConfig(dir, path)

	j := runToEnd(t, cfg)
	first := scanRows(t, j.Rows())
	last := j.Status().LastCheckpoint
	recs := j.Status().Records
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkRows(t, first, ref)
	if recs == 0 || last == nil || !last.Final {
		t.Fatalf("first run: %d records, last checkpoint %+v; want records and a final checkpoint", recs, last)
	}

	for round := 1; round <= 2; round++ {
		j := runToEnd(t, cfg)
		st := j.Status()
		again := scanRows(t, j.Rows())
		if err := j.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if st.Restored < last.ID {
			t.Errorf("round %d: restored checkpoint %d, want at least %d (the final one)", round, st.Restored, last.ID)
		}
		if st.Records != 0 {
			t.Errorf("round %d: read %d records after restoring the end of input, want 0", round, st.Records)
		}
		if st.Flush == nil {
			t.Errorf("round %d: no flush report after a restore", round)
		}
		if len(again) != len(first) {
			t.Errorf("round %d: %d items, want %d", round, len(again), len(first))
		}
		for k, want := range first {
			if got := again[k]; !reflect.DeepEqual(got, want) {
				t.Errorf("round %d: %s/%s = %+v, want %+v", round, k.Entity, k.Bucket, got, want)
			}
		}
		checkRows(t, again, ref)
	}
}
