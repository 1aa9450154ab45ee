package lease

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/lease/leasetest"
)

const testJob = "s3-bucket/checkpoints/gen-1"

func newWorker(t testing.TB, api RangeAPI, table, owner string, clk Clock) *Worker {
	t.Helper()
	w, err := NewWorker(api, WorkerOptions{Table: table, Job: testJob, ID: owner, Duration: D, Clock: clk, Address: "10.0.0.1:8080"})
	if err != nil {
		t.Fatalf("NewWorker(%s): %v", owner, err)
	}
	countNonces(w)
	return w
}

// countNonces makes w's take nonces 1, 2, 3…, for owner strings a test
// can name.
func countNonces(w *Worker) {
	n := 0
	w.nonce = func() string { n++; return strconv.Itoa(n) }
}

func mustScan(t testing.TB, w *Worker) TableScan {
	t.Helper()
	s, err := w.Scan(context.Background())
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return s
}

func itemOf(t testing.TB, s TableScan, key string) Item {
	t.Helper()
	for _, it := range s.Items {
		if it.Key == key {
			return it
		}
	}
	t.Fatalf("no item %s in the scan", key)
	return Item{}
}

func mustTake(t testing.TB, w *Worker, seen Item) *Claim {
	t.Helper()
	c, err := w.Take(context.Background(), seen)
	if err != nil {
		t.Fatalf("%s takes %s: %v", w.ID(), seen.Key, err)
	}
	return c
}

func wantChanged(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrChanged) {
		t.Errorf("%s: got %v, want ErrChanged", what, err)
	}
}

func wantLost(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrLost) {
		t.Errorf("%s: got %v, want ErrLost", what, err)
	}
}

// rawRefused sends in directly and wants DynamoDB's condition to refuse it.
func rawRefused(t testing.TB, api RangeAPI, what string, in *dynamodb.UpdateItemInput) {
	t.Helper()
	_, err := api.UpdateItem(context.Background(), in)
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Errorf("%s: got %v, want ConditionalCheckFailedException", what, err)
	}
}

// runWritesScenario drives every conditional write of range leases (§6.2
// of the scale-out note) against api, checking what each condition
// admits and refuses. It runs on Mem and on dynalite alike, so that the
// two are held to the same conditions. Time is a fake clock: the
// conditions do not depend on it.
func runWritesScenario(t *testing.T, api RangeAPI, table string) {
	ctx := context.Background()
	clk := newFakeClock()
	w1 := newWorker(t, api, table, "w1", clk)
	w2 := newWorker(t, api, table, "w2", clk)
	w3 := newWorker(t, api, table, "w3", clk)
	ranges, _ := EvenRanges(4)

	// Setup, idempotent; other ranges are refused.
	if err := w1.Setup(ctx, ranges); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if err := w2.Setup(ctx, ranges); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if err := w2.Setup(ctx, ranges[:1]); err == nil {
		t.Error("Setup with ranges that do not cover every key group: got nil, want an error")
	}
	two, _ := EvenRanges(2)
	if err := w2.Setup(ctx, two); err == nil || !strings.Contains(err.Error(), "already set up") {
		t.Errorf("Setup with other ranges: got %v, want already set up", err)
	}
	s := mustScan(t, w1)
	if s.Map == nil || !slices.Equal(s.Map.Ranges, ranges) || s.Map.Version != 1 {
		t.Fatalf("ranges map %+v, want %v at version 1", s.Map, ranges)
	}
	if len(s.Items) != 4 {
		t.Fatalf("scan: %d items, want 4", len(s.Items))
	}
	for i, it := range s.Items {
		if it.Kind != KindRange || it.Range != ranges[i] || it.State != StateActive || !it.Free() || it.Counter != 0 || !it.Exists || it.Job != testJob {
			t.Errorf("item %d = %+v, want free active range %v at counter 0", i, it, ranges[i])
		}
	}
	k0 := RangeKey(testJob, ranges[0])

	// Take a free range: fence = counter = 1; a second take of the same
	// snapshot is refused.
	c1 := mustTake(t, w1, itemOf(t, s, k0))
	if c1.Fence() != 1 || c1.Counter() != 1 || c1.Range() != ranges[0] || c1.Check() != nil {
		t.Errorf("first take: fence %d counter %d range %v check %v; want 1, 1, %v, nil", c1.Fence(), c1.Counter(), c1.Range(), c1.Check(), ranges[0])
	}
	_, err := w2.Take(ctx, itemOf(t, s, k0))
	wantChanged(t, "a second take of the same free range", err)

	// Renew: counter 2; a takeover based on the counter before the
	// renewal is refused.
	if err := c1.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	stale := itemOf(t, mustScan(t, w2), k0)
	if stale.Owner != "w1~1" || stale.Worker != "w1" || stale.Counter != 2 || stale.Fence != 1 || stale.OwnerSwitches != 1 {
		t.Errorf("after the renewal: %+v, want owner w1, counter 2, fence 1, owner_switches 1", stale)
	}
	if err := c1.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	_, err = w2.Take(ctx, stale)
	wantChanged(t, "a takeover of a holder that renewed since", err)

	// Ask for a handoff: one request at a time; the holder sees it at its
	// next renewal.
	s = mustScan(t, w2)
	if err := w2.AskHandoff(ctx, itemOf(t, s, k0)); err != nil {
		t.Fatalf("AskHandoff: %v", err)
	}
	wantChanged(t, "a second request", w3.AskHandoff(ctx, itemOf(t, s, k0)))
	if err := c1.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got := c1.HandoffTo(); got != "w2" {
		t.Errorf("HandoffTo after a renewal = %q, want w2", got)
	}

	// Open epochs and commit checkpoints under owner and fence.
	if err := c1.OpenEpoch(ctx, 5); err != nil {
		t.Fatalf("OpenEpoch(5): %v", err)
	}
	if err := c1.OpenEpoch(ctx, 4); err == nil || errors.Is(err, ErrLost) {
		t.Errorf("OpenEpoch(4) after 5: got %v, want an error that is not a loss", err)
	}
	cp := Checkpoint{ID: 3, Key: "checkpoints/kg0-32/manifests/3.json", Watermark: 1_795_946_400_000}
	if err := c1.Commit(ctx, cp); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := c1.Commit(ctx, Checkpoint{ID: 2, Key: "old"}); err == nil || errors.Is(err, ErrLost) {
		t.Errorf("Commit(2) after 3: got %v, want an error that is not a loss", err)
	}
	if it := c1.Item(); it.Checkpoint != cp || it.EpochHigh != 5 || it.OwnerSwitches != 0 || it.HandoffTo != "w2" {
		t.Errorf("item after open and commit: %+v, want checkpoint %+v, epoch_high 5, owner_switches 0, handoff to w2", it, cp)
	}

	// Release honours the handoff: the range is reserved for the asker.
	if err := c1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantLost(t, "Check after Release", c1.Check())
	s = mustScan(t, w3)
	rel := itemOf(t, s, k0)
	if !rel.Free() || rel.HandoffTo != "w2" || rel.LastOwner != "w1~1" || rel.Counter != 5 {
		t.Errorf("after the release: %+v, want free, reserved for w2, last owner w1~1, counter 5", rel)
	}
	// Another worker's take as if it were free for all is refused.
	asFree := rel
	asFree.HandoffTo = ""
	_, err = w3.Take(ctx, asFree)
	wantChanged(t, "a take of a range reserved for another worker", err)
	// The old holder's renewal and fenced writes, sent anyway, are refused.
	rawRefused(t, api, "the released holder's renewal", w1.request(k0, condMine, updRenewClaim, map[string]types.AttributeValue{
		":me": avS(c1.Owner()), ":c": avN(5), ":n": avN(6), ":r": avS("now"), ":d": avN(1),
	}))
	rawRefused(t, api, "the released holder's commit", w1.request(k0, condCommit, updCommit, map[string]types.AttributeValue{
		":me": avS(c1.Owner()), ":fe": avN(1), ":cp": avN(9), ":ck": avS("x"), ":wm": avN(0), ":zero": avN(0),
	}))

	// The asker takes it at once: fence 6, request removed, one switch
	// since the commit.
	c2 := mustTake(t, w2, rel)
	it := c2.Item()
	if c2.Fence() != 6 || it.HandoffTo != "" || it.OwnerSwitches != 1 || it.Checkpoint != cp || it.EpochHigh != 5 {
		t.Errorf("the asker's take: fence %d, item %+v; want fence 6, no request, owner_switches 1, the committed checkpoint and epoch high", c2.Fence(), it)
	}

	// A takeover (the taker watched the holder dead; the write itself
	// only names the counter seen).
	dead := itemOf(t, mustScan(t, w3), k0)
	c3 := mustTake(t, w3, dead)
	if c3.Fence() != 7 || c3.Item().LastOwner != c2.Owner() || c3.Item().OwnerSwitches != 2 {
		t.Errorf("takeover: fence %d, item %+v; want fence 7, last owner w2, owner_switches 2", c3.Fence(), c3.Item())
	}
	// The old holder: its Check still passes by time (the taker waited
	// only in this test), but every write it sends is refused and ends the
	// claim.
	wantLost(t, "the old holder's open epoch", c2.OpenEpoch(ctx, 6))
	wantLost(t, "the old holder's Check after a refused write", c2.Check())
	wantLost(t, "the old holder's renewal", c2.Renew(ctx))
	if err := c2.Release(ctx); err != nil {
		t.Errorf("Release of a lost claim: %v, want nil", err)
	}
	if got := itemOf(t, mustScan(t, w3), k0); got.Owner != c3.Owner() || got.EpochHigh != 5 {
		t.Errorf("after the old holder's writes: %+v, want w3's, epoch_high 5", got)
	}

	// A commit between the watch and the takeover resets owner_switches:
	// the takeover, naming the value read, is refused.
	watched := itemOf(t, mustScan(t, w1), k0)
	if err := c3.Commit(ctx, Checkpoint{ID: 4, Key: "k4"}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	_, err = w1.Take(ctx, watched)
	wantChanged(t, "a takeover across a commit", err)

	// Slots: created on first take; the second taker of the same snapshot
	// is refused and chooses the next slot.
	s = mustScan(t, w1)
	snap := NewWatcher().Observe(s)
	sl, ok := ChooseSlot(snap, testJob, s.At, 4, BalanceOptions{Duration: D})
	if !ok || sl.Slot != 0 || sl.Exists {
		t.Fatalf("ChooseSlot = %+v, %v; want slot 0, not existing", sl, ok)
	}
	slot1 := mustTake(t, w1, sl)
	if slot1.Kind() != KindSlot || slot1.Fence() != 1 || slot1.Item().Address != "10.0.0.1:8080" || slot1.Item().Slot != 0 {
		t.Errorf("slot take: kind %v fence %d item %+v; want a slot at fence 1 with the address", slot1.Kind(), slot1.Fence(), slot1.Item())
	}
	_, err = w2.Take(ctx, sl)
	wantChanged(t, "a second take of a new slot", err)
	s = mustScan(t, w2)
	if sl2, ok := ChooseSlot(NewWatcher().Observe(s), testJob, s.At, 4, BalanceOptions{Duration: D}); !ok || sl2.Slot != 1 {
		t.Errorf("the next ChooseSlot = %+v, %v; want slot 1", sl2, ok)
	}
	if err := slot1.SetConsumer(ctx, "arn:aws:kinesis:us-east-1:1:stream/s/consumer/j-w0:1"); err != nil {
		t.Errorf("SetConsumer: %v", err)
	}
	if err := slot1.Release(ctx); err != nil {
		t.Errorf("slot Release: %v", err)
	}
	// The recount lease: a lease like a slot.
	rc := Item{Key: RecountKey(testJob), Kind: KindRecount}
	recount := mustTake(t, w3, rc)
	_, err = w1.Take(ctx, rc)
	wantChanged(t, "a second take of the new recount lease", err)
	if got := itemOf(t, mustScan(t, w1), RecountKey(testJob)); got.Kind != KindRecount || got.Owner != recount.Owner() || got.Fence != 1 {
		t.Errorf("recount lease %+v, want held by %s at fence 1", got, recount.Owner())
	}
	if err := recount.Release(ctx); err != nil {
		t.Errorf("recount Release: %v", err)
	}

	// A split of range 3 (96-128): savepoint, pending children above its
	// counter, retire, map, activate.
	k3 := RangeKey(testJob, ranges[3])
	parent := mustTake(t, w1, itemOf(t, mustScan(t, w1), k3))
	if err := parent.OpenEpoch(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if err := parent.Commit(ctx, Checkpoint{ID: 10, Key: "sp-10"}); err != nil {
		t.Fatal(err)
	}
	children := []Range{{From: 96, To: 112}, {From: 112, To: 128}}
	// A retire whose savepoint is not the committed checkpoint, or whose
	// fence is not below the new ranges' first counter, is refused; the
	// claim has ended, but the range is still held: the holder releases it
	// and takes it again.
	if err := parent.Retire(ctx, 9, parent.Counter()+1); err == nil || errors.Is(err, ErrLost) {
		t.Errorf("Retire with a savepoint that is not the committed checkpoint: got %v, want an error that is not a loss", err)
	}
	if err := parent.Release(ctx); err != nil {
		t.Fatal(err)
	}
	parent = mustTake(t, w1, itemOf(t, mustScan(t, w1), k3))
	if err := parent.Retire(ctx, 10, parent.Fence()); err == nil || errors.Is(err, ErrLost) {
		t.Errorf("Retire with new ranges' counter not above the fence: got %v, want an error that is not a loss", err)
	}
	if err := parent.Release(ctx); err != nil {
		t.Fatal(err)
	}
	parent = mustTake(t, w1, itemOf(t, mustScan(t, w1), k3))
	c0 := parent.Counter() + 1
	for _, ch := range children {
		if err := w1.CreateRange(ctx, RangeSpec{Range: ch, State: StatePending, Counter: c0, EpochHigh: 11,
			Origins: []Origin{{Range: ranges[3], Checkpoint: 10, Prefix: "checkpoints/gen-1/j/kg96-128/", EpochHigh: 11}}}); err != nil {
			t.Fatalf("CreateRange %v: %v", ch, err)
		}
	}
	wantChanged(t, "creating a range twice", w1.CreateRange(ctx, RangeSpec{Range: children[0], State: StatePending}))
	s = mustScan(t, w2)
	pend := itemOf(t, s, RangeKey(testJob, children[0]))
	if pend.State != StatePending || pend.Counter != c0 || pend.EpochHigh != 11 || len(pend.Origins) != 1 || pend.Origins[0].Range != ranges[3] || pend.Origins[0].Checkpoint != 10 {
		t.Errorf("pending child: %+v, want pending at counter %d, epoch_high 11, origin 96-128@10", pend, c0)
	}
	_, err = w2.Take(ctx, pend)
	wantChanged(t, "a take of a pending range", err)
	if err := parent.Retire(ctx, 10, c0); err != nil {
		t.Fatalf("Retire: %v", err)
	}
	wantLost(t, "Check after Retire", parent.Check())
	s = mustScan(t, w2)
	ret := itemOf(t, s, k3)
	if ret.State != StateRetired || !ret.Free() || ret.LastOwner != parent.Owner() {
		t.Errorf("retired parent: %+v, want retired, no owner, last owner w1", ret)
	}
	_, err = w2.Take(ctx, ret)
	wantChanged(t, "a take of a retired range", err)
	if got := Balance(NewWatcher().Observe(s), "w2", s.At, BalanceOptions{Duration: D}).Activate; !slices.Equal(got, children) {
		t.Errorf("Balance.Activate = %v, want %v", got, children)
	}
	newMap := append(slices.Clone(ranges[:3]), children...)
	if err := w2.UpdateMap(ctx, *s.Map, newMap); err != nil {
		t.Fatalf("UpdateMap: %v", err)
	}
	wantChanged(t, "a second map update from the same version", w3.UpdateMap(ctx, *s.Map, newMap))
	for _, ch := range children {
		if err := w2.Activate(ctx, ch); err != nil {
			t.Fatalf("Activate %v: %v", ch, err)
		}
		if err := w3.Activate(ctx, ch); err != nil {
			t.Errorf("a second Activate %v: %v, want nil", ch, err)
		}
	}
	wantChanged(t, "activating a retired range", w2.Activate(ctx, ranges[3]))
	s = mustScan(t, w2)
	if s.Map.Version != 2 || !slices.Equal(s.Map.Ranges, newMap) {
		t.Errorf("map after the split: %+v, want %v at version 2", s.Map, newMap)
	}
	child := mustTake(t, w2, itemOf(t, s, RangeKey(testJob, children[1])))
	if child.Fence() <= parent.Fence() || child.Item().EpochHigh != 11 {
		t.Errorf("child fence %d, parent's %d, epoch_high %d; want the child's above and epoch_high 11", child.Fence(), parent.Fence(), child.Item().EpochHigh)
	}

	// Sweeps due: recorded and cleared under the fence.
	sw := []SweepDue{
		{Fence: 5, From: 1, To: 2, NotBefore: time.Date(2026, 11, 29, 10, 10, 0, 0, time.UTC)},
		{Fence: 6, From: 3, To: 5, NotBefore: time.Date(2026, 11, 29, 10, 20, 0, 0, time.UTC)},
	}
	if err := c3.SetSweepsDue(ctx, sw); err != nil {
		t.Fatalf("SetSweepsDue: %v", err)
	}
	if got := itemOf(t, mustScan(t, w1), k0).SweepsDue; !slices.EqualFunc(got, sw, SweepDue.same) {
		t.Errorf("sweeps due %+v, want %+v", got, sw)
	}
	if got := c3.Item().SweepsDue; !slices.EqualFunc(got, sw, SweepDue.same) {
		t.Errorf("the claim's item holds sweeps due %+v, want %+v", got, sw)
	}
	if err := c3.SetSweepsDue(ctx, nil); err != nil {
		t.Fatalf("SetSweepsDue(nil): %v", err)
	}
	if got := itemOf(t, mustScan(t, w1), k0).SweepsDue; got != nil {
		t.Errorf("sweeps due after clearing: %+v, want none", got)
	}

	// Handoff requests: cancelled by the asker while held; a cancel from a
	// stale view (the range was released meanwhile) is refused.
	k1 := RangeKey(testJob, ranges[1])
	h := mustTake(t, w1, itemOf(t, mustScan(t, w1), k1))
	if err := w3.AskHandoff(ctx, itemOf(t, mustScan(t, w3), k1)); err != nil {
		t.Fatal(err)
	}
	asked := itemOf(t, mustScan(t, w3), k1)
	if err := h.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w3.CancelHandoff(ctx, asked); err != nil {
		t.Errorf("CancelHandoff: %v", err)
	}
	if got := itemOf(t, mustScan(t, w3), k1); got.HandoffTo != "" || got.Owner != h.Owner() {
		t.Errorf("after the cancel: %+v, want w1's, no request", got)
	}
	if err := w3.AskHandoff(ctx, itemOf(t, mustScan(t, w3), k1)); err != nil {
		t.Fatal(err)
	}
	asked = itemOf(t, mustScan(t, w3), k1)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantChanged(t, "a cancel of a request honoured meanwhile", w3.CancelHandoff(ctx, asked))
	if err := w3.AskHandoff(ctx, itemOf(t, mustScan(t, w3), k1)); err == nil {
		t.Error("AskHandoff of a free range: got nil, want an error")
	}
	mustTake(t, w3, itemOf(t, mustScan(t, w3), k1))

	for _, c := range []*Claim{c3, child} {
		if err := c.Release(ctx); err != nil {
			t.Errorf("Release %s: %v", c.Key(), err)
		}
	}
}

func TestRangeWritesOnMem(t *testing.T) {
	runWritesScenario(t, newTable(t), testTable)
}

// The items of one job are read whatever other jobs share the table,
// even one whose name starts with this job's and "#".
func TestScanIgnoresOtherJobs(t *testing.T) {
	ctx := context.Background()
	api := newTable(t)
	clk := newFakeClock()
	mine := newWorker(t, api, testTable, "a", clk)
	other, err := NewWorker(api, WorkerOptions{Table: testTable, Job: testJob + "#kg0-64", ID: "b", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	two, _ := EvenRanges(2)
	for _, w := range []*Worker{mine, other} {
		if err := w.Setup(ctx, two); err != nil {
			t.Fatal(err)
		}
	}
	// The job lease of today (lease.Acquire) is read as the range 0-128.
	l := mustAcquire(t, api, Options{Table: testTable, Job: "legacy", Owner: "x", Duration: D, Clock: noSleepClock{clk, t}})
	legacy, err := NewWorker(api, WorkerOptions{Table: testTable, Job: "legacy", ID: "y", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s := mustScan(t, legacy)
	if len(s.Items) != 1 || s.Items[0].Range != AllKeyGroups || s.Items[0].Owner != "x" || s.Items[0].Worker != "x" || s.Items[0].State != StateActive || s.Map != nil {
		t.Errorf("scan of a single-worker job: %+v, want its lease as the active range 0-128 held by x, no map", s)
	}
	_ = l.Release(ctx)
	s = mustScan(t, mine)
	if len(s.Items) != 2 || s.Items[0].Range != two[0] || s.Items[1].Range != two[1] || s.Map == nil || s.Map.Version != 1 {
		t.Errorf("scan: %+v, want this job's two ranges and its map", s)
	}
	// Several pages.
	for k := range 5 {
		if _, err := mine.Take(ctx, Item{Key: SlotKey(testJob, k), Kind: KindSlot, Slot: k}); err != nil {
			t.Fatal(err)
		}
	}
	paged := &pagingAPI{RangeAPI: api, limit: 2}
	pw := newWorker(t, paged, testTable, "c", clk)
	if s := mustScan(t, pw); len(s.Items) != 7 || paged.pages < 5 {
		t.Errorf("paged scan: %d items in %d pages, want 7 in at least 5", len(s.Items), paged.pages)
	}
}

// pagingAPI sets a Limit on every Scan.
type pagingAPI struct {
	RangeAPI
	limit int32
	pages int
}

func (p *pagingAPI) Scan(ctx context.Context, in *dynamodb.ScanInput, opt ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	in.Limit = aws.Int32(p.limit)
	p.pages++
	return p.RangeAPI.Scan(ctx, in, opt...)
}

// Mem's Scan: filters, limits and pages as DynamoDB does.
func TestMemScan(t *testing.T) {
	ctx := context.Background()
	m := newTable(t)
	for _, k := range []string{"a#1", "a#2", "b#1", "a#3"} {
		if _, err := m.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS(k)},
			UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": avN(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(in dynamodb.ScanInput) (keys []string, last string) {
		t.Helper()
		in.TableName = aws.String(testTable)
		out, err := m.Scan(ctx, &in)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		for _, it := range out.Items {
			keys = append(keys, it[attrKey].(*types.AttributeValueMemberS).Value)
		}
		if out.LastEvaluatedKey != nil {
			last = out.LastEvaluatedKey[attrKey].(*types.AttributeValueMemberS).Value
		}
		if int(out.Count) != len(out.Items) {
			t.Errorf("Count %d, %d items", out.Count, len(out.Items))
		}
		return keys, last
	}
	filter := dynamodb.ScanInput{FilterExpression: aws.String("begins_with(#k, :p)"),
		ExpressionAttributeNames: map[string]string{"#k": attrKey}, ExpressionAttributeValues: map[string]types.AttributeValue{":p": avS("a#")}}
	if keys, last := scan(filter); !slices.Equal(keys, []string{"a#1", "a#2", "a#3"}) || last != "" {
		t.Errorf("filtered scan: %v (last %q), want a#1 a#2 a#3", keys, last)
	}
	// Limit counts evaluated items, before the filter.
	page := filter
	page.Limit = aws.Int32(3)
	keys, last := scan(page)
	if !slices.Equal(keys, []string{"a#1", "a#2", "a#3"}) || last != "a#3" {
		t.Errorf("first page: %v (last %q), want a#1 a#2 a#3, last a#3", keys, last)
	}
	page.ExclusiveStartKey = map[string]types.AttributeValue{attrKey: avS(last)}
	if keys, last := scan(page); len(keys) != 0 || last != "" {
		t.Errorf("second page: %v (last %q), want nothing", keys, last)
	}
	for _, bad := range []dynamodb.ScanInput{
		{Limit: aws.Int32(0)},
		{IndexName: aws.String("gsi")},
		{FilterExpression: aws.String("begins_with(#k)"), ExpressionAttributeNames: map[string]string{"#k": attrKey}},
		{FilterExpression: aws.String("begins_with(#k, :p)"), ExpressionAttributeNames: map[string]string{"#k": attrKey},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": avS("a"), ":q": avS("b")}},
		{Select: types.SelectCount},
	} {
		bad.TableName = aws.String(testTable)
		if _, err := m.Scan(ctx, &bad); err == nil {
			t.Errorf("Scan(%+v): got nil, want a ValidationException", bad)
		}
	}
	// ReturnValues.
	out, err := m.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("a#1")},
		UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": avN(2)}, ReturnValues: types.ReturnValueAllOld})
	if err != nil || out.Attributes["v"].(*types.AttributeValueMemberN).Value != "1" {
		t.Errorf("ALL_OLD: %v, %v; want v = 1", out, err)
	}
	out, err = m.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("new")},
		UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": avN(3)}, ReturnValues: types.ReturnValueAllNew})
	if err != nil || out.Attributes["v"].(*types.AttributeValueMemberN).Value != "3" || out.Attributes[attrKey] == nil {
		t.Errorf("ALL_NEW: %v, %v; want the new item", out, err)
	}
	if _, err := m.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(testTable), Key: map[string]types.AttributeValue{attrKey: avS("new")},
		UpdateExpression: aws.String("SET v = :v"), ExpressionAttributeValues: map[string]types.AttributeValue{":v": avN(3)}, ReturnValues: types.ReturnValueUpdatedNew}); err == nil {
		t.Error("UPDATED_NEW: got nil, want a ValidationException (not supported)")
	}
}

func TestParseRange(t *testing.T) {
	for _, s := range []string{"0-128", "8-16", "127-128"} {
		r, err := ParseRange(s)
		if err != nil || rangeText(r) != s || r.String() != "kg"+s || RangeKey("j", r) != "j#kg"+s {
			t.Errorf("ParseRange(%q) = %v, %v; want the range stored as %q, named kg%s (its lease key j#kg%s)", s, r, err, s, s, s)
		}
	}
	for _, s := range []string{"", "0", "0-0", "8-4", "0-129", "-1-4", "01-4", "a-b", "0-128-"} {
		if _, err := ParseRange(s); err == nil {
			t.Errorf("ParseRange(%q): got nil, want an error", s)
		}
	}
	rs, err := EvenRanges(3)
	if err != nil || !slices.Equal(rs, []Range{{From: 0, To: 42}, {From: 42, To: 85}, {From: 85, To: 128}}) || CheckCover(rs) != nil {
		t.Errorf("EvenRanges(3) = %v, %v", rs, err)
	}
	if err := CheckCover([]Range{{From: 0, To: 64}, {From: 63, To: 128}}); err == nil {
		t.Error("CheckCover of overlapping ranges: got nil")
	}
	if _, _, _, ok := parseKey("j", "j#slot01"); ok {
		t.Error(`parseKey("j#slot01") ok, want refused`)
	}
}

// Claims keep the job lease's timing: Check for 2D/3 after the last
// renewal was sent, a renewal past that ends the claim without a write.
func TestClaimValidity(t *testing.T) {
	ctx := context.Background()
	api := newTable(t)
	clk := newFakeClock()
	w := newWorker(t, api, testTable, "a", clk)
	if err := w.Setup(ctx, []Range{AllKeyGroups}); err != nil {
		t.Fatal(err)
	}
	c := mustTake(t, w, mustScan(t, w).Items[0])
	clk.Advance(D / 3)
	if err := c.Check(); err != nil {
		t.Errorf("Check at D/3: %v", err)
	}
	if err := c.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2*D/3 - 1)
	if err := c.Check(); err != nil {
		t.Errorf("Check just before 2D/3 after a renewal: %v", err)
	}
	clk.Advance(1)
	wantLost(t, "Check at 2D/3", c.Check())
	before := decoded(t, api, Options{Table: testTable, Job: testJob})
	wantLost(t, "Renew past the validity", c.Renew(ctx))
	select {
	case <-c.Lost():
	default:
		t.Error("Lost() not closed after a renewal past the validity")
	}
	if after := decoded(t, api, Options{Table: testTable, Job: testJob}); after.counter != before.counter {
		t.Errorf("counter %d after a renewal past the validity, want %d (nothing sent)", after.counter, before.counter)
	}
}

// Run renews every D/3, and ends on Release (nil) or a takeover (ErrLost);
// Guard's contexts end with the claim.
func TestClaimRun(t *testing.T) {
	ctx := context.Background()
	api := newTable(t)
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	w, err := NewWorker(api, WorkerOptions{Table: testTable, Job: testJob, ID: "a", Duration: D, Clock: clk, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Setup(ctx, []Range{{From: 0, To: 64}, {From: 64, To: 128}}); err != nil {
		t.Fatal(err)
	}
	s := mustScan(t, w)
	c1, c2 := mustTake(t, w, s.Items[0]), mustTake(t, w, s.Items[1])
	done1, done2 := make(chan error, 1), make(chan error, 1)
	go func() { done1 <- c1.Run(ctx) }()
	go func() { done2 <- c2.Run(ctx) }()
	clk.waitSleepers(t, 2)
	for range 3 {
		clk.Advance(D / 3)
		clk.waitSleepers(t, 2)
	}
	if c1.Counter() != 4 || c2.Counter() != 4 {
		t.Errorf("counters %d, %d after 3 renewal periods, want 4, 4", c1.Counter(), c2.Counter())
	}
	if got := counterValue(t, w.m.renewals.WithLabelValues("range")); got != 6 {
		t.Errorf("renewals = %v, want 6", got)
	}
	gctx, cancel := c1.Guard(ctx)
	defer cancel()
	if err := c1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, done1); err != nil {
		t.Errorf("Run after Release = %v, want nil", err)
	}
	<-gctx.Done()
	if !errors.Is(context.Cause(gctx), ErrLost) {
		t.Errorf("Guard's cause after Release = %v, want ErrLost", context.Cause(gctx))
	}
	// Another worker takes c2 over; c2's next renewal is refused.
	b := newWorker(t, api, testTable, "b", clk)
	if _, err := b.Take(ctx, itemOf(t, mustScan(t, b), c2.Key())); err != nil {
		t.Fatal(err)
	}
	clk.Advance(D / 3)
	if err := waitErr(t, done2); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "taken over by b") {
		t.Errorf("Run after a takeover = %v, want ErrLost naming b", err)
	}
	if got := counterValue(t, w.m.lost.WithLabelValues("range")); got != 1 {
		t.Errorf("lost = %v, want 1", got)
	}
}

// Run retries failed renewals every D/30 within the validity, and ends the
// claim once it has passed.
func TestClaimRunRetriesThenLoses(t *testing.T) {
	ctx := context.Background()
	mem := newTable(t)
	api := &faultRangeAPI{faultAPI: faultAPI{API: mem}, mem: mem}
	clk := newFakeClock()
	w := newWorker(t, api, testTable, "a", clk)
	if err := w.Setup(ctx, []Range{AllKeyGroups}); err != nil {
		t.Fatal(err)
	}
	c := mustTake(t, w, mustScan(t, w).Items[0])
	api.setUpdate(func(context.Context, *dynamodb.UpdateItemInput) (bool, error) { return true, errTransient })
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	clk.waitSleepers(t, 1)
	clk.Advance(D / 3) // the first renewal fails
	for i := 0; i < 9; i++ {
		clk.waitSleepers(t, 1)
		if err := c.Check(); err != nil {
			t.Fatalf("Check while retrying within the validity: %v", err)
		}
		clk.Advance(D / 30)
	}
	clk.waitSleepers(t, 1)
	clk.Advance(D / 30) // 2D/3: the validity is over
	if err := waitErr(t, done); !errors.Is(err, ErrLost) {
		t.Errorf("Run = %v, want ErrLost", err)
	}
	if api.calls < 10 {
		t.Errorf("%d renewal attempts, want about 10", api.calls)
	}
}

// A take whose answer was lost but which was applied is recognised by
// owner and fence, and confirmed.
func TestTakeLostAnswerAdopted(t *testing.T) {
	ctx := context.Background()
	mem := newTable(t)
	api := &faultRangeAPI{faultAPI: faultAPI{API: mem}, mem: mem}
	clk := newFakeClock()
	w := newWorker(t, api, testTable, "a", clk)
	if err := w.Setup(ctx, []Range{AllKeyGroups}); err != nil {
		t.Fatal(err)
	}
	seen := mustScan(t, w).Items[0]
	once := true
	api.setUpdate(func(ctx context.Context, in *dynamodb.UpdateItemInput) (bool, error) {
		if once {
			once = false
			_, _ = mem.UpdateItem(ctx, in)
			return true, errTransient
		}
		return false, nil
	})
	c, err := w.Take(ctx, seen)
	if err != nil {
		t.Fatalf("Take with a lost answer: %v", err)
	}
	if c.Fence() != 1 || c.Counter() != 2 || c.Check() != nil {
		t.Errorf("adopted take: fence %d counter %d check %v; want fence 1, counter 2 (confirmed by a renewal), nil", c.Fence(), c.Counter(), c.Check())
	}
	// A renewal whose answer is lost: the next one is refused, adopts the
	// counter and renews again.
	once = true
	if err := c.Renew(ctx); err == nil {
		t.Fatal("Renew with a lost answer: got nil, want the transport error")
	}
	if err := c.Renew(ctx); err != nil || c.Counter() != 4 {
		t.Errorf("Renew after a lost answer: %v, counter %d; want nil, 4", err, c.Counter())
	}
}

type faultRangeAPI struct {
	faultAPI
	mem *leasetest.Mem
}

func (f *faultRangeAPI) Scan(ctx context.Context, in *dynamodb.ScanInput, opt ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return f.mem.Scan(ctx, in, opt...)
}

func waitErr(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// Workers of one job share their metrics on a registry; a registry holding
// another metric under one of their names is refused.
func TestWorkerMetrics(t *testing.T) {
	ctx := context.Background()
	api := newTable(t)
	reg := prometheus.NewRegistry()
	clk := newFakeClock()
	var ws []*Worker
	for _, id := range []string{"a", "b"} {
		w, err := NewWorker(api, WorkerOptions{Table: testTable, Job: testJob, ID: id, Duration: D, Clock: clk, Registerer: reg})
		if err != nil {
			t.Fatalf("NewWorker(%s): %v", id, err)
		}
		ws = append(ws, w)
	}
	if err := ws[0].Setup(ctx, []Range{AllKeyGroups}); err != nil {
		t.Fatal(err)
	}
	seen := mustScan(t, ws[0]).Items[0]
	c := mustTake(t, ws[0], seen)
	_, err := ws[1].Take(ctx, seen)
	wantChanged(t, "a second take", err)
	if got := counterValue(t, ws[1].m.takes.WithLabelValues("range", "free")); got != 1 {
		t.Errorf("takes{range,free} = %v, want 1 (shared by the job's workers)", got)
	}
	if got := counterValue(t, ws[0].m.refused.WithLabelValues("take")); got != 1 {
		t.Errorf("refused{take} = %v, want 1", got)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, ws[0].m.releases.WithLabelValues("range")); got != 1 {
		t.Errorf("releases{range} = %v, want 1", got)
	}
	bad := prometheus.NewRegistry()
	bad.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "adclick", Subsystem: "lease", Name: "claim_takes_total",
		Help: "something else", ConstLabels: prometheus.Labels{"job": testJob}}))
	if _, err := NewWorker(api, WorkerOptions{Table: testTable, Job: testJob, Registerer: bad}); err == nil {
		t.Error("NewWorker on a registry with a clashing metric: got nil, want an error")
	}
}

func TestWorkerOptions(t *testing.T) {
	o := WorkerOptions{Table: "t-leases", Job: "j"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate after EnsureDefaults: %v", err)
	}
	if o.Duration != DefaultDuration || o.HandoffTimeout != 2*DefaultDuration || o.ID == "" {
		t.Errorf("defaults %+v, want D %v, handoff timeout 2D, an owner", o, DefaultDuration)
	}
	bad := WorkerOptions{Table: "x", Duration: time.Millisecond, HandoffTimeout: time.Microsecond}
	err := bad.Validate()
	for _, want := range []string{"table name", "job name", "worker id", "duration", "handoff timeout", "clock", "logger"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want it to name the %s", bad, err, want)
		}
	}
}
