//go:build integration

package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/internal/testenv"
)

// dynaliteD is the lease duration against dynalite, on the real clock:
// short, with room in its validity (2D/3) for renewals to a dynalite that
// other packages' tests load at the same time, on a loaded machine (2 s
// leases lost renewals there).
const dynaliteD = 6 * time.Second

// localClient returns a client for the local DynamoDB stand-in.
func localClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint := testenv.DynamoDB(t)
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
	)
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// freshTable creates a lease table with a random name and deletes it when
// t ends.
func freshTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := fmt.Sprintf("ad_metrics_test_%016x%s", rand.Uint64(), TableSuffix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := CreateTable(ctx, c, name); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		if _, err := c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Errorf("delete table %s: %v", name, err)
		}
	})
	return name
}

func dynOpts(table, owner string) Options {
	return Options{Table: table, Job: "s3-bucket/checkpoints/gen-1", Owner: owner, Duration: dynaliteD}
}

func TestDynaliteCreateTable(t *testing.T) {
	c := localClient(t)
	table := freshTable(t, c)
	if err := CreateTable(context.Background(), c, table); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	out, err := c.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(out.Table); err != nil {
		t.Errorf("created table: %v", err)
	}
}

// Acquire, renew, refuse a second owner, release, acquire at once.
func TestDynaliteAcquireRenewRelease(t *testing.T) {
	c := localClient(t)
	table := freshTable(t, c)
	ctx := context.Background()
	a := mustAcquire(t, c, dynOpts(table, "a"))
	run := startRun(a)
	time.Sleep(2 * dynaliteD)
	if err := a.Check(); err != nil {
		t.Fatalf("Check() while renewing: %v", err)
	}
	if got := a.Counter(); got < 4 {
		t.Errorf("counter %d after 2 D of renewals every D/3, want at least 4", got)
	}

	start := time.Now()
	_, err := Acquire(ctx, c, dynOpts(table, "b"))
	var held *HeldError
	if !errors.As(err, &held) || held.Owner != "a" {
		t.Fatalf("second Acquire: got %v, want a HeldError naming a", err)
	}
	if d := time.Since(start); d < dynaliteD {
		t.Errorf("refused after %v, before watching for D (%v)", d, dynaliteD)
	}
	if err := a.Check(); err != nil {
		t.Errorf("holder's Check() after the refusal: %v", err)
	}

	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := run.wait(t); err != nil {
		t.Errorf("Run after Release: %v", err)
	}
	start = time.Now()
	b := mustAcquire(t, c, dynOpts(table, "b"))
	if d := time.Since(start); d > dynaliteD/2 {
		t.Errorf("acquiring a released lease took %v, want no wait", d)
	}
	if it := decoded(t, c, dynOpts(table, "b")); it.owner != "b" || it.counter != b.Counter() {
		t.Errorf("item owner %q counter %d, want b %d", it.owner, it.counter, b.Counter())
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// A holder that stops renewing is taken over after D; its Check fails and
// its next renewal is refused by DynamoDB's condition.
func TestDynaliteTakeover(t *testing.T) {
	c := localClient(t)
	table := freshTable(t, c)
	a := mustAcquire(t, c, dynOpts(table, "a")) // never renews
	start := time.Now()
	b := mustAcquire(t, c, dynOpts(table, "b"))
	if d := time.Since(start); d < dynaliteD {
		t.Errorf("took over after %v, before watching for D (%v)", d, dynaliteD)
	}
	if b.Counter() != a.Counter()+1 {
		t.Errorf("taker's counter %d, want the holder's %d + 1", b.Counter(), a.Counter())
	}
	if err := a.Check(); !errors.Is(err, ErrLost) {
		t.Errorf("old holder's Check() = %v, want ErrLost", err)
	}
	// The old holder's renewal, sent anyway, is refused by the condition.
	_, err := c.UpdateItem(context.Background(), a.update(condHeld, updRenew, map[string]types.AttributeValue{
		":o": avS("a"), ":c": avN(a.Counter()), ":n": avN(a.Counter() + 1), ":r": avS("now"), ":d": avN(1),
	}))
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Errorf("old holder's renewal: got %v, want ConditionalCheckFailedException", err)
	}
	runB := startRun(b)
	if err := startRun(a).wait(t); !errors.Is(err, ErrLost) {
		t.Errorf("old holder's Run = %v, want ErrLost", err)
	}
	time.Sleep(dynaliteD)
	if err := b.Check(); err != nil {
		t.Errorf("new holder's Check(): %v", err)
	}
	if err := runB.stop(t); err != nil {
		t.Errorf("new holder's Run: %v", err)
	}
	if err := b.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// Takers at once: DynamoDB's conditional writes let exactly one win; the
// winner renews at once, so takers that found it held and watched it are
// refused too.
func TestDynaliteConcurrentTakers(t *testing.T) {
	c := localClient(t)
	table := freshTable(t, c)
	const n = 6
	var wg sync.WaitGroup
	results := make([]error, n)
	leases := make([]*Lease, n)
	runs := make([]*running, n)
	for i := range n {
		wg.Go(func() {
			leases[i], results[i] = Acquire(context.Background(), c, dynOpts(table, fmt.Sprintf("taker-%d", i)))
			if results[i] == nil {
				runs[i] = startRun(leases[i])
			}
		})
	}
	wg.Wait()
	var winner string
	won := 0
	for i, err := range results {
		if err == nil {
			won++
			winner = leases[i].Owner()
		}
	}
	if won != 1 {
		t.Fatalf("%d takers won, want exactly 1 (results %v)", won, results)
	}
	for i, err := range results {
		var held *HeldError
		switch {
		case err == nil:
			if err := runs[i].stop(t); err != nil {
				t.Errorf("winner's Run: %v", err)
			}
			if err := leases[i].Release(context.Background()); err != nil {
				t.Errorf("Release: %v", err)
			}
		case !errors.As(err, &held):
			t.Errorf("Acquire: %v, want success or a HeldError", err)
		case held.Owner != winner:
			t.Errorf("a loser was told the lease is held by %q, want the winner %q", held.Owner, winner)
		}
	}
}
