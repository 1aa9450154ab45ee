package story

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/windowing"
)

// tclick is one record of a generated trace.
type tclick struct {
	c       ingest.Click // ArrivalMs set; EventMs computed by the core
	arrival int64
}

type traceGen struct {
	stale bool // generate clicks whose impression is far beyond the horizon
}

// genTrace draws a trace: clicks on a few ads and shards over about ten
// minutes of event time, most read within seconds, some minutes late,
// some duplicated (same id and impression) on any shard, in arrival order.
func (g traceGen) draw(t *rapid.T) []tclick {
	nShards := rapid.IntRange(1, 3).Draw(t, "shards")
	nAds := rapid.IntRange(1, 4).Draw(t, "ads")
	n := rapid.IntRange(1, 60).Draw(t, "clicks")
	var out []tclick
	for i := 0; i < n; i++ {
		ev := baseMs + 10*3_600_000 + int64(rapid.IntRange(0, 12*60_000).Draw(t, "event"))
		var delay int64
		switch rapid.IntRange(0, 9).Draw(t, "delaykind") {
		case 0, 1:
			delay = int64(rapid.IntRange(60_000, 10*60_000).Draw(t, "late")) // minutes late
		case 2:
			delay = int64(rapid.IntRange(5_000, 40_000).Draw(t, "slow"))
		default:
			delay = int64(rapid.IntRange(0, 3_000).Draw(t, "fast"))
		}
		imp := ev - int64(rapid.IntRange(0, 60_000).Draw(t, "imp"))
		if g.stale && rapid.IntRange(0, 14).Draw(t, "stale") == 0 {
			imp = ev - 3*3_600_000
		}
		device := ev
		if rapid.IntRange(0, 19).Draw(t, "fastclock") == 0 {
			device = ev + 365*24*3_600_000 // clamped to arrival
		}
		c := ingest.Click{ClickID: fmt.Sprintf("k%d", i), AdID: fmt.Sprintf("ad_%d", rapid.IntRange(0, nAds-1).Draw(t, "ad")),
			CampaignID: "camp", DeviceID: "dev", ImpressionMs: imp, DeviceMs: device,
			SpendMicros: int64(rapid.IntRange(0, 1000).Draw(t, "spend")),
			Shard:       fmt.Sprintf("S%d", rapid.IntRange(0, nShards-1).Draw(t, "shard"))}
		arr := ev + delay
		out = append(out, tclick{c: c, arrival: arr})
		for d := rapid.IntRange(0, 4).Draw(t, "dups"); d > 2; d-- {
			dc := c
			dc.Shard = fmt.Sprintf("S%d", rapid.IntRange(0, nShards-1).Draw(t, "dupshard"))
			out = append(out, tclick{c: dc, arrival: arr + int64(rapid.IntRange(0, 5*60_000).Draw(t, "dupdelay"))})
		}
	}
	slices.SortStableFunc(out, func(a, b tclick) int { return int(a.arrival - b.arrival) })
	for i := range out {
		out[i].c.ArrivalMs = out[i].arrival
	}
	return out
}

// plan is where barriers and crashes happen, by click index.
type plan struct {
	barriers map[int]bool
	crashes  map[int]int // click index → new parallelism (0 keeps it)
}

func drawPlan(t *rapid.T, n int, crashes bool) plan {
	p := plan{barriers: map[int]bool{}, crashes: map[int]int{}}
	for i := rapid.IntRange(0, 4).Draw(t, "nbarriers"); i > 0; i-- {
		p.barriers[rapid.IntRange(0, n).Draw(t, "barrier")] = true
	}
	if crashes {
		for i := rapid.IntRange(0, 3).Draw(t, "ncrashes"); i > 0; i-- {
			p.crashes[rapid.IntRange(0, n).Draw(t, "crash")] = rapid.IntRange(0, 4).Draw(t, "rescale")
		}
	}
	return p
}

func drawOptions(t *rapid.T, label string) Options {
	return Options{
		Parallelism:   rapid.IntRange(1, 4).Draw(t, label+"par"),
		BatchSize:     rapid.SampledFrom([]int{1, 3, 256}).Draw(t, label+"batch"),
		PreaggFlushMs: rapid.SampledFrom([]int64{100, 500, 1000, 1700}).Draw(t, label+"flush"),
	}
}

// outcome is what a run left: the sink, and the verdicts of the surviving
// timeline (everything after a restored checkpoint is replaced by the
// replay's verdicts).
type outcome struct {
	sink     *Sink
	verdicts []Event
	restores int
}

// run drives a trace through a Story. At a crash (taken before the click
// at that index) the job restores its last completed checkpoint 50 s later
// and replays the clicks after its position, read as fast as processing
// time allows (1 ms apart) until they catch up with their arrival times.
func run(t *rapid.T, tr []tclick, o Options, p plan) outcome {
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var verdicts []Event
	collect := func() {
		for _, e := range s.Events() {
			if e.Kind == EvVerdict {
				verdicts = append(verdicts, e)
			}
		}
	}
	start := tr[0].arrival - 1
	for _, sh := range []string{"S0", "S1", "S2"} {
		s.AddShard(sh, start)
	}
	last, err := s.Barrier() // an empty checkpoint to restore before any other
	if err != nil {
		t.Fatalf("Barrier: %v", err)
	}
	crashed := map[int]bool{}
	restores := 0
	readAt := start
	for i := 0; i <= len(tr); i++ {
		if p.barriers[i] {
			id, err := s.Barrier()
			if err != nil {
				t.Fatalf("Barrier: %v", err)
			}
			last = id
		}
		if par, ok := p.crashes[i]; ok && !crashed[i] {
			crashed[i] = true
			collect()
			s.Crash()
			restores++
			if err := s.Restore(last, s.ProcMs()+50_000, RestoreOptions{Parallelism: par}); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			ck := s.Checkpoint(last)
			verdicts = verdicts[:ck.Position]
			readAt = s.ProcMs()
			collect()
			i = ck.Position - 1
			continue
		}
		if i == len(tr) {
			break
		}
		readAt = max(readAt+1, tr[i].arrival)
		if err := s.Click(tr[i].c, readAt); err != nil {
			t.Fatalf("Click: %v", err)
		}
	}
	if err := s.Advance(readAt + 120_000); err != nil {
		t.Fatalf("Advance: %v", err)
	}
	if err := s.Final(); err != nil {
		t.Fatalf("Final: %v", err)
	}
	collect()
	for _, dd := range s.dedups {
		if dd != nil && dd.mem.Len() != len(dd.shadow) {
			t.Fatalf("dedup copy out of step: MemDedup holds %d ids, shadow %d", dd.mem.Len(), len(dd.shadow))
		}
	}
	return outcome{sink: s.Sink(), verdicts: verdicts, restores: restores}
}

type hourKey struct {
	ad   string
	hour int64
}

type sum struct{ n, spend int64 }

// check verifies an outcome against the naive reference computed from the
// trace and the surviving verdicts, and returns fast+late per (ad, hour).
func check(t *rapid.T, tr []tclick, o Options, out outcome) map[hourKey]sum {
	horizon := o.HorizonMs
	if horizon == 0 {
		horizon = 7_200_000
	}
	maxEvent := int64(0)
	for _, c := range tr {
		maxEvent = max(maxEvent, ingest.Clamp(c.c.DeviceMs, c.c.ImpressionMs, c.arrival))
	}
	// Every copy of a click has a verdict, exactly once, in the surviving
	// timeline.
	if len(out.verdicts) != len(tr) {
		t.Fatalf("got %d verdicts, want one per record: %d", len(out.verdicts), len(tr))
	}
	accepted := map[string]Event{}
	for _, e := range out.verdicts {
		switch e.Verdict {
		case "counted", "late":
			if prev, ok := accepted[e.Click.ClickID]; ok {
				t.Fatalf("click %s accepted twice: %s then %s", e.Click.ClickID, prev.Verdict, e.Verdict)
			}
			accepted[e.Click.ClickID] = e
		case "duplicate", "beyond_horizon":
		default:
			t.Fatalf("click %s: unexpected verdict %q", e.Click.ClickID, e.Verdict)
		}
	}
	// Reference: a click whose impression is within the horizon of every
	// event time in the trace can never be judged beyond the horizon, so it
	// must be accepted; a stale one counts only if a copy was accepted.
	want := map[hourKey]sum{}
	wantMin := map[Key]int64{}
	seen := map[string]bool{}
	for _, c := range tr {
		id := c.c.ClickID
		if seen[id] {
			continue
		}
		seen[id] = true
		e, ok := accepted[id]
		if !ok {
			if c.c.ImpressionMs+horizon >= maxEvent {
				t.Fatalf("click %s (impression within the horizon) was never accepted", id)
			}
			continue
		}
		k := hourKey{c.c.AdID, windowing.HourStart(e.Click.EventMs)}
		v := want[k]
		want[k] = sum{v.n + 1, v.spend + c.c.SpendMicros}
		wantMin[Key{c.c.AdID, e.Click.EventMs - e.Click.EventMs%60_000, false}]++
	}
	got := map[hourKey]sum{}
	minSum := map[hourKey]sum{}
	for _, k := range out.sink.Minutes() {
		v, _ := out.sink.Minute(k.Ad, k.StartMs)
		if w := wantMin[k]; v.Valid > w {
			t.Fatalf("minute row %s %s = %d exceeds its true count %d", k.Ad, clock(k.StartMs), v.Valid, w)
		}
		hk := hourKey{k.Ad, windowing.HourStart(k.StartMs)}
		m := minSum[hk]
		minSum[hk] = sum{m.n + v.Valid, m.spend + v.SpendMicros}
	}
	for hk, m := range minSum {
		h, ok := out.sink.HourFast(hk.ad, hk.hour)
		if !ok || h.Valid != m.n || h.SpendMicros != m.spend {
			t.Fatalf("hour row %s %s fast = %+v (present %v), want the sum of its minute rows %+v", hk.ad, clock(hk.hour), h, ok, m)
		}
		got[hk] = m
	}
	for _, k := range out.sink.HourRows() {
		hk := hourKey{k.Ad, k.StartMs}
		if h, ok := out.sink.HourFast(k.Ad, k.StartMs); ok && h.Valid != minSum[hk].n {
			t.Fatalf("hour row %s %s fast = %d without matching minute rows (%d)", k.Ad, clock(k.StartMs), h.Valid, minSum[hk].n)
		}
		if l, ok := out.sink.Late(k.Ad, k.StartMs); ok {
			g := got[hk]
			got[hk] = sum{g.n + l.Valid, g.spend + l.SpendMicros}
		}
	}
	for hk, w := range want {
		if got[hk] != w {
			t.Fatalf("ad %s hour %s: minute rows + late total = %+v, want %+v (restores: %d)", hk.ad, clock(hk.hour), got[hk], w, out.restores)
		}
	}
	for hk, g := range got {
		if _, ok := want[hk]; !ok && g.n != 0 {
			t.Fatalf("ad %s hour %s: got %+v, want nothing", hk.ad, clock(hk.hour), g)
		}
	}
	if n := out.sink.Refused(); n != 0 {
		t.Fatalf("closed-row condition refused %d minute writes, want 0 (a closed minute re-opened)", n)
	}
	return got
}

// TestPropertyExactlyOnce: with crashes, restores (with the floor, maybe
// rescaled) and replays at random points, every (ad, hour) ends with minute
// rows + late total equal to its distinct accepted clicks; no click is
// accepted twice; hour rows equal the sum of their minute rows; no minute
// row exceeds its true count.
func TestPropertyExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := traceGen{stale: true}.draw(t)
		o := drawOptions(t, "")
		out := run(t, tr, o, drawPlan(t, len(tr), true))
		check(t, tr, o, out)
	})
}

// TestPropertyMetamorphic: the same trace (no stale clicks, so acceptance
// does not depend on timing) gives the same per-(ad, hour) totals whatever
// the pre-aggregation interval, batch size, parallelism and crash points.
func TestPropertyMetamorphic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := traceGen{}.draw(t)
		oa, ob := drawOptions(t, "a"), drawOptions(t, "b")
		a := check(t, tr, oa, run(t, tr, oa, drawPlan(t, len(tr), true)))
		b := check(t, tr, ob, run(t, tr, ob, drawPlan(t, len(tr), false)))
		if len(a) != len(b) {
			t.Fatalf("got %d (ad, hour) totals with %+v, %d with %+v", len(a), oa, len(b), ob)
		}
		for k, v := range a {
			if b[k] != v {
				t.Fatalf("ad %s hour %s: %+v with %+v, %+v with %+v", k.ad, clock(k.hour), v, oa, b[k], ob)
			}
		}
	})
}
