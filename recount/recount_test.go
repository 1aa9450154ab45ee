package recount

import (
	"context"
	"errors"
	"github.com/adclick/adclick/eventtime"
	"slices"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

const h10 int64 = 1_795_946_400_000 // 2026-11-29T10:00Z

func rec(verdict, id, ad string, imp, dev, arr, spend int64) latepath.Record {
	ev := min(max(dev, imp), arr)
	if strings.HasPrefix(verdict, latepath.InvalidPrefix) {
		ev = 0
	}
	return latepath.Record{Verdict: verdict, ClickID: id, AdID: ad, CampaignID: "camp", DeviceID: "dev",
		ImpressionMs: imp, DeviceMs: dev, EventMs: ev, ArrivalMs: arr, SpendMicros: spend, Shard: "S0"}
}

func writeLake(t *testing.T, st Store, epoch int64, rs ...latepath.Record) {
	t.Helper()
	w, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs {
		w.Add(&rs[i])
	}
	if err := w.Flush(context.Background(), epoch); err != nil {
		t.Fatal(err)
	}
}

func adResult(t *testing.T, res []HourResult, hour int64, ad string) AdResult {
	t.Helper()
	for _, r := range res {
		if r.HourMs != hour {
			continue
		}
		for _, a := range r.Ads {
			if a.Ad == ad {
				return a
			}
		}
	}
	t.Fatalf("no result for %s at %s", ad, FormatHour(hour))
	return AdResult{}
}

func TestDuplicatesHorizonAndReconciliation(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	m := int64(60_000)
	writeLake(t, st, 1,
		// ok: counted once; its resend is a duplicate in the same hour.
		rec("counted", "c1", "ad1", h10+5*m, h10+5*m, h10+5*m+800, 100),
		rec("duplicate", "c1", "ad1", h10+5*m, h10+5*m, h10+20*m, 100),
		// A device clock ahead: the first copy's event is its arrival (10:59),
		// the resend's is 11:00:30 — a copy in the next hour, not counted again.
		rec("counted", "c2", "ad1", h10+58*m, h10+90*m, h10+59*m, 200),
		rec("duplicate", "c2", "ad1", h10+58*m, h10+90*m, h10+60*m+30_000, 200),
		// Beyond the horizon for both: impression 3 h before arrival.
		rec("beyond_horizon", "c3", "ad1", h10-2*60*m, h10+10*m, h10+60*m+10*m, 300),
		// At the edge: impression 2 h + 10 s before arrival; the stream's
		// watermark lagged and counted it (late), the batch rejects it → A.
		rec("late", "c4", "ad2", h10+30*m, h10+30*m, h10+30*m+2*60*m+10_000, 400),
		// The stream wrongly called a first copy a duplicate → B.
		rec("duplicate", "c5", "ad2", h10+40*m, h10+40*m, h10+41*m, 500),
		// Invalid: never counted.
		rec("invalid:negative_spend", "c6", "ad2", h10+40*m, h10+40*m, h10+41*m, -5),
		// Valid by its verdict but the stream's own validation rejects it now.
		rec("counted", "c7", "ad2", h10+40*m, h10+40*m, h10+41*m, -7),
	)
	// The rows as the stream wrote them: ad1 fast 2 (c1, c2); ad2 fast 1
	// (c7) + late 1 (c4).
	_, err := rows.Put(ctx, []sink.Put{
		{Key: sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 2, SpendMicros: 300, Epoch: 1, Gen: 1},
		{Key: sink.Key{Entity: "ad2", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 1, SpendMicros: -7, Epoch: 1, Gen: 1},
		{Key: sink.Key{Entity: "ad2", Bucket: sink.HourBucket(h10)}, Writer: sink.Late, Valid: 1, SpendMicros: 400, Epoch: 1, Gen: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10, h10 + eventtime.HourMs}, Gen: 1, NowMs: 7, Watermark: forever, MaxLoggedIDs: 5})
	if err != nil {
		t.Fatal(err)
	}
	a1 := adResult(t, res, h10, "ad1")
	if a1.Final != 2 || a1.FinalSpend != 300 || a1.A != 0 || a1.B != 0 || !a1.Balanced {
		t.Errorf("ad1: got %+v, want final 2 spend 300, A 0, B 0, balanced", a1)
	}
	a2 := adResult(t, res, h10, "ad2")
	want := AdResult{Ad: "ad2", Fast: 1, Late: 1, Final: 1, A: 2, B: 1, FastSpend: -7, LateSpend: 400, FinalSpend: 500,
		ASpend: 393, BSpend: 500, Balanced: true, AIDs: []string{"c4", "c7"}, BIDs: []string{"c5"}}
	if !equalAd(a2, want) {
		t.Errorf("ad2: got %+v, want %+v", a2, want)
	}
	for _, r := range res {
		if r.HourMs == h10+eventtime.HourMs && len(r.Ads) != 0 {
			t.Errorf("hour 11: got ads %+v, want none (c2's copy there is a duplicate)", r.Ads)
		}
	}
	it, _, _ := rows.Get(ctx, sink.Key{Entity: "ad2", Bucket: sink.HourBucket(h10)})
	if it.Final != (sink.FinalAttrs{Present: true, Valid: 1, SpendMicros: 500, Gen: 1, AtMs: 7}) {
		t.Errorf("ad2 final attrs: got %+v", it.Final)
	}
	r0 := res[0]
	if r0.Rows != 8 || r0.Accepted != 3 || r0.Rejected["invalid"] != 2 || r0.Rejected["beyond_horizon"] != 2 || r0.Rejected["duplicate"] != 1 {
		t.Errorf("hour 10 counts: rows %d accepted %d rejected %v; want 8, 3, invalid 2 beyond 2 (c3, c4) duplicate 1", r0.Rows, r0.Accepted, r0.Rejected)
	}
}

func equalAd(a, b AdResult) bool {
	return a.Ad == b.Ad && a.Fast == b.Fast && a.Late == b.Late && a.Final == b.Final && a.A == b.A && a.B == b.B &&
		a.Unexplained == b.Unexplained && a.FastSpend == b.FastSpend && a.LateSpend == b.LateSpend && a.FinalSpend == b.FinalSpend &&
		a.ASpend == b.ASpend && a.BSpend == b.BSpend && a.Balanced == b.Balanced && slices.Equal(a.AIDs, b.AIDs) && slices.Equal(a.BIDs, b.BIDs)
}

func TestUnexplainedWhenRowsLackCountedClicks(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	writeLake(t, st, 3,
		rec("counted", "x1", "ad1", h10+1000, h10+1000, h10+2000, 10),
		rec("counted", "x2", "ad1", h10+1000, h10+1000, h10+2000, 20),
		rec("late", "x3", "ad1", h10+1000, h10+1000, h10+9*60_000, 30),
	)
	// A refused write: the late total never reached the row.
	if _, err := rows.Put(ctx, []sink.Put{{Key: sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}, Writer: sink.Fast, Valid: 2, SpendMicros: 30, Epoch: 3, Gen: 1}}); err != nil {
		t.Fatal(err)
	}
	res, err := Reconcile(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: 1, Watermark: forever})
	if err != nil {
		t.Fatal(err)
	}
	a := adResult(t, res, h10, "ad1")
	if a.Final != 3 || a.A != 0 || a.B != 0 || a.Unexplained != 1 || a.UnexplainedSpend != 30 || a.Balanced || res[0].Balanced {
		t.Errorf("got %+v, want final 3, A 0, B 0, unexplained 1 (spend 30), not balanced", a)
	}
	if res[0].Status != "checked" {
		t.Errorf("status %q, want checked", res[0].Status)
	}
	if got := finals(t, rows); len(got) != 0 {
		t.Errorf("reconcile wrote finals %v, want none", got)
	}
}

func TestNotFinalRefusedUnlessForced(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	writeLake(t, st, 1, rec("counted", "x1", "ad1", h10+1000, h10+1000, h10+2000, 10))
	putFast(t, rows, "ad1", h10, 1, 10)
	ready := h10 + eventtime.HourMs + 2*eventtime.HourMs + 600_000
	wm := func(context.Context) (int64, error) { return ready - 1, nil }
	res, err := Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: 1, Watermark: wm})
	var nf *NotFinalError
	if !errors.As(err, &nf) {
		t.Fatalf("got error %v, want a NotFinalError", err)
	}
	for _, s := range []string{"2026-11-29T10Z is not final yet", "2026-11-29T13:10:00Z", "--force"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %q", err, s)
		}
	}
	if len(res) != 1 || res[0].Status != "not_final" {
		t.Errorf("results %+v, want one not_final", res)
	}
	if got := finals(t, rows); len(got) != 0 {
		t.Errorf("refused recount wrote %v", got)
	}
	if _, err := Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: 1, Watermark: func(context.Context) (int64, error) { return ready, nil }}); err != nil {
		t.Errorf("at the ready watermark: %v, want success", err)
	}
	res, err = Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: 2, Watermark: wm, Force: true})
	if err != nil || !res[0].Forced || res[0].Status != "final" {
		t.Errorf("forced: %+v, %v; want final, forced", res, err)
	}
}

func TestNewerGenWinsOlderRefused(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	rows := sinktest.NewMemRows()
	writeLake(t, st, 1, rec("counted", "x1", "ad1", h10+1000, h10+1000, h10+2000, 10))
	putFast(t, rows, "ad1", h10, 1, 10)
	k := sink.Key{Entity: "ad1", Bucket: sink.HourBucket(h10)}
	run := func(gen, now int64) error {
		_, err := Run(ctx, Options{Store: st, Rows: rows, Hours: []int64{h10}, Gen: gen, NowMs: now, Watermark: forever})
		return err
	}
	if err := run(5, 100); err != nil {
		t.Fatal(err)
	}
	if err := run(4, 200); !errors.Is(err, ErrRefused) {
		t.Errorf("older gen: got %v, want ErrRefused", err)
	}
	it, _, _ := rows.Get(ctx, k)
	if it.Final.Gen != 5 || it.Final.AtMs != 100 {
		t.Errorf("after older gen: final %+v, want gen 5 at 100", it.Final)
	}
	if err := run(6, 300); err != nil {
		t.Fatal(err)
	}
	it, _, _ = rows.Get(ctx, k)
	if it.Final.Gen != 6 || it.Final.AtMs != 300 || it.Final.Valid != 1 {
		t.Errorf("after newer gen: final %+v, want gen 6 at 300 valid 1", it.Final)
	}
}

// A crash-restart: epochs ≥ c are removed and replayed; the finals equal
// those of a run without the crash.
func TestRecountAfterCrashRestartEqualsNoCrash(t *testing.T) {
	lines := genLines(t, 12_000, 3, 6)
	ref := reference(t, lines)
	ctx := context.Background()

	clean := newMemStore()
	simulateStream(t, clean, lines, 1000, 1)
	cleanRows := sinktest.NewMemRows()
	if _, err := Run(ctx, Options{Store: clean, Rows: cleanRows, Hours: refHours(t, ref), Gen: 1, Watermark: forever, AcceptUnbalanced: lakeOnly}); err != nil {
		t.Fatal(err)
	}

	crashed := newMemStore()
	// The crashed run got to epoch 9 (lines up to 9000, epochs 1..9 flushed)
	// and wrote further partial epochs 10 and 11 (as a run that passed more
	// barriers would), then died; checkpoint 7 is restored.
	simulateStream(t, crashed, lines[:11_500], 1000, 1)
	const c = 7
	before := crashed.keys()
	n, err := RemoveEpochs(ctx, crashed, c)
	if err != nil {
		t.Fatal(err)
	}
	var wantLeft []string
	removed := 0
	for _, k := range before {
		if e, ok := objectEpoch(k); ok && e >= c {
			removed++
			continue
		}
		if e, ok := manifestEpoch(manifestRoot, k); ok && e >= c {
			continue
		}
		wantLeft = append(wantLeft, k)
	}
	if n != removed || removed == 0 {
		t.Errorf("RemoveEpochs removed %d objects, want %d (> 0)", n, removed)
	}
	if got := crashed.keys(); !slices.Equal(got, wantLeft) {
		t.Errorf("after RemoveEpochs(%d): keys\n%v\nwant\n%v", c, got, wantLeft)
	}
	// The restored run replays from the start of epoch 7 (line 6000). Its
	// verdicts come from a pre-aggregator restored with the dedup state of
	// lines before 6000: replay those first without a lake.
	simulateReplay(t, crashed, lines, 6000, 1000, c)
	crashedRows := sinktest.NewMemRows()
	if _, err := Run(ctx, Options{Store: crashed, Rows: crashedRows, Hours: refHours(t, ref), Gen: 1, Watermark: forever, AcceptUnbalanced: lakeOnly}); err != nil {
		t.Fatal(err)
	}
	compareFinals(t, finals(t, crashedRows), finals(t, cleanRows))
	compareFinals(t, finals(t, crashedRows), ref)
}

// simulateReplay writes lines[from:] to st in epochs of epochLen starting
// at epoch, after restoring the stream's state by running lines[:from]
// into a throwaway store.
func simulateReplay(t *testing.T, st Store, lines [][]byte, from, epochLen int, epoch int64) {
	t.Helper()
	// The verdicts only depend on the state, which the restored checkpoint
	// holds; a single run over all lines into a scratch store gives the
	// same verdicts for lines[from:], which are then copied over.
	scratch := newMemStore()
	simulateStream(t, scratch, lines, epochLen, 1)
	for _, k := range scratch.keys() {
		e, ok := objectEpoch(k)
		if !ok {
			e, ok = manifestEpoch(manifestRoot, k)
		}
		if ok && e >= epoch {
			b, _ := scratch.Get(context.Background(), k)
			if err := st.Put(context.Background(), k, b); err != nil {
				t.Fatal(err)
			}
		}
	}
}
