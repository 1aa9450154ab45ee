package flush

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// TestFullProgress: Options.Progress is called from the start of the run,
// with counts that never go down, through both phases, and a last time
// with PhaseDone and the counts of the Report.
func TestFullProgress(t *testing.T) {
	rows, totals, st := story(t)
	for i := range 3000 {
		k := sink.Key{Entity: fmt.Sprintf("burst_%d", i), Bucket: minute("10:14")}
		mustPut(t, rows, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 42, Gen: 7})
	}
	var got []Progress
	o := unlimited()
	o.Progress = func(p Progress) { got = append(got, p) }
	rep, err := Full(context.Background(), rows, totals, st, st, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("progress called %d times, want a call per query and a final one", len(got))
	}
	if p := got[0]; p.Phase != PhaseRows || p.Queries != 0 || p.Examined != 0 || p.QueriesTotal != 3*sink.IndexShards*2 {
		t.Errorf("first progress %+v, want phase rows, nothing done, %d queries in all", p, 3*sink.IndexShards*2)
	}
	phases := map[Phase]int{}
	midQuery := 0
	for i, p := range got {
		phases[p.Phase]++
		if i == 0 {
			continue
		}
		q := got[i-1]
		if p.Queries < q.Queries || p.Examined < q.Examined || p.Removed < q.Removed || p.Rewritten < q.Rewritten {
			t.Errorf("progress went down: %+v after %+v", p, q)
		}
		if p.Phase == PhaseRows && p.Queries == q.Queries {
			midQuery++
		}
	}
	if phases[PhaseRows] < 3*sink.IndexShards*2 || phases[PhaseTotals] == 0 || phases[PhaseDone] != 1 {
		t.Errorf("calls per phase %v, want one per query and more in rows, some in totals, one done", phases)
	}
	if midQuery == 0 {
		t.Error("no progress within a query of 3,000 items spread over 8 shards, want one every 256 items")
	}
	last := got[len(got)-1]
	want := Progress{Phase: PhaseDone, Queries: 3 * sink.IndexShards * 2, QueriesTotal: 3 * sink.IndexShards * 2,
		Examined: rep.ItemsScanned, Removed: rep.ItemsDeleted + rep.AttrsRemoved + rep.TotalsDeleted,
		Rewritten: rep.LateRewritten + rep.FastRewritten + rep.TotalsRewritten, Elapsed: rep.Duration}
	if last != want {
		t.Errorf("last progress %+v, want %+v", last, want)
	}
	if last.Removed < 3000 || last.Examined < 3000 {
		t.Errorf("last progress %+v, want the 3,000 items examined and removed", last)
	}
}

// TestFullProgressOnFailure: a run that fails still ends with a PhaseDone
// call.
func TestFullProgressOnFailure(t *testing.T) {
	rows, totals, st := story(t)
	var last Progress
	o := unlimited()
	o.Progress = func(p Progress) { last = p }
	_, err := Full(context.Background(), crashingRows{Rows: rows, b: newBudget(1)}, totals, st, st, o)
	if err == nil {
		t.Fatal("flush over a failing store: got nil error")
	}
	if last.Phase != PhaseDone {
		t.Errorf("last progress %+v, want phase done", last)
	}
}

// TestFullProgressLog: a long flush logs a progress line at most every
// 10 s on its clock, and a short one none.
func TestFullProgressLog(t *testing.T) {
	rows := sinktest.NewMemRows()
	for i := range 3000 {
		k := sink.Key{Entity: fmt.Sprintf("ad_%d", i), Bucket: minute("10:14")}
		mustPut(t, rows, sink.Put{Key: k, Writer: sink.Fast, Valid: 1, Epoch: 41, Gen: 7})
	}
	var buf bytes.Buffer
	clk := newFakeClock()
	o := Options{Restored: 41, High: 41, Gen: 7, WritesPerSec: 100, Burst: 1, Clock: clk,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	rep, err := Full(context.Background(), rows, nil, newRestored(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Duration < 29*time.Second {
		t.Fatalf("3,000 writes at 100/s took %v on the clock, want about 30 s", rep.Duration)
	}
	var elapsed []time.Duration
	for line := range strings.Lines(buf.String()) {
		var e struct {
			Msg      string
			Progress struct{ Elapsed time.Duration }
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if e.Msg == "flush progress" {
			elapsed = append(elapsed, e.Progress.Elapsed)
		}
	}
	if len(elapsed) < 2 || len(elapsed) > 3 {
		t.Fatalf("progress lines at %v over %v, want one every 10 s:\n%s", elapsed, rep.Duration, buf.String())
	}
	prev := time.Duration(0)
	for _, e := range elapsed {
		if e-prev < 10*time.Second {
			t.Errorf("progress lines at %v: less than 10 s apart", elapsed)
		}
		prev = e
	}

	// A short flush logs only its "flush done" line.
	rows, totals, st := story(t)
	buf.Reset()
	o = unlimited()
	o.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	if _, err := Full(context.Background(), rows, totals, st, st, o); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "flush progress") {
		t.Errorf("a short flush logged progress:\n%s", buf.String())
	}
}
