package flush

import (
	"context"
	"errors"

	"github.com/adclick/adclick/sink"
)

// SweepDecide returns what the second sweep of a blue/green switch does
// with writer w's attributes on it: if they were written by generation gen
// (<w>_gen == gen) at or after savepoint since (<w>_ckpt ≥ since), they go
// (DeleteItem for fast_* on a minute item, which the store turns into a
// removal if the item carries anything else; RemoveAttrs otherwise), and
// otherwise Keep. Attributes of another generation are never touched, which
// is why the generation is kept per writer (fast_gen, late_gen): job_gen on
// its own cannot tell an old version's late_* from a new version's fast_*
// on the same item (seed 001 Part 9, the caveat). Pure: no I/O, no clock.
func SweepDecide(it sink.Item, w sink.Writer, gen, since int64) Action {
	if w != sink.Fast && w != sink.Late {
		return Action{Kind: Keep, Writer: w}
	}
	a := it.Attrs(w)
	act := Action{Kind: Keep, Writer: w, Ckpt: a.Ckpt}
	if !a.Present || a.Gen != gen || a.Ckpt < since {
		return act
	}
	act.Kind = RemoveAttrs
	if _, hour, err := sink.ParseBucket(it.Bucket); err == nil && !hour && w == sink.Fast && !carriesOther(it, w) {
		act.Kind = DeleteItem
	}
	return act
}

// Sweep is the second sweep of a blue/green switch (seed 001 Part 9): once
// the old version (generation o.Gen) has stopped writing, it removes what
// that version wrote since the savepoint o.Since the new version started
// from. For every epoch in [o.Since, o.High], every index shard and each
// writer it queries the tag index and applies SweepDecide; a minute item
// left with nothing else is deleted. Deletes and removes are conditioned on
// the <w>_ckpt seen; an item found changed is read again and decided again.
// With o.FenceGen set they also carry the sweeping job's token (o.FenceGen,
// o.Fence), and an item a newer owner of that generation wrote is left
// alone (Report.Superseded).
//
// Running totals are left alone: they carry no generation, and the live
// new version rewrites every open window's total with its own values at
// each early firing. totals is accepted so that the runtime wires Sweep as
// it wires Full, and is not modified. (A total the old version wrote for a
// window the new version never writes stays until it expires; see the
// package's report.)
//
// Sweep is idempotent and restartable, rate-limited like Full, and logs one
// line with its Report. It must run only after the old version has stopped:
// the store's conditions check the tag, not the generation, so a write of
// the new version that lands on the same item with the same tag between the
// sweep's read and its write would be removed too.
func Sweep(ctx context.Context, rows sink.Rows, totals sink.Totals, o SweepOptions) (Report, error) {
	_ = totals // totals carry no generation; the live job rewrites them
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	if rows == nil {
		return Report{}, errors.New("flush: no row store")
	}
	var tok *sink.Token
	if o.FenceGen != 0 {
		tok = &sink.Token{Gen: o.FenceGen, Fence: o.Fence}
		var err error
		if rows, err = fencedRows(rows, *tok); err != nil {
			return Report{}, err
		}
	}
	l := o.limits()
	r := newRunner(rows, &l, "sweep", newMetrics(o.Registerer))
	r.tok = tok
	s := &sweepRun{runner: r, gen: o.Gen, since: o.Since}
	err := r.eachIndexed(ctx, o.Since, o.High, s.item)
	rep := r.finish(o.High - o.Since + 1)
	r.m.observe("sweep", rep, err)
	attrs := []any{"gen", o.Gen, "since", o.Since, "high", o.High, "fence_gen", o.FenceGen, "fence", o.Fence, "report", rep}
	if err != nil {
		o.Logger.Error("sweep failed; run it again", append(attrs, "err", err)...)
		return rep, err
	}
	o.Logger.Info("sweep done", attrs...)
	return rep, nil
}

// sweepRun is the state of one Sweep call.
type sweepRun struct {
	*runner
	gen, since int64
}

func (s *sweepRun) item(ctx context.Context, it sink.Item, w sink.Writer) error {
	for attempt := 1; ; attempt++ {
		act := SweepDecide(it, w, s.gen, s.since)
		if act.Kind == Keep || s.superseded(it) {
			return nil
		}
		applied, err := s.undo(ctx, it.Key, w, act)
		if err != nil || applied {
			return err
		}
		if attempt == maxAttempts {
			s.rep.Refused++
			return nil
		}
		next, ok, err := s.get(ctx, it.Key)
		if err != nil || !ok {
			return err
		}
		it = next
	}
}
