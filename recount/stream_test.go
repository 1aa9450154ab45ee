package recount

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/adclick/adclick/eventtime"
	"testing"
	"time"

	"github.com/adclick/adclick/ingest"
	"github.com/adclick/adclick/latepath"
	"github.com/adclick/adclick/preagg"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// genLines returns the lines of a generated trace with late, duplicate,
// invalid, clock-skewed and idle-shard traffic (as the end-to-end tests'
// trace: heavy-tail delays under the horizon).
func genLines(t testing.TB, clicks int64, seed uint64, rate float64) [][]byte {
	t.Helper()
	g := ingest.NewGen(ingest.GenOptions{Clicks: clicks, Rate: rate, Ads: 40, Shards: 3, TailFraction: 0.05,
		TailMaxMs: 5_400_000, DupFraction: 0.03, InvalidFraction: 0.01, SkewFraction: 0.01, IdleEveryMs: 80_000, Seed: seed})
	var out [][]byte
	for {
		l, _, ok := g.Next(nil)
		if !ok {
			return out
		}
		out = append(out, l)
	}
}

// streamResult is what the simulated stream left: the lake (through
// Writers) and the rows (fast and late totals per (ad, hour)).
type streamResult struct {
	fast, late map[sink.Key][2]int64
	lastWM     int64
	epochs     int64
}

// simulateStream drives the real pre-aggregator over lines as the runtime
// does (decode, FinishLine, per-shard watermarks ticked every 200 ms of
// arrival time, verdicts), writing every click with its verdict to a lake
// Writer, flushed every epochLen records as at a barrier. It counts fast and
// late per (ad, hour) from the verdicts, as the windows and the late path
// would.
func simulateStream(t testing.TB, st Store, lines [][]byte, epochLen int, firstEpoch int64) streamResult {
	t.Helper()
	ctx := context.Background()
	pa, err := preagg.New(preagg.Options{}, preagg.NewMemDedup(), 0, 128)
	if err != nil {
		t.Fatal(err)
	}
	wms := ingest.NewWatermarks(ingest.WatermarkOptions{AllowanceMs: 5000, IntervalMs: 200, IdleMs: 30_000})
	src, err := NewWriter(st, "source")
	if err != nil {
		t.Fatal(err)
	}
	pre, err := NewWriter(st, "preagg-0")
	if err != nil {
		t.Fatal(err)
	}
	res := streamResult{fast: map[sink.Key][2]int64{}, late: map[sink.Key][2]int64{}}
	epoch := firstEpoch
	n := 0
	var c ingest.Click
	for _, l := range lines {
		reason := ingest.Decode(l, &c)
		if reason == "" {
			reason = c.FinishLine()
		}
		if c.HasArrival && c.ArrivalMs > 0 {
			for wms.NextTickMs() <= c.ArrivalMs {
				wm, _ := wms.Tick(wms.NextTickMs())
				if _, err := pa.Watermark(wm); err != nil {
					t.Fatal(err)
				}
				res.lastWM = max(res.lastWM, wm)
			}
		}
		if reason != "" {
			r := latepath.Record{Verdict: latepath.InvalidPrefix + string(reason), ClickID: c.ClickID, AdID: c.AdID,
				CampaignID: c.CampaignID, DeviceID: c.DeviceID, ImpressionMs: c.ImpressionMs, DeviceMs: c.DeviceMs,
				ArrivalMs: c.ArrivalMs, SpendMicros: c.SpendMicros, Shard: c.Shard}
			if reason == ingest.ReasonMalformedJSON || reason == ingest.ReasonNotObject {
				r.Raw = string(l)
			}
			src.Add(&r)
		} else {
			wms.Observe(c.Shard, c.EventMs, c.ArrivalMs)
			v, err := pa.Add(&c, 0)
			if err != nil {
				t.Fatal(err)
			}
			k := sink.Key{Entity: c.AdID, Bucket: sink.HourBucket(c.EventMs - floorMod(c.EventMs, eventtime.HourMs))}
			switch v {
			case preagg.Counted:
				res.fast[k] = [2]int64{res.fast[k][0] + 1, res.fast[k][1] + c.SpendMicros}
			case preagg.Late:
				res.late[k] = [2]int64{res.late[k][0] + 1, res.late[k][1] + c.SpendMicros}
			}
			r := latepath.Record{Verdict: v.String(), ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID, DeviceID: c.DeviceID,
				ImpressionMs: c.ImpressionMs, DeviceMs: c.DeviceMs, EventMs: c.EventMs, ArrivalMs: c.ArrivalMs,
				SpendMicros: c.SpendMicros, Shard: c.Shard}
			pre.Add(&r)
		}
		n++
		if n%epochLen == 0 {
			for _, w := range []*Writer{src, pre} {
				if err := w.Flush(ctx, epoch); err != nil {
					t.Fatal(err)
				}
			}
			epoch++
		}
	}
	for _, w := range []*Writer{src, pre} {
		if err := w.Flush(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	res.epochs = epoch
	return res
}

// putRows writes the stream's fast and late totals as hour rows.
func putRows(t testing.TB, rows sink.Rows, res streamResult) {
	t.Helper()
	var puts []sink.Put
	for k, v := range res.fast {
		puts = append(puts, sink.Put{Key: k, Writer: sink.Fast, Valid: v[0], SpendMicros: v[1], Epoch: 1, Gen: 1})
	}
	for k, v := range res.late {
		puts = append(puts, sink.Put{Key: k, Writer: sink.Late, Valid: v[0], SpendMicros: v[1], Epoch: 1, Gen: 1})
	}
	if _, err := rows.Put(context.Background(), puts); err != nil {
		t.Fatal(err)
	}
}

// reference counts lines independently of the job's code, as the
// end-to-end tests do: each valid click id once (its first valid copy in
// file order), by ad and hour of its clamped event time.
func reference(t testing.TB, lines [][]byte) map[sink.Key][2]int64 {
	t.Helper()
	ref := map[sink.Key][2]int64{}
	seen := map[string]bool{}
	for _, l := range lines {
		var c struct {
			ClickID, AdID, CampaignID, DeviceID, Shard *string
			Imp                                        *int64 `json:"impression_ms"`
			Dev                                        *int64 `json:"device_ms"`
			Spend                                      *int64 `json:"spend_micros"`
			Arr                                        *int64 `json:"arrival_ms"`
		}
		if err := json.Unmarshal(l, &struct {
			ClickID    **string `json:"click_id"`
			AdID       **string `json:"ad_id"`
			CampaignID **string `json:"campaign_id"`
			DeviceID   **string `json:"device_id"`
			Shard      **string `json:"shard"`
			Imp        **int64  `json:"impression_ms"`
			Dev        **int64  `json:"device_ms"`
			Spend      **int64  `json:"spend_micros"`
			Arr        **int64  `json:"arrival_ms"`
		}{&c.ClickID, &c.AdID, &c.CampaignID, &c.DeviceID, &c.Shard, &c.Imp, &c.Dev, &c.Spend, &c.Arr}); err != nil {
			continue
		}
		if c.ClickID == nil || *c.ClickID == "" || c.AdID == nil || *c.AdID == "" || c.CampaignID == nil || *c.CampaignID == "" ||
			c.DeviceID == nil || *c.DeviceID == "" || c.Shard == nil || *c.Shard == "" || c.Imp == nil || c.Dev == nil ||
			c.Spend == nil || c.Arr == nil || *c.Spend < 0 || *c.Imp <= 0 || *c.Arr <= 0 || *c.Imp > *c.Arr {
			continue
		}
		if seen[*c.ClickID] {
			continue
		}
		seen[*c.ClickID] = true
		ev := min(max(*c.Dev, *c.Imp), *c.Arr)
		k := sink.Key{Entity: *c.AdID, Bucket: time.UnixMilli(ev).UTC().Format("H2006-01-02T15Z")}
		ref[k] = [2]int64{ref[k][0] + 1, ref[k][1] + *c.Spend}
	}
	return ref
}

// lakeHours returns the hours of the reference.
func refHours(t testing.TB, ref map[sink.Key][2]int64) []int64 {
	t.Helper()
	set := map[int64]bool{}
	for k := range ref {
		h, _, err := sink.ParseBucket(k.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		set[h] = true
	}
	var hs []int64
	for h := range set {
		hs = append(hs, h)
	}
	return hs
}

// finals returns every final_* of rows.
func finals(t testing.TB, rows sink.Rows) map[sink.Key][2]int64 {
	t.Helper()
	out := map[sink.Key][2]int64{}
	err := rows.Scan(context.Background(), func(it sink.Item) error {
		if it.Final.Present {
			out[it.Key] = [2]int64{it.Final.Valid, it.Final.SpendMicros}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareFinals checks finals against the reference, exactly; keys with a
// zero final must be absent from the reference.
func compareFinals(t testing.TB, got, want map[sink.Key][2]int64) {
	t.Helper()
	for k, w := range want {
		if g := got[k]; g != w {
			t.Errorf("%s/%s: final (valid, spend) = %v, want %v", k.Entity, k.Bucket, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g != [2]int64{} {
			t.Errorf("%s/%s: final %v, want none", k.Entity, k.Bucket, g)
		}
	}
}

func forever(context.Context) (int64, error) { return 1 << 62, nil }

func TestRecountGeneratedTraceEqualsReference(t *testing.T) {
	for _, seed := range []uint64{1, 7} {
		lines := genLines(t, 40_000, seed, 6)
		ref := reference(t, lines)
		st := newMemStore()
		rows := sinktest.NewMemRows()
		res := simulateStream(t, st, lines, 5000, 1)
		putRows(t, rows, res)
		results, err := Run(context.Background(), Options{Store: st, Rows: rows, Hours: refHours(t, ref), Gen: 1, NowMs: 42, Watermark: forever})
		if err != nil {
			t.Fatal(err)
		}
		compareFinals(t, finals(t, rows), ref)
		var total int64
		for _, r := range results {
			if !r.Balanced {
				t.Errorf("seed %d hour %s: not balanced", seed, r.Hour)
			}
			for _, a := range r.Ads {
				if a.Final != a.Fast+a.Late-a.A+a.B {
					t.Errorf("seed %d %s/%s: final %d != fast %d + late %d - A %d + B %d", seed, r.Hour, a.Ad, a.Final, a.Fast, a.Late, a.A, a.B)
				}
				total += a.Final
			}
		}
		var want int64
		for _, v := range ref {
			want += v[0]
		}
		if total != want || want == 0 {
			t.Errorf("seed %d: total final %d, want %d (> 0)", seed, total, want)
		}
		// The trace must exercise what it claims to.
		var late, dups, invalid int64
		err = ReadHourAll(t, st, func(r *Row) {
			switch {
			case r.Verdict == latepath.VerdictLate:
				late++
			case r.Verdict == latepath.VerdictDuplicate:
				dups++
			case bytes.HasPrefix([]byte(r.Verdict), []byte(latepath.InvalidPrefix)):
				invalid++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if late == 0 || dups == 0 || invalid == 0 {
			t.Errorf("seed %d: trace has late %d, duplicates %d, invalid %d; want all > 0", seed, late, dups, invalid)
		}
	}
}

// ReadHourAll reads every hour partition of st.
func ReadHourAll(t testing.TB, st Store, fn func(*Row)) error {
	t.Helper()
	return Hours(context.Background(), st, 0, func(h int64) error {
		return ReadHour(context.Background(), st, h, func(r *Row) error { fn(r); return nil })
	})
}
