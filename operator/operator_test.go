package operator

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/adclick/adclick/eventtime"
	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// The machines' own scenarios (testdata/*). Times are seconds after
// 10:00:00 UTC on 2026-11-29, written like 842.5 (10:14:02.5); the output
// prints them back in the same form.
//
//	source pres=N batch=N allowance=MS    a Source
//	pre windows=N [index=I] [epoch=E]     a Pre (no dedup)
//	win inputs=N [early=MS] [epoch=E]     a Win
//	step                                  one message per input line, then
//	                                      the Ready (carried out, Advanced)
//
// Input lines of step, by machine:
//
//	source: start T | shard ID T | click ID AD SHARD EVENT | tick |
//	        barrier N | final | end | reject ID REASON
//	pre:    clicks T ID:AD:EVENT ... | tick T | wm WM T | barrier N T | end T
//	win:    FROM partial AD START COUNT | FROM late AD EVENT |
//	        FROM wm WM T | FROM tick T | FROM barrier N | FROM end |
//	        FROM rewrite | FROM lost | fail-totals (the next write of
//	        totals fails)

const day = int64(1_795_946_400_000) // 2026-11-29T10:00:00Z

func at(s string) (int64, error) {
	if s == "none" {
		return eventtime.NoWatermark, nil
	}
	if s == "end" {
		return eventtime.EndOfTime, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	return day + int64(f*1000+0.5), nil
}

func show(ms int64) string {
	switch ms {
	case eventtime.NoWatermark:
		return "none"
	case eventtime.EndOfTime:
		return "end"
	}
	return strconv.FormatFloat(float64(ms-day)/1000, 'f', -1, 64)
}

type scenario struct {
	src        *Source
	pre        *Pre
	win        *Win
	failTotals bool
}

func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var sc scenario
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := sc.run(d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func intArg(d *datadriven.TestData, key string, def int64) int64 {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, err := strconv.ParseInt(a.Vals[0], 10, 64)
			if err != nil {
				d.Fatalf(nil, "%s: %v", key, err)
			}
			return v
		}
	}
	return def
}

func (sc *scenario) run(d *datadriven.TestData) (string, error) {
	var err error
	switch d.Cmd {
	case "source":
		sc.src, err = NewSource(SourceOptions{Pres: int(intArg(d, "pres", 1)), BatchSize: int(intArg(d, "batch", 1)),
			Watermarks: ingest.WatermarkOptions{AllowanceMs: intArg(d, "allowance", 5000), IntervalMs: 200}})
		return "ok\n", err
	case "pre":
		pa, err := preagg.New(preagg.Options{AllowanceMs: 5000, NoDedup: true}, nil, 0, windowing.MaxParallelism)
		if err != nil {
			return "", err
		}
		sc.pre, err = NewPre(PreOptions{Index: int(intArg(d, "index", 0)), Windows: int(intArg(d, "windows", 1)),
			HorizonMs: preagg.DefaultHorizonMs, Epoch: intArg(d, "epoch", 0)}, pa, nil)
		return "ok\n", err
	case "win":
		m, err := windowing.NewMinutes(60_000)
		if err != nil {
			return "", err
		}
		e := intArg(d, "epoch", 0)
		sc.win, err = NewWin(WinOptions{Inputs: int(intArg(d, "inputs", 1)), EarlyFiringMs: intArg(d, "early", 1000),
			Epoch: e, Restored: e, Gen: 1}, m, latepath.New(preagg.DefaultHorizonMs))
		return "ok\n", err
	case "step":
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			var err error
			switch {
			case sc.src != nil:
				err = sc.stepSource(&b, f)
			case sc.pre != nil:
				err = sc.stepPre(&b, f)
			case sc.win != nil:
				err = sc.stepWin(&b, f)
			default:
				err = fmt.Errorf("no machine")
			}
			if err != nil {
				return b.String(), fmt.Errorf("%s: %w", line, err)
			}
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

func times(f []string) ([]int64, error) {
	out := make([]int64, len(f))
	for i, s := range f {
		var err error
		if out[i], err = at(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (sc *scenario) stepSource(b *strings.Builder, f []string) error {
	s := sc.src
	switch f[0] {
	case "start":
		t, err := at(f[1])
		if err != nil {
			return err
		}
		s.Start(t)
	case "shard":
		t, err := at(f[2])
		if err != nil {
			return err
		}
		s.AddShard(f[1], t)
	case "click":
		ev, err := at(f[4])
		if err != nil {
			return err
		}
		s.Click(&ingest.Click{ClickID: f[1], AdID: f[2], Shard: f[3], EventMs: ev})
	case "reject":
		s.Reject(&ingest.Click{ClickID: f[1], EventMs: day}, ingest.Reason(f[2]), []byte(`{"click_id":"`+f[1]+`"}`))
	case "tick":
		t, wm, adv := s.Tick()
		fmt.Fprintf(b, "tick %s wm=%s advanced=%v\n", show(t), show(wm), adv)
	case "barrier":
		n, _ := strconv.ParseInt(f[1], 10, 64)
		s.Barrier(n)
	case "final":
		s.Final()
	case "end":
		s.Broadcast(Msg{Kind: End})
	default:
		return fmt.Errorf("unknown source step")
	}
	rd := s.Ready()
	for _, snd := range rd.Sends {
		fmt.Fprintf(b, "→ pre %d: %s\n", snd.To, msgString(snd.Msg))
	}
	for _, r := range rd.Lake {
		fmt.Fprintf(b, "lake %s %s event=%d raw=%s\n", r.ClickID, r.Verdict, r.EventMs, r.Raw)
	}
	s.Advance()
	return nil
}

func msgString(m Msg) string {
	var b strings.Builder
	b.WriteString(m.Kind.String())
	switch m.Kind {
	case Clicks:
		for _, c := range m.Clicks {
			fmt.Fprintf(&b, " %s", c.ClickID)
		}
		for _, p := range m.Partials {
			fmt.Fprintf(&b, " %s@%s+%d", p.Ad, show(p.WindowStart), p.Count)
		}
		for _, l := range m.Late {
			fmt.Fprintf(&b, " late:%s@%s", l.Ad, show(l.EventMs))
		}
		if m.Cause != 0 {
			fmt.Fprintf(&b, " (%s)", m.Cause)
		}
	case Watermark:
		fmt.Fprintf(&b, " %s", show(m.Wm))
	case Barrier:
		fmt.Fprintf(&b, " %d", m.Ckpt)
	}
	fmt.Fprintf(&b, " at=%s", show(m.ProcMs))
	return b.String()
}

func (sc *scenario) stepPre(b *strings.Builder, f []string) error {
	p := sc.pre
	ts := func(i int) (int64, error) { return at(f[i]) }
	var m Msg
	switch f[0] {
	case "clicks":
		t, err := ts(1)
		if err != nil {
			return err
		}
		m = Msg{Kind: Clicks, ProcMs: t}
		for _, c := range f[2:] {
			parts := strings.Split(c, ":")
			if len(parts) != 3 {
				return fmt.Errorf("click %q: want ID:AD:EVENT", c)
			}
			ev, err := at(parts[2])
			if err != nil {
				return err
			}
			m.Clicks = append(m.Clicks, ingest.Click{ClickID: parts[0], AdID: parts[1], EventMs: ev, ImpressionMs: ev - 10_000, ArrivalMs: t})
		}
	case "tick", "end":
		t, err := ts(1)
		if err != nil {
			return err
		}
		m = Msg{Kind: Tick, ProcMs: t}
		if f[0] == "end" {
			m.Kind = End
		}
	case "wm":
		v, err := times(f[1:3])
		if err != nil {
			return err
		}
		m = Msg{Kind: Watermark, Wm: v[0], ProcMs: v[1]}
	case "barrier":
		n, _ := strconv.ParseInt(f[1], 10, 64)
		t, err := ts(2)
		if err != nil {
			return err
		}
		m = Msg{Kind: Barrier, Ckpt: n, ProcMs: t}
	default:
		return fmt.Errorf("unknown pre step")
	}
	if err := p.Step(m); err != nil {
		return err
	}
	rd := p.Ready()
	for _, r := range rd.Lake {
		fmt.Fprintf(b, "lake %s %s epoch=%d\n", r.ClickID, r.Verdict, rd.LakeEpoch)
	}
	for _, snd := range rd.Sends {
		fmt.Fprintf(b, "→ win %d: %s\n", snd.To, msgString(snd.Msg))
	}
	if rd.Ack != nil {
		fmt.Fprintf(b, "ack %d floor=%s prev-epoch=%d\n", rd.Ack.Ckpt, show(rd.Ack.Floor), rd.Ack.PrevEpoch)
	}
	if rd.Done {
		b.WriteString("done\n")
	}
	p.Advance()
	return nil
}

func (sc *scenario) stepWin(b *strings.Builder, f []string) error {
	w := sc.win
	if f[0] == "fail-totals" {
		sc.failTotals = true
		return nil
	}
	from, err := strconv.Atoi(f[0])
	if err != nil {
		return fmt.Errorf("input %q: %w", f[0], err)
	}
	m := Msg{From: from}
	switch f[1] {
	case "partial":
		start, err := at(f[3])
		if err != nil {
			return err
		}
		n, _ := strconv.ParseInt(f[4], 10, 64)
		m.Kind = Clicks
		m.Partials = []preagg.Partial{{Ad: f[2], WindowStart: start, Count: n}}
	case "late":
		ev, err := at(f[3])
		if err != nil {
			return err
		}
		m.Kind = Clicks
		m.Late = []LateClick{{Ad: f[2], EventMs: ev}}
	case "wm":
		v, err := times(f[2:4])
		if err != nil {
			return err
		}
		m.Kind, m.Wm, m.ProcMs = Watermark, v[0], v[1]
	case "tick":
		t, err := at(f[2])
		if err != nil {
			return err
		}
		m.Kind, m.ProcMs = Tick, t
	case "barrier":
		m.Kind = Barrier
		m.Ckpt, _ = strconv.ParseInt(f[2], 10, 64)
	case "end":
		m.Kind = End
	case "rewrite":
		m.Kind = Rewrite
	case "lost":
		m.Kind = TotalsLost
	default:
		return fmt.Errorf("unknown win step")
	}
	if err := w.Step(m); err != nil {
		return err
	}
	rd := w.Ready()
	if !rd.Write && rd.Ack == nil && !rd.Done {
		// The runtime waits for a batch: nothing to carry out yet.
		if n := w.puts(); n > 0 {
			fmt.Fprintf(b, "(%d puts wait)\n", n)
		}
		return nil
	}
	for i, puts := range rd.Puts {
		for _, p := range puts {
			cond := ""
			if p.ClosedRow {
				cond = fmt.Sprintf(" closed-row≥%d", p.RestoredCkpt)
			}
			fmt.Fprintf(b, "put %s %s %s valid=%d tag=%d%s\n", sink.TaggedWriters[i], p.Entity, p.Bucket, p.Valid, p.Epoch, cond)
		}
	}
	if rd.TotalsDue {
		// A replay lists what state holds in map order: print by key (a
		// stable sort keeps a key's updates in order).
		tots := slices.Clone(rd.Totals)
		slices.SortStableFunc(tots, func(a, b sink.Total) int {
			return cmp.Or(strings.Compare(a.Ad, b.Ad), cmp.Compare(a.StartMs, b.StartMs), cmp.Compare(btoi(a.Hour), btoi(b.Hour)))
		})
		for _, t := range tots {
			kind := "M"
			if t.Hour {
				kind = "H"
			}
			fmt.Fprintf(b, "total %s %s%s = %d tag=%d\n", t.Ad, kind, show(t.StartMs), t.Valid, t.Epoch)
		}
		if sc.failTotals {
			b.WriteString("totals write failed\n")
			w.ReportTotalsFailed()
			sc.failTotals = false
		}
	}
	fmt.Fprintf(b, "firings minute=%d hour=%d early=%d\n", rd.Firings.Minute, rd.Firings.Hour, rd.Firings.Early)
	if rd.Ack != nil {
		fmt.Fprintf(b, "ack %d wm=%s win-blobs=%d late-blobs=%d\n", rd.Ack.Ckpt, show(rd.Ack.Wm), len(rd.Ack.Win), len(rd.Ack.Late))
	}
	if rd.Done {
		b.WriteString("done\n")
	}
	w.Advance()
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
