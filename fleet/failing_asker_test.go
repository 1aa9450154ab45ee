package fleet

import (
	"cmp"
	"hash/fnv"
	"slices"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest/kinesis"
)

// preferOf orders keys as lease.Balance's preference for worker me does,
// so the test knows which range b asks for.
func preferOf(me string, keys []string) []string {
	h := func(key string) uint64 {
		f := fnv.New64a()
		f.Write([]byte(me))
		f.Write([]byte{0})
		f.Write([]byte(key))
		return f.Sum64()
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(h(a), h(b)), cmp.Compare(a, b)) })
	return keys
}

// A range that fails on worker b (a fault of b's: its disk, its data dir)
// after a handed it over is released and rested there; worker a, though
// at its target, takes it back once it has been free for the handoff
// timeout (before, the range ran nowhere, for good).
func TestRangeFailingOnItsAskerGoesBack(t *testing.T) {
	w := newWorld(t, 1, 2, kinesis.ReadPoll)
	a := w.start("a")
	defer a.stop(t)
	waitFor(t, "a to hold both ranges", 20*time.Second, func() bool { return len(held(a)) == 2 })
	asked := preferOf("b", []string{"job#kg0-64", "job#kg64-128"})[0]
	w.mu.Lock()
	w.poison, w.poisonOn = asked[len("job#"):], "b"
	w.mu.Unlock()
	b := w.start("b")
	defer b.stop(t)
	waitFor(t, "a to hand the range over", 20*time.Second, func() bool { return held(a)[w.poison] == "" })
	// Rest is 2D = 1.2 s; give a five rests to pick it up.
	end := time.Now().Add(6 * time.Second)
	runs := map[string]int{}
	for time.Now().Before(end) {
		for r, id := range held(a, b) {
			if r == w.poison {
				runs[id]++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	t.Logf("starts: %v; %s seen running on: %v", w.starts, w.poison, runs)
	w.mu.Unlock()
	if runs["a"] == 0 {
		t.Errorf("range %s, failing on b only, was never run by a in 6 s (a sits at its target of 1)", w.poison)
	}
}
