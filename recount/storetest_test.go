package recount

import (
	"context"
	"errors"
	"github.com/adclick/adclick/eventtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adclick/adclick/latepath"
)

// testStore is the conformance test every Store passes. With strictOrder
// false, the order of keys within a listing is not checked where '/' and
// a lower byte ('-', '.') meet: S3 lists in byte order, but the local S3
// stand-in lists in its file system's order. The lake relies on the order
// only between hour partitions (whose keys all have the same shape).
func testStore(t *testing.T, st Store, strictOrder bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Get(ctx, "hour=2026-11-29T10/none.parquet"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get of an absent key: got %v, want ErrNotFound", err)
	}
	keys := []string{"a-b", "a.b", "a/x", "a/y/z", "a0", "hour=2026-11-29T10/p-e1.parquet", "hour=2026-11-29T11/p-e1.parquet", "_epochs/e000000000001/p"}
	for i, k := range keys {
		if err := st.Put(ctx, k, []byte{byte(i), 'v'}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	if err := st.Put(ctx, "a/x", []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, err := st.Get(ctx, "a/x")
	if err != nil || string(b) != "new" {
		t.Errorf("get a/x after overwrite: %q, %v; want \"new\"", b, err)
	}
	if err := st.Put(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Get(ctx, "empty"); err != nil || len(b) != 0 {
		t.Errorf("get empty: %q, %v; want empty", b, err)
	}
	list := func(prefix, after string, stopAt int) []string {
		var got []string
		err := st.List(ctx, prefix, after, func(k string) error {
			got = append(got, k)
			if len(got) == stopAt {
				return ErrStopList
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list %q after %q: %v", prefix, after, err)
		}
		return got
	}
	all := append(slices.Clone(keys), "empty")
	slices.Sort(all)
	for _, tc := range []struct {
		prefix, after string
		stop          int
		want          []string
	}{
		{"", "", 0, all},
		{"a", "", 0, []string{"a-b", "a.b", "a/x", "a/y/z", "a0"}},
		{"a/", "", 0, []string{"a/x", "a/y/z"}},
		{"a/y", "", 0, []string{"a/y/z"}},
		{"a", "a.b", 0, []string{"a/x", "a/y/z", "a0"}},
		{"a", "a/x", 0, []string{"a/y/z", "a0"}},
		{"hour=", "hour=2026-11-29T10", 0, []string{"hour=2026-11-29T10/p-e1.parquet", "hour=2026-11-29T11/p-e1.parquet"}},
		{"hour=", "hour=2026-11-29T10/~", 0, []string{"hour=2026-11-29T11/p-e1.parquet"}},
		{"hour=", "", 1, []string{"hour=2026-11-29T10/p-e1.parquet"}},
		{"zzz", "", 0, nil},
	} {
		got := list(tc.prefix, tc.after, tc.stop)
		if !strictOrder && tc.stop == 0 {
			slices.Sort(got)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("list %q after %q: got %v, want %v", tc.prefix, tc.after, got, tc.want)
		}
	}
	if err := st.Delete(ctx, "a/y/z"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a/y/z"); err != nil {
		t.Errorf("second delete: %v, want nil", err)
	}
	if _, err := st.Get(ctx, "a/y/z"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	if got := list("a/", "", 0); !slices.Equal(got, []string{"a/x"}) {
		t.Errorf("list a/ after delete: %v, want [a/x]", got)
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a//b", "dir/", "sp ace"} {
		if err := st.Put(ctx, bad, nil); err == nil {
			t.Errorf("put %q: got nil, want an error", bad)
		}
	}
}

func TestFolderStore(t *testing.T) {
	st, err := NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, st, true)
}

func TestMemStoreConformance(t *testing.T) { testStore(t, newMemStore(), true) }

func TestParseHourAndKeys(t *testing.T) {
	for _, s := range []string{"2026-11-29T10Z", "2026-11-29T10", "H2026-11-29T10Z"} {
		h, err := ParseHour(s)
		if err != nil || h != h10 {
			t.Errorf("ParseHour(%q) = %d, %v; want %d", s, h, err, h10)
		}
	}
	if _, err := ParseHour("2026-11-29T10:30Z"); err == nil {
		t.Error("ParseHour of a minute: got nil error")
	}
	if got, want := ObjectKey(h10, "preagg-3", 42), "hour=2026-11-29T10/part-preagg-3-e000000000042.parquet"; got != want {
		t.Errorf("ObjectKey = %q, want %q", got, want)
	}
	if e, ok := objectEpoch(ObjectKey(h10, "preagg-3", 42)); !ok || e != 42 {
		t.Errorf("objectEpoch = %d, %v; want 42", e, ok)
	}
	for _, tc := range []struct {
		r    latepath.Record
		want int64
	}{
		{latepath.Record{Verdict: "counted", EventMs: h10 + 5, ArrivalMs: h10 + eventtime.HourMs + 5}, h10},
		{latepath.Record{Verdict: "invalid:negative_spend", EventMs: 0, ArrivalMs: h10 + eventtime.HourMs + 5}, h10 + eventtime.HourMs},
		{latepath.Record{Verdict: "invalid:arrival_not_positive", ArrivalMs: -3}, 0},
	} {
		if got := PartitionHour(&tc.r); got != tc.want {
			t.Errorf("PartitionHour(%+v) = %d, want %d", tc.r, got, tc.want)
		}
	}
	if _, err := NewWriter(newMemStore(), "bad/part"); err == nil {
		t.Error("NewWriter with a slash in the part: got nil error")
	}
}

// objectEpoch parses the epoch of an object key made by ObjectKey.
func objectEpoch(key string) (int64, bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	base, ok := strings.CutSuffix(base, ".parquet")
	if !ok {
		return 0, false
	}
	i := strings.LastIndex(base, "-e")
	if i < 0 {
		return 0, false
	}
	e, err := strconv.ParseInt(base[i+2:], 10, 64)
	return e, err == nil
}
