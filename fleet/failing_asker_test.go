package fleet

import (
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
)

// A range that fails on worker b (a fault of b's: its disk, its data dir)
// after a handed it over is released and rested there; worker a, though
// at its target, takes it back once it has been free for the handoff
// timeout (before, the range ran nowhere, for good).
func TestRangeFailingOnItsAskerGoesBack(t *testing.T) {
	w := newWorld(t, 1, 2, kinesis.ReadPoll)
	a := w.start("a")
	defer a.stop(t)
	waitFor(t, "a to hold both ranges", 20*time.Second, func() bool { return len(held(a)) == 2 })
	w.mu.Lock()
	w.poison, w.poisonOn = "*", "b" // every range fails to start on b
	w.mu.Unlock()
	b := w.start("b")
	defer b.stop(t)
	waitFor(t, "a to hand a range over to b", 20*time.Second, func() bool { return len(held(a)) == 1 })
	waitFor(t, "a to take back the range that fails on b", 10*time.Second, func() bool { return len(held(a)) == 2 })
	w.mu.Lock()
	t.Logf("starts: %v", w.starts)
	tries := len(w.starts["b"])
	w.mu.Unlock()
	if tries == 0 {
		t.Error("b never tried a range: the test did not exercise a failing asker")
	}
}
