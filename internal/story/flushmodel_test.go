package story

import (
	"context"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/adclick/adclick/flush"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

// mapState is restored state as maps, for flush.Decide.
type mapState struct{ late, hour map[Key][2]int64 }

func (m mapState) LateTotal(ad string, h int64) (int64, int64, bool) {
	v, ok := m.late[Key{ad, h, true}]
	return v[0], v[1], ok
}

func (m mapState) HourFast(ad string, h int64) (int64, int64, bool) {
	v, ok := m.hour[Key{ad, h, true}]
	return v[0], v[1], ok
}

// The harness's sink model and the runtime's full flush (flush.Full on a
// row store) leave the same rows after a restore, for any rows and any
// restored state: the harness applies the flush's own rule, so a change of
// the rule, or of how either applies it, that makes them differ fails here.
func TestSinkModelFlushesAsTheFullFlush(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		c := int64(rapid.IntRange(1, 6).Draw(t, "restored"))
		model := newSink()
		rows := sinktest.NewMemRows()
		st := mapState{late: map[Key][2]int64{}, hour: map[Key][2]int64{}}
		high := c
		ads := []string{"ad_a", "ad_b"}
		for i, n := 0, rapid.IntRange(0, 12).Draw(t, "rows"); i < n; i++ {
			ad := rapid.SampledFrom(ads).Draw(t, "ad")
			hourMs := baseMs + int64(rapid.IntRange(0, 1).Draw(t, "hour"))*3_600_000
			v := Value{Valid: int64(rapid.IntRange(1, 9).Draw(t, "valid")), Epoch: int64(rapid.IntRange(0, 9).Draw(t, "epoch"))}
			v.SpendMicros = 10 * v.Valid
			high = max(high, v.Epoch)
			put := sink.Put{Valid: v.Valid, SpendMicros: v.SpendMicros, Epoch: v.Epoch, Gen: 1}
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 0:
				key := Key{ad, hourMs + int64(rapid.IntRange(0, 59).Draw(t, "minute"))*60_000, false}
				model.minutes[key] = v
				put.Key, put.Writer = sink.Key{Entity: ad, Bucket: sink.MinuteBucket(key.StartMs)}, sink.Fast
			case 1:
				key := Key{ad, hourMs, true}
				model.hourFast[key] = v
				put.Key, put.Writer = sink.Key{Entity: ad, Bucket: sink.HourBucket(hourMs)}, sink.Fast
			default:
				key := Key{ad, hourMs, true}
				model.late[key] = v
				put.Key, put.Writer = sink.Key{Entity: ad, Bucket: sink.HourBucket(hourMs)}, sink.Late
			}
			if _, err := rows.Put(ctx, []sink.Put{put}); err != nil {
				t.Fatal(err)
			}
		}
		for _, ad := range ads {
			for h := int64(0); h < 2; h++ {
				key := Key{ad, baseMs + h*3_600_000, true}
				if rapid.Bool().Draw(t, "has late state") {
					st.late[key] = [2]int64{int64(rapid.IntRange(0, 9).Draw(t, "late state")), 7}
				}
				if rapid.Bool().Draw(t, "has hour state") {
					st.hour[key] = [2]int64{int64(rapid.IntRange(0, 9).Draw(t, "hour state")), 3}
				}
			}
		}

		model.flush(c, st, func(func(RowOut)) {})
		if _, err := flush.Full(ctx, rows, nil, st, nil, flush.Options{Restored: c, High: high, Gen: 1, WritesPerSec: math.Inf(1)}); err != nil {
			t.Fatal(err)
		}

		got := newSink()
		err := rows.Scan(ctx, func(it sink.Item) error {
			start, hour, err := sink.ParseBucket(it.Bucket)
			if err != nil {
				return err
			}
			key := Key{it.Entity, start, hour}
			val := func(a sink.Tagged) Value { return Value{a.Valid, a.SpendMicros, a.Ckpt} }
			switch {
			case !hour && it.Fast.Present:
				got.minutes[key] = val(it.Fast)
			case hour:
				if it.Fast.Present {
					got.hourFast[key] = val(it.Fast)
				}
				if it.Late.Present {
					got.late[key] = val(it.Late)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for name, pair := range map[string][2]map[Key]Value{
			"minute rows": {model.minutes, got.minutes}, "hour roll-ups": {model.hourFast, got.hourFast}, "late totals": {model.late, got.late},
		} {
			if len(pair[0]) != len(pair[1]) {
				t.Fatalf("%s: the model holds %v, the flushed store %v", name, pair[0], pair[1])
			}
			for k, v := range pair[0] {
				if pair[1][k] != v {
					t.Fatalf("%s: %+v: the model holds %+v, the flushed store %+v", name, k, v, pair[1][k])
				}
			}
		}
	})
}
