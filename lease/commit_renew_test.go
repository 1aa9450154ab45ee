package lease

import (
	"github.com/adclick/adclick/lease/leasetest"
	"github.com/adclick/adclick/windowing"

	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// blockingCommits is a lease table whose commits (UpdateItem setting the
// checkpoint) hang until release is closed or their context ends: a
// DynamoDB too slow to answer one request.
type blockingCommits struct {
	*leasetest.Mem
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (b *blockingCommits) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasPrefix(aws.ToString(in.UpdateExpression), updCommit) {
		b.once.Do(func() { close(b.entered) })
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Mem.UpdateItem(ctx, in, opt...)
}

// A commit that hangs does not hold up the renewals: the holder renews
// every D/3 while the commit waits, keeps its lease past the validity of
// the renewal before the commit, and the commit then lands (before, Renew
// waited for the commit's lock, no renewal was sent, and the lease lapsed).
func TestSlowCommitDoesNotStopRenewals(t *testing.T) {
	clk := newFakeClock()
	api := &blockingCommits{Mem: newTable(t), entered: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(api.release) }) }
	defer unblock()
	w := newWorker(t, api, testTable, "a", clk)
	ctx := context.Background()
	r := Range{From: 0, To: windowing.MaxParallelism}
	if err := w.Setup(ctx, []Range{r}); err != nil {
		t.Fatal(err)
	}
	c := mustTake(t, w, itemOf(t, mustScan(t, w), RangeKey(testJob, r)))
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(rctx) }()
	defer func() {
		unblock() // a Run waiting for the commit (the bug) ends too
		stop()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	clk.waitSleepers(t, 1)

	cp := Checkpoint{ID: 7, Key: "manifests/7", Watermark: 1234}
	commitDone := make(chan error, 1)
	go func() { commitDone <- c.Commit(ctx, cp) }()
	select {
	case <-api.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit never reached the table")
	}
	// Three renewal periods (a whole lease duration) with the commit in
	// flight: each must renew.
	for i := range 3 {
		before := c.Counter()
		clk.Advance(D / 3)
		deadline := time.Now().Add(10 * time.Second)
		for c.Counter() == before {
			if time.Now().After(deadline) {
				t.Fatalf("renewal %d: got counter %d after a renewal period with a commit in flight, want %d", i+1, c.Counter(), before+1)
			}
			time.Sleep(time.Millisecond)
		}
		clk.waitSleepers(t, 1)
	}
	if err := c.Check(); err != nil {
		t.Fatalf("Check after a lease duration of renewals beside a hanging commit: %v, want nil", err)
	}
	unblock()
	select {
	case err := <-commitDone:
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the commit did not return")
	}
	if got := c.Item().Checkpoint; got != cp {
		t.Errorf("checkpoint after the commit: got %+v, want %+v", got, cp)
	}
	if got := itemOf(t, mustScan(t, w), c.Key()).Checkpoint; got != cp {
		t.Errorf("checkpoint in the table: got %+v, want %+v", got, cp)
	}
}

// The answers of a renewal and a commit that ran at once fold in either
// order: the counter of the renewal, the checkpoint of the commit.
func TestFoldItem(t *testing.T) {
	renewed := Item{Counter: 5, Checkpoint: Checkpoint{ID: 3}, EpochHigh: 4, HandoffTo: "b"}
	committed := Item{Counter: 4, Checkpoint: Checkpoint{ID: 4, Key: "k4"}, EpochHigh: 5}
	want := Item{Counter: 5, Checkpoint: Checkpoint{ID: 4, Key: "k4"}, EpochHigh: 5, HandoffTo: "b"}
	for _, tc := range []struct {
		name string
		a, b Item
	}{{"renewal first", renewed, committed}, {"commit first", committed, renewed}} {
		got := foldItem(tc.a, tc.b)
		if got.Counter != want.Counter || got.Checkpoint != want.Checkpoint || got.EpochHigh != want.EpochHigh || got.HandoffTo != want.HandoffTo {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}
}
