package story

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/windowing"
)

// baseMs is midnight UTC of the day every scenario happens on; clock times
// in scenario files ("10:14:05.2") are offsets from it.
var baseMs = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).UnixMilli()

// parseClock parses "H:MM", "H:MM:SS" or "H:MM:SS.f" on the scenario day, or
// an RFC 3339 time (a phone clock in 2031), into Unix ms.
func parseClock(s string) (int64, error) {
	if strings.Contains(s, "T") {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, err
		}
		return t.UnixMilli(), nil
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("bad clock time %q", s)
	}
	h, err1 := strconv.ParseInt(parts[0], 10, 64)
	m, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad clock time %q", s)
	}
	var sec, ms int64
	if len(parts) == 3 {
		whole, frac, _ := strings.Cut(parts[2], ".")
		var err error
		if sec, err = strconv.ParseInt(whole, 10, 64); err != nil {
			return 0, fmt.Errorf("bad clock time %q", s)
		}
		if frac != "" {
			if len(frac) > 3 {
				return 0, fmt.Errorf("more than millisecond precision in %q", s)
			}
			frac += strings.Repeat("0", 3-len(frac))
			if ms, err = strconv.ParseInt(frac, 10, 64); err != nil {
				return 0, fmt.Errorf("bad clock time %q", s)
			}
		}
	}
	return baseMs + ((h*60+m)*60+sec)*1000 + ms, nil
}

// clock renders a Unix ms time: "10:13:59.999" on the scenario day, "none"
// for no watermark, "max" for the final watermark.
func clock(ms int64) string {
	switch {
	case ms == math.MinInt64:
		return "none"
	case ms == math.MaxInt64:
		return "max"
	case ms >= baseMs && ms < baseMs+24*3600*1000:
		d := ms - baseMs
		return fmt.Sprintf("%02d:%02d:%02d.%03d", d/3600000, d/60000%60, d/1000%60, d%1000)
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// bucket renders a window start as "M10:14" and an hour as "H10".
func bucket(startMs int64, hour bool) string {
	c := clock(startMs)
	if hour {
		return "H" + c[:2]
	}
	return "M" + c[:5]
}

// parseDur parses "500", "500ms", "5s", "2m", "1h" into ms.
func parseDur(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "ms"):
		s = strings.TrimSuffix(s, "ms")
	case strings.HasSuffix(s, "s"):
		s, mult = strings.TrimSuffix(s, "s"), 1000
	case strings.HasSuffix(s, "m"):
		s, mult = strings.TrimSuffix(s, "m"), 60_000
	case strings.HasSuffix(s, "h"):
		s, mult = strings.TrimSuffix(s, "h"), 3_600_000
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v * mult, err
}

type show struct{ verdicts, partials, totals bool }

// render prints events one per line.
func render(evs []Event, sh show) string {
	var b strings.Builder
	for _, e := range evs {
		at := clock(e.Ms)
		spend := func(r RowOut) string {
			if r.SpendMicros != 0 {
				return fmt.Sprintf(" spend=%d", r.SpendMicros)
			}
			return ""
		}
		switch e.Kind {
		case EvWatermark:
			fmt.Fprintf(&b, "%s wm=%s\n", at, clock(e.Wm))
		case EvVerdict:
			if sh.verdicts {
				c := e.Click
				fmt.Fprintf(&b, "%s %s %s %s event=%s %s\n", at, c.ClickID, c.Shard, c.AdID, clock(c.EventMs), e.Verdict)
			}
		case EvPartial:
			if sh.partials {
				fmt.Fprintf(&b, "%s partial %s %s +%d (%s)\n", at, bucket(e.Row.StartMs, false), e.Row.Ad, e.Row.Valid, e.Cause)
			}
		case EvRow:
			fmt.Fprintf(&b, "%s row %s %s valid=%d%s tag=%d\n", at, bucket(e.Row.StartMs, e.Row.Hour), e.Row.Ad, e.Row.Valid, spend(e.Row), e.Row.Epoch)
		case EvLate:
			fmt.Fprintf(&b, "%s late %s %s valid=%d%s tag=%d\n", at, bucket(e.Row.StartMs, true), e.Row.Ad, e.Row.Valid, spend(e.Row), e.Row.Epoch)
		case EvRunning:
			if sh.totals {
				fmt.Fprintf(&b, "%s total %s %s = %d\n", at, bucket(e.Row.StartMs, e.Row.Hour), e.Row.Ad, e.Row.Valid)
			}
		case EvRefused:
			fmt.Fprintf(&b, "%s refused %s %s valid=%d (closed-row condition)\n", at, bucket(e.Row.StartMs, false), e.Row.Ad, e.Row.Valid)
		case EvCheckpoint:
			fmt.Fprintf(&b, "%s checkpoint %d %s floor=%s\n", at, e.Ckpt, e.Verdict, clock(e.Wm))
		case EvRestore:
			fmt.Fprintf(&b, "%s restore %d floor=%s\n", at, e.Ckpt, clock(e.Wm))
		}
	}
	return b.String()
}

// parseClick parses one click line: "<id> ad=A shard=S event=T at=T
// [imp=T] [device=T] [arrival=T] [spend=N]". device defaults to event,
// imp to device − 10 s, arrival to at. "#" starts a comment.
func parseClick(line string) (ingest.Click, int64, error) {
	line, _, _ = strings.Cut(line, "#")
	f := strings.Fields(line)
	if len(f) == 0 {
		return ingest.Click{}, 0, fmt.Errorf("empty click line")
	}
	c := ingest.Click{ClickID: f[0], CampaignID: "camp_1", DeviceID: "dev_" + f[0]}
	var at, event, imp, device, arrival int64
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return c, 0, fmt.Errorf("bad field %q", kv)
		}
		var err error
		switch k {
		case "ad":
			c.AdID = v
		case "shard":
			c.Shard = v
		case "id":
			c.ClickID = v
		case "spend":
			c.SpendMicros, err = strconv.ParseInt(v, 10, 64)
		case "at":
			at, err = parseClock(v)
		case "event":
			event, err = parseClock(v)
		case "imp":
			imp, err = parseClock(v)
		case "device":
			device, err = parseClock(v)
		case "arrival":
			arrival, err = parseClock(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return c, 0, err
		}
	}
	if at == 0 {
		return c, 0, fmt.Errorf("click %s: at= is required", c.ClickID)
	}
	if device == 0 {
		device = event
	}
	if imp == 0 {
		imp = min(device, event) - 10_000
	}
	c.DeviceMs, c.ImpressionMs, c.ArrivalMs = device, imp, arrival
	return c, at, nil
}

func TestStories(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var s *Story
		var sh show
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := runCmd(t, &s, &sh, d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			if out == "" {
				return "ok\n"
			}
			return out
		})
	})
}

func argClock(d *datadriven.TestData, key string) (int64, bool, error) {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, err := parseClock(a.Vals[0])
			return v, true, err
		}
	}
	return 0, false, nil
}

func argStr(d *datadriven.TestData, key string) (string, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "", true
			}
			return a.Vals[0], true
		}
	}
	return "", false
}

func runCmd(t *testing.T, sp **Story, sh *show, d *datadriven.TestData) (string, error) {
	s := *sp
	if d.Cmd != "init" && d.Cmd != "count-by-arrival" && s == nil {
		return "", fmt.Errorf("init first")
	}
	at, hasAt, err := argClock(d, "at")
	if err != nil {
		return "", err
	}
	advance := func() error {
		if hasAt {
			return s.Advance(at)
		}
		return nil
	}
	switch d.Cmd {
	case "init":
		var o Options
		*sh = show{verdicts: true}
		for _, a := range d.CmdArgs {
			if a.Key == "show" {
				*sh = show{}
				for _, v := range a.Vals {
					switch v {
					case "verdicts":
						sh.verdicts = true
					case "partials":
						sh.partials = true
					case "totals":
						sh.totals = true
					case "none":
					default:
						return "", fmt.Errorf("unknown show %q", v)
					}
				}
				continue
			}
			if len(a.Vals) != 1 {
				return "", fmt.Errorf("bad argument %s", a.Key)
			}
			v := a.Vals[0]
			var dst *int64
			switch a.Key {
			case "par":
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				o.Parallelism = n
				continue
			case "batch":
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				o.BatchSize = n
				continue
			case "ckpt":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return "", err
				}
				o.FirstCheckpoint = n
				continue
			case "allowance":
				dst = &o.AllowanceMs
			case "window":
				dst = &o.WindowMs
			case "flush":
				dst = &o.PreaggFlushMs
			case "idle":
				dst = &o.IdleMs
			case "early":
				dst = &o.EarlyFiringMs
			case "horizon":
				dst = &o.HorizonMs
			default:
				return "", fmt.Errorf("unknown option %s", a.Key)
			}
			if *dst, err = parseDur(v); err != nil {
				return "", err
			}
		}
		ns, err := New(o)
		if err != nil {
			return "", err
		}
		*sp = ns
		o = ns.Options()
		return fmt.Sprintf("par=%d batch=%d allowance=%dms interval=%dms idle=%dms window=%dms flush=%dms early=%dms horizon=%dms\n",
			o.Parallelism, o.BatchSize, o.AllowanceMs, o.WatermarkIntervalMs, o.IdleMs, o.WindowMs, o.PreaggFlushMs, o.EarlyFiringMs, o.HorizonMs), nil
	case "shards":
		if !hasAt {
			return "", fmt.Errorf("shards: at= is required")
		}
		for _, a := range d.CmdArgs {
			if a.Key == "ids" {
				for _, id := range a.Vals {
					s.AddShard(id, at)
				}
			}
		}
	case "click", "clicks":
		for _, line := range strings.Split(d.Input, "\n") {
			if strings.TrimSpace(strings.SplitN(line, "#", 2)[0]) == "" {
				continue
			}
			c, readMs, err := parseClick(line)
			if err != nil {
				return "", err
			}
			if err := s.Click(c, readMs); err != nil {
				return "", err
			}
		}
	case "tick":
		until, ok, err := argClock(d, "until")
		if err != nil || !ok {
			return "", fmt.Errorf("tick: until= is required (%v)", err)
		}
		if err := s.Advance(until); err != nil {
			return "", err
		}
	case "barrier":
		if err := advance(); err != nil {
			return "", err
		}
		if _, aborted := argStr(d, "aborted"); aborted {
			_, err = s.AbortedBarrier()
		} else {
			_, err = s.Barrier()
		}
		if err != nil {
			return "", err
		}
	case "crash":
		if err := advance(); err != nil {
			return "", err
		}
		out := render(s.Events(), *sh)
		s.Crash()
		return out + fmt.Sprintf("crash at %s (buffered partials lost: %d)\n", clock(s.ProcMs()), s.Buffered()), nil
	case "restore":
		var id int64
		d.ScanArgs(t, "ckpt", &id)
		var ro RestoreOptions
		if v, ok := argStr(d, "floor"); ok && v == "false" {
			ro.NoFloor = true
		}
		if v, ok := argStr(d, "par"); ok {
			if ro.Parallelism, err = strconv.Atoi(v); err != nil {
				return "", err
			}
		}
		if !hasAt {
			return "", fmt.Errorf("restore: at= is required")
		}
		if err := s.Restore(id, at, ro); err != nil {
			return "", err
		}
	case "final":
		if err := advance(); err != nil {
			return "", err
		}
		if err := s.Final(); err != nil {
			return "", err
		}
	case "state":
		var b strings.Builder
		fmt.Fprintf(&b, "proc=%s wm=%s buffered=%d open=%d\n", clock(s.ProcMs()), clock(s.Watermark()), s.Buffered(), s.OpenWindows())
		for i := range s.pres {
			fmt.Fprintf(&b, "pre %d: judge=%s floor=%s\n", i, clock(s.Judge(i)), clock(s.pres[i].PreAgg().Floor()))
		}
		return render(s.Events(), *sh) + b.String(), nil
	case "checkpoint-state":
		var id int64
		d.ScanArgs(t, "ckpt", &id)
		return checkpointState(s, id)
	case "sink":
		return render(s.Events(), *sh) + dumpSink(s.Sink()), nil
	case "count-by-arrival":
		// Not the core: the processing-time view seed 003 contrasts with
		// event time, counted from the clicks of the input alone.
		return countByArrival(d.Input)
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	return render(s.Events(), *sh), nil
}

// checkpointState decodes a checkpoint's window and late state into fresh
// operators and lists what they hold.
func checkpointState(s *Story, id int64) (string, error) {
	ck := s.Checkpoint(id)
	if ck == nil {
		return "", fmt.Errorf("no checkpoint %d", id)
	}
	m, err := windowing.NewMinutes(s.Options().WindowMs)
	if err != nil {
		return "", err
	}
	for _, d := range ck.Win {
		if err := m.Restore(d); err != nil {
			return "", err
		}
	}
	var rows []RowOut
	m.Totals(func(r windowing.Running) {
		rows = append(rows, RowOut{Ad: r.Ad, StartMs: r.StartMs, Hour: r.Hour, Valid: r.Valid})
	})
	sortRows(rows)
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d floor=%s position=%d dedup ids=%d\n", id, clock(ck.Floor()), ck.Position, len(ck.Dedup))
	for _, r := range rows {
		kind := "open minute"
		if r.Hour {
			kind = "hour (closed+open)"
		}
		fmt.Fprintf(&b, "%s %s %s = %d\n", kind, bucket(r.StartMs, r.Hour), r.Ad, r.Valid)
	}
	for kg, d := range ck.Late {
		_ = kg
		l := newLateFrom(s, d)
		for _, tl := range l {
			fmt.Fprintf(&b, "late %s %s = %d\n", bucket(tl.StartMs, true), tl.Ad, tl.Valid)
		}
	}
	return b.String(), nil
}

func dumpSink(k *Sink) string {
	var b strings.Builder
	for _, key := range k.Minutes() {
		v, _ := k.Minute(key.Ad, key.StartMs)
		fmt.Fprintf(&b, "%s %s fast=%d tag=%d\n", bucket(key.StartMs, false), key.Ad, v.Valid, v.Epoch)
	}
	for _, key := range k.HourRows() {
		fmt.Fprintf(&b, "%s %s", bucket(key.StartMs, true), key.Ad)
		if v, ok := k.HourFast(key.Ad, key.StartMs); ok {
			fmt.Fprintf(&b, " fast=%d tag=%d", v.Valid, v.Epoch)
		}
		if v, ok := k.Late(key.Ad, key.StartMs); ok {
			fmt.Fprintf(&b, " late=%d late_tag=%d", v.Valid, v.Epoch)
		}
		b.WriteString("\n")
	}
	if n := k.Refused(); n > 0 {
		fmt.Fprintf(&b, "refused writes: %d\n", n)
	}
	if b.Len() == 0 {
		return "empty\n"
	}
	return b.String()
}

func countByArrival(input string) (string, error) {
	type key struct{ ad, min string }
	var order []key
	arrival, event := map[key]int{}, map[key]int{}
	for _, line := range strings.Split(input, "\n") {
		if strings.TrimSpace(strings.SplitN(line, "#", 2)[0]) == "" {
			continue
		}
		c, at, err := parseClick(line)
		if err != nil {
			return "", err
		}
		if c.ArrivalMs == 0 {
			c.ArrivalMs = at
		}
		for _, k := range []key{{c.AdID, bucket(c.ArrivalMs, false)}, {c.AdID, bucket(c.DeviceMs, false)}} {
			if !slices.Contains(order, k) {
				order = append(order, k)
			}
		}
		arrival[key{c.AdID, bucket(c.ArrivalMs, false)}]++
		event[key{c.AdID, bucket(c.DeviceMs, false)}]++
	}
	sortKeys(order, func(a, b key) bool { return a.ad < b.ad || a.ad == b.ad && a.min < b.min })
	var b strings.Builder
	b.WriteString("ad minute by_arrival by_event\n")
	for _, k := range order {
		fmt.Fprintf(&b, "%s %s %d %d\n", k.ad, k.min, arrival[k], event[k])
	}
	return b.String(), nil
}
