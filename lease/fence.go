package lease

import (
	"context"
	"fmt"

	"github.com/adclick/adclick/sink"
)

// Fence is what a fenced sink needs of a lease; *Lease implements it.
type Fence interface {
	// Check returns nil while writes are allowed (see (*Lease).Check).
	Check() error
	// Guard derives a context that ends when the lease does.
	Guard(ctx context.Context) (context.Context, context.CancelFunc)
}

var _ Fence = (*Lease)(nil)

// FenceRows returns rows with every write (Put, PutFinal, Remove, Delete)
// fenced by f: the write is refused with f's ErrLost error unless f.Check
// passes, and runs under f.Guard, so that its retries end when the lease
// does. Reads pass through. Wrap the row store once, before the flush, and
// every writer (the window subtasks, the flush, the recount) is fenced.
func FenceRows(rows sink.Rows, f Fence) sink.Rows { return fencedRows{rows, f} }

// FenceTotals is FenceRows for the running totals (SetTotals,
// DeleteTotals, ForgetEpochs are fenced; reads pass through). A store that
// writes back with a Sync(ctx) error method (the embedded one) keeps it,
// fenced too. A nil totals gives nil.
func FenceTotals(totals sink.Totals, f Fence) sink.Totals {
	if totals == nil {
		return nil
	}
	if s, ok := totals.(syncer); ok {
		return fencedSyncTotals{fencedTotals{totals, f}, s}
	}
	return fencedTotals{totals, f}
}

// syncer is a running-total store that writes back.
type syncer interface{ Sync(context.Context) error }

// fenced runs one write under f.
func fenced(ctx context.Context, f Fence, write func(context.Context) error) error {
	if err := f.Check(); err != nil {
		return err
	}
	gctx, cancel := f.Guard(ctx)
	defer cancel()
	err := write(gctx)
	if err != nil && ctx.Err() == nil {
		// A write cut short by the end of the lease reports the lease.
		if lerr := f.Check(); lerr != nil {
			return fmt.Errorf("%w (the write ended with: %v)", lerr, err)
		}
	}
	return err
}

type fencedRows struct {
	sink.Rows
	f Fence
}

func (r fencedRows) Put(ctx context.Context, puts []sink.Put) (refused int, err error) {
	err = fenced(ctx, r.f, func(ctx context.Context) error {
		var err error
		refused, err = r.Rows.Put(ctx, puts)
		return err
	})
	return refused, err
}

func (r fencedRows) PutFinal(ctx context.Context, puts []sink.FinalPut) (refused int, err error) {
	err = fenced(ctx, r.f, func(ctx context.Context) error {
		var err error
		refused, err = r.Rows.PutFinal(ctx, puts)
		return err
	})
	return refused, err
}

func (r fencedRows) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (ok bool, err error) {
	err = fenced(ctx, r.f, func(ctx context.Context) error {
		var err error
		ok, err = r.Rows.Remove(ctx, k, w, ckpt)
		return err
	})
	return ok, err
}

func (r fencedRows) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	err = fenced(ctx, r.f, func(ctx context.Context) error {
		var err error
		deleted, ok, err = r.Rows.Delete(ctx, k, w, ckpt)
		return err
	})
	return deleted, ok, err
}

type fencedTotals struct {
	sink.Totals
	f Fence
}

func (t fencedTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	return fenced(ctx, t.f, func(ctx context.Context) error { return t.Totals.SetTotals(ctx, ts) })
}

func (t fencedTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	return fenced(ctx, t.f, func(ctx context.Context) error { return t.Totals.DeleteTotals(ctx, keys) })
}

func (t fencedTotals) ForgetEpochs(ctx context.Context, from, to int64) error {
	return fenced(ctx, t.f, func(ctx context.Context) error { return t.Totals.ForgetEpochs(ctx, from, to) })
}

type fencedSyncTotals struct {
	fencedTotals
	s syncer
}

func (t fencedSyncTotals) Sync(ctx context.Context) error {
	return fenced(ctx, t.f, t.s.Sync)
}
