package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/adclick/adclick/lease/leasetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the SDK's HTTP client (integration tests).
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// fakeClock is a Clock that moves only when Advance is called. Sleepers
// wake when the time reaches their deadline.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Duration
	sleepers map[*sleeper]bool
}

type sleeper struct {
	until time.Duration
	wake  chan struct{}
}

var wallOrigin = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{sleepers: map[*sleeper]bool{}} }

func (c *fakeClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Wall() time.Time { return wallOrigin.Add(c.Now()) }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c.mu.Lock()
	s := &sleeper{until: c.now + d, wake: make(chan struct{})}
	c.sleepers[s] = true
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.sleepers, s)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the clock by d and wakes every sleeper whose time has come.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
	for s := range c.sleepers {
		if s.until <= c.now {
			close(s.wake)
			delete(c.sleepers, s)
		}
	}
}

func (c *fakeClock) sleeping() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sleepers)
}

// waitSleepers waits (in real time, at most 10 s) until n goroutines sleep
// on the clock.
func (c *fakeClock) waitSleepers(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.sleeping() != n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d sleepers on the fake clock, want %d", c.sleeping(), n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// noSleepClock is a clock for acquisitions that must not wait: a Sleep
// fails the test.
type noSleepClock struct {
	*fakeClock
	t testing.TB
}

func (c noSleepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.t.Errorf("Sleep(%v) called: this acquisition must not wait", d)
	return errors.New("test: unexpected sleep")
}

const testTable = "leases"

// D is the lease duration of the unit tests (on the fake clock).
const D = 30 * time.Second

// newTable returns a Mem with the lease table.
func newTable(t testing.TB) *leasetest.Mem {
	t.Helper()
	m := leasetest.NewMem()
	if err := CreateTable(context.Background(), m, testTable); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	return m
}

func opts(owner string, clk Clock) Options {
	return Options{Table: testTable, Job: "s3-bucket/checkpoints/gen-1", Owner: owner, Duration: D, Clock: clk}
}

func mustAcquire(t testing.TB, api API, o Options) *Lease {
	t.Helper()
	l, err := Acquire(context.Background(), api, o)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", o.Owner, err)
	}
	return l
}

// rawItem reads the lease item of o from api.
func rawItem(t testing.TB, api API, o Options) map[string]types.AttributeValue {
	t.Helper()
	o.EnsureDefaults()
	out, err := api.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(o.Table), Key: map[string]types.AttributeValue{attrKey: avS(o.Key())}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	return out.Item
}

func decoded(t testing.TB, api API, o Options) item {
	t.Helper()
	it, err := decodeItem(rawItem(t, api, o))
	if err != nil {
		t.Fatalf("decode item: %v", err)
	}
	return it
}

// running is a Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startRun(l *Lease) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- l.Run(ctx) }()
	return r
}

// wait returns Run's result, failing the test if it takes more than 10 s.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// acquiring is an Acquire in a goroutine.
type acquiring struct {
	done chan struct{}
	l    *Lease
	err  error
}

func startAcquire(api API, o Options) *acquiring {
	a := &acquiring{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.l, a.err = Acquire(context.Background(), api, o)
	}()
	return a
}

func (a *acquiring) wait(t testing.TB) (*Lease, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.l, a.err
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return")
		return nil, nil
	}
}

func (a *acquiring) finished() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// faultAPI wraps an API: hooks can fail or alter UpdateItem calls.
type faultAPI struct {
	API
	mu sync.Mutex
	// update, if set, is called for every UpdateItem; it returns (handled,
	// err): when handled, err is returned instead of calling the inner API.
	update func(ctx context.Context, in *dynamodb.UpdateItemInput) (bool, error)
	calls  int
}

func (f *faultAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	f.calls++
	hook := f.update
	f.mu.Unlock()
	if hook != nil {
		if handled, err := hook(ctx, in); handled {
			return nil, err
		}
	}
	return f.API.UpdateItem(ctx, in, opt...)
}

func (f *faultAPI) setUpdate(h func(ctx context.Context, in *dynamodb.UpdateItemInput) (bool, error)) {
	f.mu.Lock()
	f.update = h
	f.mu.Unlock()
}

// errTransient stands for a 500 from DynamoDB.
var errTransient = &types.InternalServerError{Message: aws.String("test: internal server error")}

// counterValue returns a counter's value.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
