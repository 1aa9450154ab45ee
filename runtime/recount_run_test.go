package runtime

import (
	"context"
	"testing"
	"time"
)

// TestRunReturnsWithRecount: with the background finaliser on, Run still
// returns when the input ends (the finaliser stops once the graph has
// ended), and every hour of a finished replay is final.
func TestRunReturnsWithRecount(t *testing.T) {
	dir := t.TempDir()
	path := writeTrace(t, dir, traceOptions(2000, 5))
	cfg := replayConfig(dir+"/data", path)
	cfg.Recount = true
	ctx := context.Background()
	j, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer j.Close()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of a 2,000-click replay with Recount on")
	}
	if st := j.Status(); !st.Done {
		t.Errorf("status after Run: Done = false")
	}
}
