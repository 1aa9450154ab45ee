package flush

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// TestDataDriven runs the scenario files in testdata/. Commands:
//
//	put writer=fast|late key=ad_7/M10:14 epoch=41 gen=7 valid=5 [spend=N] [restored=N] [fence=N] [scope=S]
//	    a tagged write (with restored=N, a CLOSED-WINDOW WRITE; with fence=N,
//	    under the lease fence N); prints ok or refused
//	final key=ad_7/H10 gen=7 valid=N [spend=N] [at=N]
//	    a recount write
//	set-total key=ad_7/M10:14 epoch=41 valid=N [spend=N] [scope=S]
//	    a running total as the job wrote it to the totals store
//	state
//	late ad_7/H10 valid=N [spend=N]
//	total ad_7/M10:14 valid=N [spend=N]
//	    replaces the restored state (late totals and running totals)
//	flush c=41 high=43 gen=7 [fence=N] [crash-after=N] [no-totals] [scope=S]
//	    runs Full; with crash-after, every write after the first N fails
//	sweep gen=7 since=51 high=54 [fence-gen=G fence=N] [crash-after=N] [scope=S]
//	    runs Sweep
//	table
//	    prints every item (wf=N: the fence of its last tagged write, if any)
//	totals [scope=S]
//	    prints every running total the test has named, and the epoch
//	    bookkeeping of epochs 0..99
//
// scope=S runs the command through the stores' views with index scope S
// (a range pipeline's); without it, through the stores themselves.
//
// Keys use the story's day: M10:14 is minute 2026-11-29T10:14Z, H10 hour
// 2026-11-29T10Z.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{
			rows:   sinktest.NewMemRows(),
			totals: sinktest.NewMemTotals(),
			st:     newRestored(),
			known:  map[sink.TotalKey]bool{},
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.run(t, d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

type harness struct {
	rows   *sinktest.MemRows
	totals *sinktest.MemTotals
	st     *restored
	known  map[sink.TotalKey]bool
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) (string, error) {
	ctx := context.Background()
	switch d.Cmd {
	case "put":
		var w, key string
		var p sink.Put
		d.ScanArgs(t, "writer", &w)
		d.ScanArgs(t, "key", &key)
		d.ScanArgs(t, "epoch", &p.Epoch)
		d.ScanArgs(t, "gen", &p.Gen)
		d.ScanArgs(t, "valid", &p.Valid)
		d.MaybeScanArgs(t, "spend", &p.SpendMicros)
		d.MaybeScanArgs(t, "fence", &p.Fence)
		p.ClosedRow = d.MaybeScanArgs(t, "restored", &p.RestoredCkpt)
		var err error
		if p.Writer, err = parseWriter(w); err != nil {
			return "", err
		}
		if p.Key, err = parseKey(key); err != nil {
			return "", err
		}
		rows, err := h.rowsIn(t, d)
		if err != nil {
			return "", err
		}
		refused, err := rows.Put(ctx, []sink.Put{p})
		if err != nil {
			return "", err
		}
		if refused > 0 {
			return "refused\n", nil
		}
		return "ok\n", nil

	case "final":
		var key string
		var p sink.FinalPut
		d.ScanArgs(t, "key", &key)
		d.ScanArgs(t, "gen", &p.Gen)
		d.ScanArgs(t, "valid", &p.Valid)
		d.MaybeScanArgs(t, "spend", &p.SpendMicros)
		d.MaybeScanArgs(t, "at", &p.AtMs)
		var err error
		if p.Key, err = parseKey(key); err != nil {
			return "", err
		}
		refused, err := h.rows.PutFinal(ctx, []sink.FinalPut{p})
		if err != nil {
			return "", err
		}
		if refused > 0 {
			return "refused\n", nil
		}
		return "ok\n", nil

	case "set-total":
		var key string
		var tot sink.Total
		d.ScanArgs(t, "key", &key)
		d.ScanArgs(t, "epoch", &tot.Epoch)
		d.ScanArgs(t, "valid", &tot.Valid)
		d.MaybeScanArgs(t, "spend", &tot.SpendMicros)
		k, err := parseTotalKey(key)
		if err != nil {
			return "", err
		}
		tot.Ad, tot.StartMs, tot.Hour = k.Ad, k.StartMs, k.Hour
		h.known[k] = true
		totals, err := h.totalsIn(t, d)
		if err != nil {
			return "", err
		}
		if err := totals.SetTotals(ctx, []sink.Total{tot}); err != nil {
			return "", err
		}
		return "ok\n", nil

	case "state":
		h.st = newRestored()
		for _, line := range strings.Split(d.Input, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			if err := h.stateLine(line); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("%d late totals, %d running totals\n", len(h.st.late), len(h.st.totals)), nil

	case "flush":
		o := Options{WritesPerSec: math.Inf(1), Clock: newFakeClock()}
		d.ScanArgs(t, "c", &o.Restored)
		d.ScanArgs(t, "high", &o.High)
		d.ScanArgs(t, "gen", &o.Gen)
		d.MaybeScanArgs(t, "fence", &o.Fence)
		view, err := h.rowsIn(t, d)
		if err != nil {
			return "", err
		}
		tv, err := h.totalsIn(t, d)
		if err != nil {
			return "", err
		}
		var totals sink.Totals = tv
		if d.HasArg("no-totals") {
			totals = nil
		}
		cnt := &counting{Rows: view}
		var rows sink.Rows = cnt
		if d.HasArg("crash-after") {
			var n int
			d.ScanArgs(t, "crash-after", &n)
			b := newBudget(n)
			rows = crashingRows{Rows: cnt, b: b}
			if totals != nil {
				totals = crashingTotals{Totals: totals, b: b}
			}
		}
		rep, err := Full(ctx, rows, totals, h.st, h.st, o)
		return formatRun(rep, cnt, err), nil

	case "sweep":
		o := SweepOptions{WritesPerSec: math.Inf(1), Clock: newFakeClock()}
		d.ScanArgs(t, "gen", &o.Gen)
		d.ScanArgs(t, "since", &o.Since)
		d.ScanArgs(t, "high", &o.High)
		d.MaybeScanArgs(t, "fence-gen", &o.FenceGen)
		d.MaybeScanArgs(t, "fence", &o.Fence)
		view, err := h.rowsIn(t, d)
		if err != nil {
			return "", err
		}
		tv, err := h.totalsIn(t, d)
		if err != nil {
			return "", err
		}
		cnt := &counting{Rows: view}
		var rows sink.Rows = cnt
		if d.HasArg("crash-after") {
			var n int
			d.ScanArgs(t, "crash-after", &n)
			rows = crashingRows{Rows: cnt, b: newBudget(n)}
		}
		rep, err := Sweep(ctx, rows, tv, o)
		return formatRun(rep, cnt, err), nil

	case "table":
		return dumpRows(t, h.rows), nil

	case "totals":
		totals, err := h.totalsIn(t, d)
		if err != nil {
			return "", err
		}
		return h.dumpTotals(t, totals), nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

// scopeArg returns the command's scope=S, "" without one.
func scopeArg(t *testing.T, d *datadriven.TestData) string {
	var scope string
	d.MaybeScanArgs(t, "scope", &scope)
	return scope
}

// rowsIn returns the row store's view with the command's scope, or the
// store itself without one.
func (h *harness) rowsIn(t *testing.T, d *datadriven.TestData) (*sinktest.MemRows, error) {
	if scope := scopeArg(t, d); scope != "" {
		return h.rows.Scoped(scope)
	}
	return h.rows, nil
}

// totalsIn is rowsIn for the totals store.
func (h *harness) totalsIn(t *testing.T, d *datadriven.TestData) (*sinktest.MemTotals, error) {
	if scope := scopeArg(t, d); scope != "" {
		return h.totals.Scoped(scope)
	}
	return h.totals, nil
}

func (h *harness) stateLine(line string) error {
	cmd, args, err := datadriven.ParseLine(line)
	if err != nil {
		return err
	}
	if len(args) == 0 || len(args[0].Vals) != 0 {
		return fmt.Errorf("state line %q: want a key first", line)
	}
	vals := map[string]int64{}
	for _, a := range args[1:] {
		if len(a.Vals) != 1 {
			return fmt.Errorf("state line %q: want one value for %s", line, a.Key)
		}
		v, err := strconv.ParseInt(a.Vals[0], 10, 64)
		if err != nil {
			return fmt.Errorf("state line %q: %w", line, err)
		}
		vals[a.Key] = v
	}
	switch cmd {
	case "late", "hour":
		k, err := parseKey(args[0].Key)
		if err != nil {
			return err
		}
		ms, hr, err := sink.ParseBucket(k.Bucket)
		if err != nil || !hr {
			return fmt.Errorf("state line %q: late totals and roll-ups are per hour", line)
		}
		m := h.st.late
		if cmd == "hour" {
			m = h.st.hours
		}
		m[lateKey{k.Entity, ms}] = [2]int64{vals["valid"], vals["spend"]}
	case "total":
		k, err := parseTotalKey(args[0].Key)
		if err != nil {
			return err
		}
		h.known[k] = true
		h.st.totals[k] = sink.Total{Ad: k.Ad, StartMs: k.StartMs, Hour: k.Hour, Valid: vals["valid"], SpendMicros: vals["spend"]}
	default:
		return fmt.Errorf("state line %q: want late, hour or total", line)
	}
	return nil
}

func (h *harness) dumpTotals(t *testing.T, totals sink.Totals) string {
	ctx := context.Background()
	keys := make([]sink.TotalKey, 0, len(h.known))
	for k := range h.known {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareTotalKeys)
	var sb strings.Builder
	for _, k := range keys {
		tot, ok, err := totals.GetTotal(ctx, k)
		if err != nil {
			t.Fatalf("get total: %v", err)
		}
		if !ok {
			fmt.Fprintf(&sb, "%s: (none)\n", totalName(k))
			continue
		}
		fmt.Fprintf(&sb, "%s: valid=%d spend=%d epoch=%d\n", totalName(k), tot.Valid, tot.SpendMicros, tot.Epoch)
	}
	for e := int64(0); e < 100; e++ {
		var names []string
		err := totals.TotalsWritten(ctx, e, func(k sink.TotalKey) error {
			names = append(names, totalName(k))
			return nil
		})
		if err != nil {
			t.Fatalf("totals written: %v", err)
		}
		if len(names) > 0 {
			slices.Sort(names)
			fmt.Fprintf(&sb, "epoch %d: %s\n", e, strings.Join(names, " "))
		}
	}
	return sb.String()
}

func formatRun(rep Report, cnt *counting, err error) string {
	var sb strings.Builder
	if err != nil {
		fmt.Fprintf(&sb, "error: %v\n", err)
	}
	fmt.Fprintf(&sb, "epochs=%d scanned=%d deleted=%d removed=%d late-rewritten=%d fast-rewritten=%d totals-rewritten=%d totals-deleted=%d refused=%d fenced=%d\n",
		rep.Epochs, rep.ItemsScanned, rep.ItemsDeleted, rep.AttrsRemoved, rep.LateRewritten, rep.FastRewritten,
		rep.TotalsRewritten, rep.TotalsDeleted, rep.Refused, rep.Fenced)
	if rep.Superseded != 0 {
		fmt.Fprintf(&sb, "superseded=%d\n", rep.Superseded)
	}
	fmt.Fprintf(&sb, "cost: queries=%d results=%d row-writes=%d gets=%d\n", cnt.queries, cnt.results, cnt.writes, cnt.gets)
	return sb.String()
}

func parseWriter(s string) (sink.Writer, error) {
	switch s {
	case "fast":
		return sink.Fast, nil
	case "late":
		return sink.Late, nil
	}
	return 0, fmt.Errorf("unknown writer %q", s)
}

// parseKey parses "ad_7/M10:14" or "ad_7/H10" (the story's day) or a full
// bucket.
func parseKey(s string) (sink.Key, error) {
	ad, b, ok := strings.Cut(s, "/")
	if !ok || ad == "" || b == "" {
		return sink.Key{}, fmt.Errorf("bad key %q, want ad/bucket", s)
	}
	if !strings.Contains(b, "-") {
		switch b[0] {
		case 'M':
			b = minute(b[1:])
		case 'H':
			b = hour(b[1:])
		}
	}
	if _, _, err := sink.ParseBucket(b); err != nil {
		return sink.Key{}, err
	}
	return sink.Key{Entity: ad, Bucket: b}, nil
}

func parseTotalKey(s string) (sink.TotalKey, error) {
	k, err := parseKey(s)
	if err != nil {
		return sink.TotalKey{}, err
	}
	ms, hr, err := sink.ParseBucket(k.Bucket)
	if err != nil {
		return sink.TotalKey{}, err
	}
	return sink.TotalKey{Ad: k.Entity, StartMs: ms, Hour: hr}, nil
}

func totalName(k sink.TotalKey) string {
	if k.Hour {
		return k.Ad + "/" + shortBucket(sink.HourBucket(k.StartMs))
	}
	return k.Ad + "/" + shortBucket(sink.MinuteBucket(k.StartMs))
}
