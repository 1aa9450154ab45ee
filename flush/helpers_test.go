package flush

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

// day is the date of seed 001's story; short bucket names ("M10:14", "H10")
// in tests are on this day.
const day = "2026-11-29"

// minute returns the bucket "M<day>T<hhmm>Z" for "10:14".
func minute(hhmm string) string { return "M" + day + "T" + hhmm + "Z" }

// hour returns the bucket "H<day>T<hh>Z" for "10".
func hour(hh string) string { return "H" + day + "T" + hh + "Z" }

// startOf returns the start (Unix ms) of a bucket, failing the test on a bad
// one.
func startOf(t testing.TB, bucket string) int64 {
	t.Helper()
	ms, _, err := sink.ParseBucket(bucket)
	if err != nil {
		t.Fatalf("parse bucket: %v", err)
	}
	return ms
}

// fakeClock is a Clock that moves only when a caller sleeps.
type fakeClock struct {
	now   time.Time
	slept time.Duration
	naps  int
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 10, 16, 30, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.naps++
	c.slept += d
	c.now = c.now.Add(d)
	return nil
}

// lateKey identifies a late total in restored state.
type lateKey struct {
	ad     string
	hourMs int64
}

// restored is restored state for tests: late totals, hour roll-ups and
// running totals.
type restored struct {
	late   map[lateKey][2]int64
	hours  map[lateKey][2]int64
	totals map[sink.TotalKey]sink.Total
}

func newRestored() *restored {
	return &restored{late: map[lateKey][2]int64{}, hours: map[lateKey][2]int64{}, totals: map[sink.TotalKey]sink.Total{}}
}

func (r *restored) HourFast(ad string, hourStartMs int64) (int64, int64, bool) {
	v, ok := r.hours[lateKey{ad, hourStartMs}]
	return v[0], v[1], ok
}

func (r *restored) LateTotal(ad string, hourStartMs int64) (int64, int64, bool) {
	v, ok := r.late[lateKey{ad, hourStartMs}]
	return v[0], v[1], ok
}

func (r *restored) Totals(fn func(sink.Total) error) error {
	ts := make([]sink.Total, 0, len(r.totals))
	for _, t := range r.totals {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b sink.Total) int { return compareTotalKeys(a.Key(), b.Key()) })
	for _, t := range ts {
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

func (r *restored) HasTotal(k sink.TotalKey) bool {
	_, ok := r.totals[k]
	return ok
}

// counting wraps a sink.Rows and counts what the flush costs: queries, items
// returned by queries, and writes.
type counting struct {
	sink.Rows
	queries, results, writes, gets int
}

func (c *counting) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	c.queries++
	return c.Rows.QueryIndex(ctx, w, ix, func(it sink.Item) error {
		c.results++
		return fn(it)
	})
}

func (c *counting) Put(ctx context.Context, puts []sink.Put) (int, error) {
	c.writes += len(puts)
	return c.Rows.Put(ctx, puts)
}

func (c *counting) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	c.writes++
	return c.Rows.Remove(ctx, k, w, ckpt)
}

func (c *counting) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, bool, error) {
	c.writes++
	return c.Rows.Delete(ctx, k, w, ckpt)
}

func (c *counting) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	c.writes++
	return c.Rows.(sink.FencedRows).RemoveFenced(ctx, k, w, ckpt, t)
}

func (c *counting) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, bool, error) {
	c.writes++
	return c.Rows.(sink.FencedRows).DeleteFenced(ctx, k, w, ckpt, t)
}

func (c *counting) Get(ctx context.Context, k sink.Key) (sink.Item, bool, error) {
	c.gets++
	return c.Rows.Get(ctx, k)
}

// errCrash is the failure the crash wrappers inject.
var errCrash = errors.New("injected crash")

// budget is a shared count of writes allowed before the process "dies".
type budget struct{ left atomic.Int64 }

func newBudget(n int) *budget {
	b := &budget{}
	b.left.Store(int64(n))
	return b
}

func (b *budget) spend() error {
	if b.left.Add(-1) < 0 {
		return errCrash
	}
	return nil
}

// crashingRows fails every write once the budget is spent.
type crashingRows struct {
	sink.Rows
	b *budget
}

func (c crashingRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	if err := c.b.spend(); err != nil {
		return 0, err
	}
	return c.Rows.Put(ctx, puts)
}

func (c crashingRows) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, error) {
	if err := c.b.spend(); err != nil {
		return false, err
	}
	return c.Rows.Remove(ctx, k, w, ckpt)
}

func (c crashingRows) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (bool, bool, error) {
	if err := c.b.spend(); err != nil {
		return false, false, err
	}
	return c.Rows.Delete(ctx, k, w, ckpt)
}

func (c crashingRows) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	if err := c.b.spend(); err != nil {
		return false, err
	}
	return c.Rows.(sink.FencedRows).RemoveFenced(ctx, k, w, ckpt, t)
}

func (c crashingRows) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, bool, error) {
	if err := c.b.spend(); err != nil {
		return false, false, err
	}
	return c.Rows.(sink.FencedRows).DeleteFenced(ctx, k, w, ckpt, t)
}

// crashingTotals fails every write once the budget is spent.
type crashingTotals struct {
	sink.Totals
	b *budget
}

func (c crashingTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	if err := c.b.spend(); err != nil {
		return err
	}
	return c.Totals.SetTotals(ctx, ts)
}

func (c crashingTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	if err := c.b.spend(); err != nil {
		return err
	}
	return c.Totals.DeleteTotals(ctx, keys)
}

func (c crashingTotals) ForgetEpochs(ctx context.Context, from, to int64) error {
	if err := c.b.spend(); err != nil {
		return err
	}
	return c.Totals.ForgetEpochs(ctx, from, to)
}

// shortBucket drops the story's date from a bucket: "M10:14", "H10".
func shortBucket(b string) string {
	for _, p := range []string{"M", "H"} {
		if rest, ok := strings.CutPrefix(b, p+day+"T"); ok {
			return p + strings.TrimSuffix(rest, "Z")
		}
	}
	return b
}

// dumpRows prints every item of rows, sorted by key, one per line.
func dumpRows(t testing.TB, rows sink.Rows) string {
	t.Helper()
	var items []sink.Item
	if err := rows.Scan(context.Background(), func(it sink.Item) error {
		items = append(items, it)
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	slices.SortFunc(items, func(a, b sink.Item) int {
		if c := strings.Compare(a.Entity, b.Entity); c != 0 {
			return c
		}
		return strings.Compare(a.Bucket, b.Bucket)
	})
	var sb strings.Builder
	for _, it := range items {
		fmt.Fprintf(&sb, "%s/%s", it.Entity, shortBucket(it.Bucket))
		if it.HasJobGen {
			fmt.Fprintf(&sb, " job_gen=%d", it.JobGen)
		}
		if it.Fence != 0 {
			fmt.Fprintf(&sb, " wf=%d", it.Fence)
		}
		for _, w := range writers {
			if a := it.Attrs(w); a.Present {
				fmt.Fprintf(&sb, " %s{valid=%d spend=%d ckpt=%d ix=%s gen=%d}", w, a.Valid, a.SpendMicros, a.Ckpt, a.Ix, a.Gen)
			}
		}
		if f := it.Final; f.Present {
			fmt.Fprintf(&sb, " final{valid=%d spend=%d gen=%d at=%d}", f.Valid, f.SpendMicros, f.Gen, f.AtMs)
		}
		if !it.Fast.Present && !it.Late.Present && !it.Final.Present {
			sb.WriteString(" (no attributes)")
		}
		sb.WriteString("\n")
	}
	if len(items) == 0 {
		sb.WriteString("(empty)\n")
	}
	return sb.String()
}

func mustPut(t testing.TB, rows sink.Rows, puts ...sink.Put) {
	t.Helper()
	refused, err := rows.Put(context.Background(), puts)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if refused != 0 {
		t.Fatalf("put: got %d refused, want 0", refused)
	}
}

// indexed wraps a sink.Rows whose QueryIndex reads the whole table (such as
// sinktest.MemRows) with a secondary index kept from the writes it sees, as
// DynamoDB keeps a GSI, so that large-table tests run fast. Index entries of
// rewritten or removed attributes are filtered out on read. Not safe for
// concurrent use.
type indexed struct {
	sink.Rows
	ix map[sink.Writer]map[string]map[sink.Key]struct{}
}

func newIndexed(rows sink.Rows) *indexed {
	return &indexed{Rows: rows, ix: map[sink.Writer]map[string]map[sink.Key]struct{}{}}
}

func (x *indexed) Put(ctx context.Context, puts []sink.Put) (int, error) {
	for _, p := range puts {
		byIx := x.ix[p.Writer]
		if byIx == nil {
			byIx = map[string]map[sink.Key]struct{}{}
			x.ix[p.Writer] = byIx
		}
		ixKey := sink.IndexKey(p.Epoch, p.Key)
		if byIx[ixKey] == nil {
			byIx[ixKey] = map[sink.Key]struct{}{}
		}
		byIx[ixKey][p.Key] = struct{}{}
	}
	return x.Rows.Put(ctx, puts)
}

func (x *indexed) QueryIndex(ctx context.Context, w sink.Writer, ix string, fn func(sink.Item) error) error {
	keys := make([]sink.Key, 0, len(x.ix[w][ix]))
	for k := range x.ix[w][ix] {
		keys = append(keys, k)
	}
	for _, k := range keys {
		it, ok, err := x.Rows.Get(ctx, k)
		if err != nil {
			return err
		}
		if a := it.Attrs(w); !ok || !a.Present || a.Ix != ix {
			delete(x.ix[w][ix], k)
			continue
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

func (x *indexed) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, error) {
	return x.Rows.(sink.FencedRows).RemoveFenced(ctx, k, w, ckpt, t)
}

func (x *indexed) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (bool, bool, error) {
	return x.Rows.(sink.FencedRows).DeleteFenced(ctx, k, w, ckpt, t)
}
