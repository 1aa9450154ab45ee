package sinktest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/adclick/adclick/sink"
)

func TestMemTotals(t *testing.T) {
	Totals(t, func(t *testing.T) sink.Totals { return NewMemTotals() })
}

// Broken stores: each breaks one rule of the suite, which must catch it.

// totAdding adds to the stored count instead of setting it.
type totAdding struct{ *MemTotals }

func (b totAdding) SetTotals(ctx context.Context, ts []sink.Total) error {
	ts = append([]sink.Total(nil), ts...)
	for i, x := range ts {
		if old, ok, _ := b.GetTotal(ctx, x.Key()); ok {
			ts[i].Valid += old.Valid
		}
	}
	return b.MemTotals.SetTotals(ctx, ts)
}

// totLatestOnly lists a key only under the epoch of its latest write.
type totLatestOnly struct{ *MemTotals }

func (b totLatestOnly) SetTotals(ctx context.Context, ts []sink.Total) error {
	var ks []sink.TotalKey
	for _, x := range ts {
		ks = append(ks, x.Key())
	}
	b.MemTotals.mu.Lock()
	for _, ep := range b.MemTotals.epochs[""] {
		for _, k := range ks {
			delete(ep, k)
		}
	}
	b.MemTotals.mu.Unlock()
	return b.MemTotals.SetTotals(ctx, ts)
}

// totKeepsListing deletes values but leaves the keys listed under their epochs.
type totKeepsListing struct{ *MemTotals }

func (b totKeepsListing) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	b.MemTotals.mu.Lock()
	defer b.MemTotals.mu.Unlock()
	for _, k := range keys {
		delete(b.MemTotals.totals, k)
	}
	return nil
}

// totForgetsValues deletes the totals of forgotten epochs as well.
type totForgetsValues struct{ *MemTotals }

func (b totForgetsValues) ForgetEpochs(ctx context.Context, from, to int64) error {
	b.MemTotals.mu.Lock()
	for e, ep := range b.MemTotals.epochs[""] {
		if e >= from && e < to {
			for k := range ep {
				delete(b.MemTotals.totals, k)
			}
		}
	}
	b.MemTotals.mu.Unlock()
	return b.MemTotals.ForgetEpochs(ctx, from, to)
}

// totInclusiveForget treats the range as [from, to].
type totInclusiveForget struct{ *MemTotals }

func (b totInclusiveForget) ForgetEpochs(ctx context.Context, from, to int64) error {
	if to < 1<<62 {
		to++
	}
	return b.MemTotals.ForgetEpochs(ctx, from, to)
}

var brokenTotalsStores = map[string]func() sink.Totals{
	"adding":          func() sink.Totals { return totAdding{NewMemTotals()} },
	"latestOnly":      func() sink.Totals { return totLatestOnly{NewMemTotals()} },
	"keepsListing":    func() sink.Totals { return totKeepsListing{NewMemTotals()} },
	"forgetsValues":   func() sink.Totals { return totForgetsValues{NewMemTotals()} },
	"inclusiveForget": func() sink.Totals { return totInclusiveForget{NewMemTotals()} },
	"unfenced":        func() sink.Totals { return totUnfenced{NewMemTotals()} },
}

const brokenTotalsEnv = "SINKTEST_BROKEN_TOTALS"

// TestBrokenTotalsHelper runs the suite against the broken store named by
// the environment; it does nothing otherwise. TestSuiteCatchesBrokenTotals
// runs it in a child process, where its failure is the expected outcome.
func TestBrokenTotalsHelper(t *testing.T) {
	name := os.Getenv(brokenTotalsEnv)
	if name == "" {
		return
	}
	open, ok := brokenTotalsStores[name]
	if !ok {
		t.Fatalf("no broken store %q", name)
	}
	Totals(t, func(t *testing.T) sink.Totals { return open() })
	if _, ok := open().(sink.FencedTotals); ok {
		FencedTotals(t, func(t *testing.T) sink.FencedTotals { return open().(sink.FencedTotals) })
	}
}

func TestSuiteCatchesBrokenTotals(t *testing.T) {
	if os.Getenv(brokenTotalsEnv) != "" {
		return
	}
	for name, wantFail := range map[string]string{
		"adding":          "--- FAIL: TestBrokenTotalsHelper/Overwrite",
		"latestOnly":      "--- FAIL: TestBrokenTotalsHelper/TotalsWritten",
		"keepsListing":    "--- FAIL: TestBrokenTotalsHelper/DeleteTotals",
		"forgetsValues":   "--- FAIL: TestBrokenTotalsHelper/ForgetEpochs",
		"inclusiveForget": "--- FAIL: TestBrokenTotalsHelper/ForgetEpochs",
		"unfenced":        "--- FAIL: TestBrokenTotalsHelper/LateOlderFenceRefused",
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenTotalsHelper$", "-test.v")
			cmd.Env = append(os.Environ(), brokenTotalsEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that breaks the contract (%s); output:\n%s", name, out)
			}
			if !strings.Contains(string(out), wantFail) {
				t.Fatalf("output lacks %q; got:\n%s", wantFail, out)
			}
		})
	}
}

func TestMemTotalsScoped(t *testing.T) {
	ScopedTotals(t, func(t *testing.T) (sink.Totals, func(string) (sink.Totals, error)) {
		m := NewMemTotals()
		return m, func(scope string) (sink.Totals, error) { return m.Scoped(scope) }
	})
}

func TestMemTotalsFenced(t *testing.T) {
	FencedTotals(t, func(t *testing.T) sink.FencedTotals { return NewMemTotals() })
}

// totUnfenced writes whatever the stored token: the fenced suite must
// catch it.
type totUnfenced struct{ *MemTotals }

func (b totUnfenced) SetTotalsFenced(ctx context.Context, ts []sink.Total, t sink.Token) (int, error) {
	b.MemTotals.mu.Lock()
	clear(b.MemTotals.tokens)
	b.MemTotals.mu.Unlock()
	return b.MemTotals.SetTotalsFenced(ctx, ts, t)
}
