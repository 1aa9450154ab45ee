// Package fence refuses a store's writes unless a lease allows them: the
// row store, the running totals, the lake and the checkpoint store are all
// wrapped, so that a process that lost its job lease (package lease) writes
// nothing more. A Fence is anything that can say whether writes are allowed
// and end a write's context when that stops being true.
package fence

import (
	"context"
	"fmt"

	"github.com/adclick/adclick/sink"
)

// Fence is what a fenced store needs of a lease; *lease.Lease implements
// it.
type Fence interface {
	// Check returns nil while writes are allowed, and the reason (the
	// lease's error) once they are not.
	Check() error
	// Guard derives a context that ends when the lease does.
	Guard(ctx context.Context) (context.Context, context.CancelFunc)
}

// Rows returns rows with every write (Put, PutFinal, Remove, Delete)
// fenced by f: the write is refused with f.Check's error unless it
// passes, and runs under f.Guard, so that its retries end when the lease
// does. Reads pass through. Wrap the row store once, before the flush, and
// every writer (the window subtasks, the flush, the recount) is fenced. A
// store that is a sink.FencedRows keeps RemoveFenced and DeleteFenced,
// fenced too (the result is then a sink.FencedRows).
func Rows(rows sink.Rows, f Fence) sink.Rows {
	if fr, ok := rows.(sink.FencedRows); ok {
		return fencedTokenRows{fencedRows{rows, f}, fr}
	}
	return fencedRows{rows, f}
}

// Totals is Rows for the running totals (SetTotals,
// DeleteTotals, ForgetEpochs are fenced; reads pass through). A store that
// writes back with a Sync(ctx) error method (the embedded one) keeps it,
// fenced too. A nil totals gives nil.
func Totals(totals sink.Totals, f Fence) sink.Totals {
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

// Run runs one write under f: refused unless f.Check passes, run under
// f.Guard, and an error of a write cut short by the end of the lease
// reports the lease. Stores other than rows and totals fence their writes
// with it.
func Run(ctx context.Context, f Fence, write func(context.Context) error) error {
	if err := f.Check(); err != nil {
		return err
	}
	gctx, cancel := f.Guard(ctx)
	defer cancel()
	err := write(context.WithValue(gctx, fenceKey{}, f))
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
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		refused, err = r.Rows.Put(ctx, puts)
		return err
	})
	return refused, err
}

func (r fencedRows) PutFinal(ctx context.Context, puts []sink.FinalPut) (refused int, err error) {
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		refused, err = r.Rows.PutFinal(ctx, puts)
		return err
	})
	return refused, err
}

func (r fencedRows) Remove(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (ok bool, err error) {
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		ok, err = r.Rows.Remove(ctx, k, w, ckpt)
		return err
	})
	return ok, err
}

func (r fencedRows) Delete(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64) (deleted, ok bool, err error) {
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		deleted, ok, err = r.Rows.Delete(ctx, k, w, ckpt)
		return err
	})
	return deleted, ok, err
}

type fencedTokenRows struct {
	fencedRows
	fr sink.FencedRows
}

func (r fencedTokenRows) RemoveFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (ok bool, err error) {
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		ok, err = r.fr.RemoveFenced(ctx, k, w, ckpt, t)
		return err
	})
	return ok, err
}

func (r fencedTokenRows) DeleteFenced(ctx context.Context, k sink.Key, w sink.Writer, ckpt int64, t sink.Token) (deleted, ok bool, err error) {
	err = Run(ctx, r.f, func(ctx context.Context) error {
		var err error
		deleted, ok, err = r.fr.DeleteFenced(ctx, k, w, ckpt, t)
		return err
	})
	return deleted, ok, err
}

type fencedTotals struct {
	sink.Totals
	f Fence
}

func (t fencedTotals) SetTotals(ctx context.Context, ts []sink.Total) error {
	return Run(ctx, t.f, func(ctx context.Context) error { return t.Totals.SetTotals(ctx, ts) })
}

func (t fencedTotals) DeleteTotals(ctx context.Context, keys []sink.TotalKey) error {
	return Run(ctx, t.f, func(ctx context.Context) error { return t.Totals.DeleteTotals(ctx, keys) })
}

func (t fencedTotals) ForgetEpochs(ctx context.Context, from, to int64) error {
	return Run(ctx, t.f, func(ctx context.Context) error { return t.Totals.ForgetEpochs(ctx, from, to) })
}

type fencedSyncTotals struct {
	fencedTotals
	s syncer
}

func (t fencedSyncTotals) Sync(ctx context.Context) error {
	return Run(ctx, t.f, t.s.Sync)
}
