package flush

import (
	"testing"

	"github.com/adclick/adclick/sink"
)

// tag returns a present tagged group written at epoch ckpt by gen.
func tag(valid, ckpt, gen int64, k sink.Key) sink.Tagged {
	return sink.Tagged{Present: true, Valid: valid, Ckpt: ckpt, Ix: sink.IndexKey(ckpt, k), Gen: gen}
}

func TestDecide(t *testing.T) {
	m14 := sink.Key{Entity: "ad_7", Bucket: minute("10:14")}
	h10 := sink.Key{Entity: "ad_7", Bucket: hour("10")}
	bad := sink.Key{Entity: "ad_7", Bucket: "X10"}
	final := sink.FinalAttrs{Present: true, Valid: 12, Gen: 7}

	st := newRestored()
	st.late[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{1, 250_000}
	empty := newRestored()
	rolled := newRestored() // holds hour 10's roll-up: 9 clicks closed by c
	rolled.hours[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{9, 900_000}

	tests := []struct {
		name string
		it   sink.Item
		w    sink.Writer
		st   State
		want Action
	}{
		{"minute tagged c is deleted",
			sink.Item{Key: m14, Fast: tag(5, 41, 7, m14)}, sink.Fast, empty,
			Action{Kind: DeleteItem, Writer: sink.Fast, Ckpt: 41}},
		{"minute tagged above c is deleted",
			sink.Item{Key: m14, Fast: tag(5, 43, 7, m14)}, sink.Fast, empty,
			Action{Kind: DeleteItem, Writer: sink.Fast, Ckpt: 43}},
		{"minute tagged below c is kept",
			sink.Item{Key: m14, Fast: tag(6, 39, 7, m14)}, sink.Fast, empty,
			Action{Kind: Keep, Writer: sink.Fast, Ckpt: 39}},
		{"minute tagged c-1 is kept",
			sink.Item{Key: m14, Fast: tag(6, 40, 7, m14)}, sink.Fast, empty,
			Action{Kind: Keep, Writer: sink.Fast, Ckpt: 40}},
		{"minute without fast attributes is kept",
			sink.Item{Key: m14}, sink.Fast, empty,
			Action{Kind: Keep, Writer: sink.Fast}},
		{"minute carrying late attributes loses only fast",
			sink.Item{Key: m14, Fast: tag(5, 41, 7, m14), Late: tag(1, 30, 7, m14)}, sink.Fast, empty,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"minute carrying final attributes loses only fast",
			sink.Item{Key: m14, Fast: tag(5, 41, 7, m14), Final: final}, sink.Fast, empty,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"late on a minute item is removed",
			sink.Item{Key: m14, Late: tag(1, 41, 7, m14)}, sink.Late, st,
			Action{Kind: RemoveAttrs, Writer: sink.Late, Ckpt: 41}},
		{"hour late tagged c, state lacks it: removed",
			sink.Item{Key: h10, Late: tag(1, 41, 7, h10)}, sink.Late, empty,
			Action{Kind: RemoveAttrs, Writer: sink.Late, Ckpt: 41}},
		{"hour late tagged c, nil state: removed",
			sink.Item{Key: h10, Late: tag(1, 41, 7, h10)}, sink.Late, nil,
			Action{Kind: RemoveAttrs, Writer: sink.Late, Ckpt: 41}},
		{"hour late tagged c, state holds it: rewritten with tag c",
			sink.Item{Key: h10, Late: tag(2, 41, 7, h10)}, sink.Late, st,
			Action{Kind: RewriteLate, Writer: sink.Late, Ckpt: 41, Valid: 1, SpendMicros: 250_000, Epoch: 41}},
		{"hour late tagged above c, state holds it: rewritten with tag c",
			sink.Item{Key: h10, Late: tag(3, 42, 7, h10)}, sink.Late, st,
			Action{Kind: RewriteLate, Writer: sink.Late, Ckpt: 42, Valid: 1, SpendMicros: 250_000, Epoch: 41}},
		{"hour late tagged below c is kept even if state holds it",
			sink.Item{Key: h10, Late: tag(3, 40, 7, h10)}, sink.Late, st,
			Action{Kind: Keep, Writer: sink.Late, Ckpt: 40}},
		{"hour late of another ad than state's: removed",
			sink.Item{Key: sink.Key{Entity: "ad_9", Bucket: hour("10")}, Late: tag(1, 41, 7, h10)}, sink.Late, st,
			Action{Kind: RemoveAttrs, Writer: sink.Late, Ckpt: 41}},
		{"hour late of another hour than state's: removed",
			sink.Item{Key: sink.Key{Entity: "ad_7", Bucket: hour("11")}, Late: tag(1, 41, 7, h10)}, sink.Late, st,
			Action{Kind: RemoveAttrs, Writer: sink.Late, Ckpt: 41}},
		{"hour fast tagged c, state holds no closed minute of it: removed, never deleted",
			sink.Item{Key: h10, Fast: tag(11, 41, 7, h10)}, sink.Fast, st,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"hour fast tagged c, state holds its roll-up: rewritten with tag c",
			sink.Item{Key: h10, Fast: tag(11, 41, 7, h10)}, sink.Fast, rolled,
			Action{Kind: RewriteFast, Writer: sink.Fast, Ckpt: 41, Valid: 9, SpendMicros: 900_000, Epoch: 41}},
		{"hour fast tagged above c with late and final, state holds its roll-up: rewritten",
			sink.Item{Key: h10, Fast: tag(11, 43, 7, h10), Late: tag(1, 41, 7, h10), Final: final}, sink.Fast, rolled,
			Action{Kind: RewriteFast, Writer: sink.Fast, Ckpt: 43, Valid: 9, SpendMicros: 900_000, Epoch: 41}},
		{"hour fast tagged below c is kept even if state holds its roll-up",
			sink.Item{Key: h10, Fast: tag(11, 40, 7, h10)}, sink.Fast, rolled,
			Action{Kind: Keep, Writer: sink.Fast, Ckpt: 40}},
		{"hour fast of another ad than state's roll-up: removed",
			sink.Item{Key: sink.Key{Entity: "ad_9", Bucket: hour("10")}, Fast: tag(1, 41, 7, h10)}, sink.Fast, rolled,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"hour fast tagged c with late and final: removed",
			sink.Item{Key: h10, Fast: tag(11, 41, 7, h10), Late: tag(1, 41, 7, h10), Final: final}, sink.Fast, st,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"hour fast tagged below c is kept",
			sink.Item{Key: h10, Fast: tag(11, 12, 7, h10)}, sink.Fast, st,
			Action{Kind: Keep, Writer: sink.Fast, Ckpt: 12}},
		{"unparsable bucket tagged c: removed, not deleted",
			sink.Item{Key: bad, Fast: tag(1, 41, 7, bad)}, sink.Fast, empty,
			Action{Kind: RemoveAttrs, Writer: sink.Fast, Ckpt: 41}},
		{"final writer is never touched",
			sink.Item{Key: h10, Final: final}, sink.Final, st,
			Action{Kind: Keep, Writer: sink.Final}},
		{"unknown writer is never touched",
			sink.Item{Key: h10, Fast: tag(1, 41, 7, h10)}, sink.Writer(9), st,
			Action{Kind: Keep, Writer: sink.Writer(9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.it, tt.w, 41, tt.st)
			if got != tt.want {
				t.Errorf("Decide: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDecideSeed001 runs Decide over the sink as run 1 left it before the
// crash (seed 001, snapshot W3), restoring c41.
func TestDecideSeed001(t *testing.T) {
	k := func(ad, b string) sink.Key { return sink.Key{Entity: ad, Bucket: b} }
	m13, m14a, m14b := k("ad_7", minute("10:13")), k("ad_7", minute("10:14")), k("ad_9", minute("10:14"))
	h7, h9 := k("ad_7", hour("10")), k("ad_9", hour("10"))
	type probe struct {
		it sink.Item
		w  sink.Writer
	}
	probes := []probe{
		{sink.Item{Key: m13, Fast: tag(6, 39, 7, m13)}, sink.Fast},
		{sink.Item{Key: m14a, Fast: tag(5, 41, 7, m14a)}, sink.Fast},
		{sink.Item{Key: m14b, Fast: tag(2, 41, 7, m14b)}, sink.Fast},
		{sink.Item{Key: h7, Late: tag(1, 41, 7, h7)}, sink.Late},
		{sink.Item{Key: h9, Late: tag(1, 41, 7, h9)}, sink.Late},
	}
	t.Run("state holds no late totals", func(t *testing.T) {
		want := []ActionKind{Keep, DeleteItem, DeleteItem, RemoveAttrs, RemoveAttrs}
		for i, p := range probes {
			if got := Decide(p.it, p.w, 41, newRestored()).Kind; got != want[i] {
				t.Errorf("%s/%s: got %v, want %v", p.it.Entity, shortBucket(p.it.Bucket), got, want[i])
			}
		}
	})
	t.Run("state holds ad_7's late total", func(t *testing.T) {
		st := newRestored()
		st.late[lateKey{"ad_7", startOf(t, hour("10"))}] = [2]int64{1, 0}
		want := []ActionKind{Keep, DeleteItem, DeleteItem, RewriteLate, RemoveAttrs}
		for i, p := range probes {
			got := Decide(p.it, p.w, 41, st)
			if got.Kind != want[i] {
				t.Errorf("%s/%s: got %v, want %v", p.it.Entity, shortBucket(p.it.Bucket), got.Kind, want[i])
			}
			if got.Kind == RewriteLate && (got.Epoch != 41 || got.Valid != 1) {
				t.Errorf("rewrite: got epoch %d valid %d, want epoch 41 valid 1", got.Epoch, got.Valid)
			}
		}
	})
}

func TestSweepDecide(t *testing.T) {
	m := sink.Key{Entity: "ad_3", Bucket: minute("10:21")}
	h := sink.Key{Entity: "ad_7", Bucket: hour("10")}
	tests := []struct {
		name string
		it   sink.Item
		w    sink.Writer
		want ActionKind
	}{
		{"old gen minute after savepoint: deleted", sink.Item{Key: m, Fast: tag(1, 52, 7, m)}, sink.Fast, DeleteItem},
		{"old gen minute at savepoint: deleted", sink.Item{Key: m, Fast: tag(1, 51, 7, m)}, sink.Fast, DeleteItem},
		{"old gen minute before savepoint: kept", sink.Item{Key: m, Fast: tag(1, 50, 7, m)}, sink.Fast, Keep},
		{"new gen minute: kept", sink.Item{Key: m, Fast: tag(1, 52, 8, m)}, sink.Fast, Keep},
		{"older gen minute: kept", sink.Item{Key: m, Fast: tag(1, 52, 6, m)}, sink.Fast, Keep},
		{"old gen minute with late attributes: only fast removed",
			sink.Item{Key: m, Fast: tag(1, 52, 7, m), Late: tag(1, 52, 8, m)}, sink.Fast, RemoveAttrs},
		{"old gen late under new gen fast: late removed",
			sink.Item{Key: h, Fast: tag(9, 53, 8, h), Late: tag(1, 52, 7, h), JobGen: 8, HasJobGen: true}, sink.Late, RemoveAttrs},
		{"new gen fast over old gen late: fast kept",
			sink.Item{Key: h, Fast: tag(9, 53, 8, h), Late: tag(1, 52, 7, h), JobGen: 8, HasJobGen: true}, sink.Fast, Keep},
		{"old gen hour fast: removed", sink.Item{Key: h, Fast: tag(9, 53, 7, h)}, sink.Fast, RemoveAttrs},
		{"absent: kept", sink.Item{Key: h}, sink.Late, Keep},
		{"final: kept", sink.Item{Key: h, Final: sink.FinalAttrs{Present: true, Gen: 7}}, sink.Final, Keep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SweepDecide(tt.it, tt.w, 7, 51).Kind; got != tt.want {
				t.Errorf("SweepDecide: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestActionKindString(t *testing.T) {
	for k, want := range map[ActionKind]string{
		Keep: "keep", DeleteItem: "delete-item", RemoveAttrs: "remove-attrs", RewriteLate: "rewrite-late", 9: "action(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("ActionKind(%d).String(): got %q, want %q", k, got, want)
		}
	}
}
