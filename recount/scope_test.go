package recount

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
)

// Range pipelines share the lake and number their epochs independently: a
// restore of one range removes its own epochs ≥ c and nothing of another
// range's, nor of the unscoped writers; the hour's reader sees all of them.
func TestScopedWritersRemoveOnlyTheirEpochs(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	const h10 = 1_795_946_400_000 // 2026-11-29T10:00Z
	write := func(scope, part, prefix string, epochs ...int64) {
		t.Helper()
		w, err := NewScopedWriter(st, scope, part)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range epochs {
			for i := range 3 {
				id := prefix + "-e" + strconv.FormatInt(e, 10) + "-" + strconv.Itoa(i)
				w.Add(&latepath.Record{Verdict: latepath.VerdictCounted, ClickID: id, AdID: prefix, CampaignID: "k",
					DeviceID: "d", ImpressionMs: h10, DeviceMs: h10 + e, EventMs: h10 + e, ArrivalMs: h10 + e + 5, Shard: "S1"})
			}
			if err := w.Flush(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("kg0-16", "preagg-0", "a", 1, 2, 3)
	write("kg16-32", "preagg-0", "b", 1, 2, 3)
	write("", "preagg-0", "u", 1, 2, 3)

	for _, k := range st.keys() {
		if strings.HasPrefix(k, "hour=") && !strings.Contains(k, "part-kg0-16-preagg-0-") &&
			!strings.Contains(k, "part-kg16-32-preagg-0-") && !strings.Contains(k, "part-preagg-0-") {
			t.Errorf("unexpected object name %s", k)
		}
	}
	n, err := RemoveEpochsIn(ctx, st, "kg0-16", 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("RemoveEpochsIn(kg0-16, 2) removed %d objects, want 2 (epochs 2 and 3 of one hour)", n)
	}
	var ids []string
	if err := ReadHour(ctx, st, h10, func(r *Row) error { ids = append(ids, r.ClickID); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	var want []string
	for _, p := range []string{"a", "b", "u"} {
		for e := 1; e <= 3; e++ {
			if p == "a" && e >= 2 {
				continue
			}
			for i := range 3 {
				want = append(want, p+"-e"+strconv.Itoa(e)+"-"+strconv.Itoa(i))
			}
		}
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("after removing kg0-16's epochs ≥ 2 the hour holds\n%v\nwant\n%v", ids, want)
	}
	// The unscoped removal (a job owning every key group) leaves the
	// ranges' objects alone too.
	if n, err := RemoveEpochs(ctx, st, 1); err != nil || n != 3 {
		t.Errorf("RemoveEpochs(1) = %d, %v; want the unscoped writer's 3 objects", n, err)
	}
	for _, k := range st.keys() {
		if strings.Contains(k, "part-kg16-32-") {
			return
		}
	}
	t.Error("the unscoped removal removed range kg16-32's objects")
}

func TestNewScopedWriterRefusesBadNames(t *testing.T) {
	for _, sc := range []string{"kg0/16", "a b", strings.Repeat("k", 70)} {
		if _, err := NewScopedWriter(newMemStore(), sc, "preagg-0"); err == nil {
			t.Errorf("NewScopedWriter(%q): no error", sc)
		}
	}
}

// A fence sweep removes a predecessor's epochs [from, to] of its scope and
// keeps the holder's own, above them, and every other scope's.
func TestRemoveEpochsBetweenKeepsLaterEpochs(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	const h10 = 1_795_946_400_000 // 2026-11-29T10:00Z
	write := func(scope, prefix string, epochs ...int64) {
		t.Helper()
		w, err := NewScopedWriter(st, scope, "preagg-0")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range epochs {
			id := prefix + "-e" + strconv.FormatInt(e, 10)
			w.Add(&latepath.Record{Verdict: latepath.VerdictCounted, ClickID: id, AdID: prefix, CampaignID: "k",
				DeviceID: "d", ImpressionMs: h10, DeviceMs: h10 + e, EventMs: h10 + e, ArrivalMs: h10 + e + 5, Shard: "S1"})
			if err := w.Flush(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("kg0-16", "a", 1, 2, 3, 4, 5)
	write("kg16-32", "b", 2, 3)
	n, err := RemoveEpochsBetween(ctx, st, "kg0-16", 2, 3)
	if err != nil || n != 2 {
		t.Fatalf("RemoveEpochsBetween(kg0-16, 2, 3) = %d, %v; want 2 objects removed", n, err)
	}
	var ids []string
	if err := ReadHour(ctx, st, h10, func(r *Row) error { ids = append(ids, r.ClickID); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{"a-e1", "a-e4", "a-e5", "b-e2", "b-e3"}; !slices.Equal(ids, want) {
		t.Errorf("after removing kg0-16's epochs 2-3 the hour holds %v, want %v", ids, want)
	}
}
