package fence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/adclick/adclick/sink"
)

// recordRows is a sink.Rows and sink.Totals that records the writes it
// gets; block, if set, makes Put wait until its context ends.
type recordRows struct {
	sink.Rows
	sink.Totals
	mu     sync.Mutex
	writes []string
	block  bool
	synced bool
}

func (r *recordRows) record(op string) {
	r.mu.Lock()
	r.writes = append(r.writes, op)
	r.mu.Unlock()
}

func (r *recordRows) Put(ctx context.Context, puts []sink.Put) (int, error) {
	r.record("put")
	if r.block {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 1, nil
}

func (r *recordRows) PutFinal(context.Context, []sink.FinalPut) (int, error) {
	r.record("put_final")
	return 0, nil
}

func (r *recordRows) Remove(context.Context, sink.Key, sink.Writer, int64) (bool, error) {
	r.record("remove")
	return true, nil
}

func (r *recordRows) Delete(context.Context, sink.Key, sink.Writer, int64) (bool, bool, error) {
	r.record("delete")
	return true, true, nil
}

func (r *recordRows) Get(context.Context, sink.Key) (sink.Item, bool, error) {
	r.record("get")
	return sink.Item{}, false, nil
}

func (r *recordRows) SetTotals(context.Context, []sink.Total) error {
	r.record("set_totals")
	return nil
}

func (r *recordRows) DeleteTotals(context.Context, []sink.TotalKey) error {
	r.record("delete_totals")
	return nil
}

func (r *recordRows) ForgetEpochs(context.Context, int64, int64) error {
	r.record("forget_epochs")
	return nil
}

func (r *recordRows) Sync(context.Context) error {
	r.record("sync")
	return nil
}

func (r *recordRows) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

// writeAll sends one of each call through rows and totals and returns the
// errors of the writes.
func writeAll(ctx context.Context, rows sink.Rows, totals sink.Totals) []error {
	var errs []error
	_, err := rows.Put(ctx, []sink.Put{{}})
	errs = append(errs, err)
	_, err = rows.PutFinal(ctx, nil)
	errs = append(errs, err)
	_, err = rows.Remove(ctx, sink.Key{}, sink.Fast, 1)
	errs = append(errs, err)
	_, _, err = rows.Delete(ctx, sink.Key{}, sink.Fast, 1)
	errs = append(errs, err)
	errs = append(errs, totals.SetTotals(ctx, nil), totals.DeleteTotals(ctx, nil), totals.ForgetEpochs(ctx, 0, 1),
		totals.(interface{ Sync(context.Context) error }).Sync(ctx))
	_, _, _ = rows.Get(ctx, sink.Key{}) // a read: never fenced
	return errs
}

// errLost is the reason the fake lease gives once lost.
var errLost = errors.New("test lease: lost")

// fakeLease is a Fence held until lose is called: Check then fails and
// every Guard context ends.
type fakeLease struct {
	mu     sync.Mutex
	err    error
	ended  context.Context
	cancel context.CancelFunc
}

func newFakeLease() *fakeLease {
	ctx, cancel := context.WithCancel(context.Background())
	return &fakeLease{ended: ctx, cancel: cancel}
}

func (l *fakeLease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *fakeLease) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ended, cancel)
	return gctx, func() { stop(); cancel() }
}

func (l *fakeLease) lose() {
	l.mu.Lock()
	l.err = errLost
	l.mu.Unlock()
	l.cancel()
}

func TestFenceWrites(t *testing.T) {
	l := newFakeLease()
	inner := &recordRows{}
	rows, totals := Rows(inner, l), Totals(inner, l)
	for _, err := range writeAll(context.Background(), rows, totals) {
		if err != nil {
			t.Errorf("write under a held lease: %v", err)
		}
	}
	all := []string{"put", "put_final", "remove", "delete", "set_totals", "delete_totals", "forget_epochs", "sync", "get"}
	if got := inner.got(); !slices.Equal(got, all) {
		t.Errorf("inner store got %v, want %v", got, all)
	}

	l.lose() // Check fails: nothing is written
	inner.writes = nil
	for i, err := range writeAll(context.Background(), rows, totals) {
		if !errors.Is(err, errLost) {
			t.Errorf("write %s after the lease was lost: got %v, want the lease's error", all[i], err)
		}
	}
	if got := inner.got(); len(got) != 1 || got[0] != "get" {
		t.Errorf("inner store got %v after the lease was lost, want only the read", got)
	}
	if Totals(nil, l) != nil {
		t.Error("Totals(nil) is not nil")
	}
}

// A write in progress when the lease is lost is cancelled, and reports the
// lease.
func TestFenceCancelsWriteInFlight(t *testing.T) {
	l := newFakeLease()
	inner := &recordRows{block: true}
	rows := Rows(inner, l)
	done := make(chan error, 1)
	go func() {
		_, err := rows.Put(context.Background(), []sink.Put{{}})
		done <- err
	}()
	for len(inner.got()) == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	l.lose()
	select {
	case err := <-done:
		if !errors.Is(err, errLost) {
			t.Errorf("write in flight when the lease was lost: got %v, want the lease's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write in flight was not cancelled when the lease ended")
	}
}

// Run refuses a write once the lease is lost, and passes the write's own
// error through while it is held.
func TestRun(t *testing.T) {
	l := newFakeLease()
	errWrite := errors.New("write failed")
	ran := 0
	if err := Run(context.Background(), l, func(context.Context) error { ran++; return errWrite }); !errors.Is(err, errWrite) || errors.Is(err, errLost) {
		t.Errorf("failing write under a held lease: got %v, want only its own error", err)
	}
	l.lose()
	if err := Run(context.Background(), l, func(context.Context) error { ran++; return nil }); !errors.Is(err, errLost) {
		t.Errorf("write after the lease was lost: got %v, want the lease's error", err)
	}
	if ran != 1 {
		t.Errorf("%d writes ran, want 1 (the one under the held lease)", ran)
	}
}

// tokenRows is recordRows that also takes fence tokens.
type tokenRows struct{ recordRows }

func (r *tokenRows) RemoveFenced(context.Context, sink.Key, sink.Writer, int64, sink.Token) (bool, error) {
	r.record("remove_fenced")
	return true, nil
}

func (r *tokenRows) DeleteFenced(context.Context, sink.Key, sink.Writer, int64, sink.Token) (bool, bool, error) {
	r.record("delete_fenced")
	return true, true, nil
}

// A store that takes fence tokens keeps RemoveFenced and DeleteFenced
// through Rows, under the lease too; one that does not stays without.
func TestFenceKeepsTokens(t *testing.T) {
	if _, ok := Rows(&recordRows{}, newFakeLease()).(sink.FencedRows); ok {
		t.Fatal("Rows of a store without tokens is a sink.FencedRows")
	}
	l := newFakeLease()
	inner := &tokenRows{}
	fr, ok := Rows(inner, l).(sink.FencedRows)
	if !ok {
		t.Fatal("Rows of a sink.FencedRows is not one")
	}
	ctx := context.Background()
	tok := sink.Token{Gen: 1, Fence: 2}
	call := func() []error {
		_, err1 := fr.RemoveFenced(ctx, sink.Key{}, sink.Fast, 1, tok)
		_, _, err2 := fr.DeleteFenced(ctx, sink.Key{}, sink.Fast, 1, tok)
		return []error{err1, err2}
	}
	for _, err := range call() {
		if err != nil {
			t.Errorf("fenced removal under a held lease: %v", err)
		}
	}
	if got, want := inner.got(), []string{"remove_fenced", "delete_fenced"}; !slices.Equal(got, want) {
		t.Errorf("inner store got %v, want %v", got, want)
	}
	l.lose()
	for _, err := range call() {
		if !errors.Is(err, errLost) {
			t.Errorf("fenced removal after the lease was lost: got %v, want the lease's error", err)
		}
	}
	if got := inner.got(); len(got) != 2 {
		t.Errorf("inner store got %v after the lease was lost, want nothing more", got)
	}
}
