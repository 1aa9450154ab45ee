package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// FenceMarks is the rows table's record of the fences taken (see
// sink.FenceAheadError): for each generation and key group, the highest
// fence a range covering the key group has taken. sink/dynamo's Store and
// sinktest.MemFenceMarks implement it. It ties the lease table's fences to
// the rows table: a range's writes carry its take's fence, and the rows
// refuse a write under a lower fence than theirs, so fences that start
// again at 1 (a recreated lease table, another job writing the same rows
// under the same job_gen) would have every write refused, with nothing
// but a metric to show for it.
type FenceMarks interface {
	// Table names the rows table, for messages.
	Table() string
	// RaiseFenceMark raises the marks of key groups [from, to) under gen
	// to fence, or refuses with an error wrapping a *sink.FenceAheadError
	// if one of them is above fence.
	RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error
	// FenceMarks returns gen's marks by key group.
	FenceMarks(ctx context.Context, gen int64) (map[int]int64, error)
}

// ErrFencesBehind reports a lease table whose fences are behind those the
// rows table has seen under the same job_gen: a start that checked the
// fence marks refuses with an error wrapping it.
var ErrFencesBehind = errors.New("fleet: the lease table's fences are behind the rows table's")

// fencesFix is what the refusals say happened and what to do.
const fencesFix = "probably the lease table was recreated, or another job writes this rows table under the same --job-gen; " +
	"start with a higher --job-gen (a new generation's writes win over the old ones), " +
	"or point --lease-table and --sink at the tables this job wrote"

// jobGen is Options.JobGen with its default.
func (f *Fleet) jobGen() int64 {
	if f.o.JobGen == 0 {
		return 1
	}
	return f.o.JobGen
}

// checkFenceMarks is the check at the worker's start: it reads the fence
// marks of the job's generation, then the lease table, and refuses (an
// error wrapping ErrFencesBehind) if a key group's mark is above the
// counter of every range item covering it. A take writes fence = counter
// + 1, and counters only rise, so a lease table that has issued a fence
// has a counter at least as high on the range that took it; the marks are
// read first, so a raise that lands meanwhile has its take's counter in
// the lease table read after. A key group that no range item covers (no
// ranges map yet, a malformed item) is left to the check of each take.
// Without Options.FenceMarks there is nothing to check. A stop (ctx done)
// during the check is no refusal.
func (f *Fleet) checkFenceMarks(ctx context.Context) error {
	if f.o.FenceMarks == nil {
		return nil
	}
	gen := f.jobGen()
	err := func() error {
		if gen < 0 {
			return fmt.Errorf("fleet: job_gen %d must not be negative", gen)
		}
		marks, err := f.o.FenceMarks.FenceMarks(ctx, gen)
		if err != nil {
			return fmt.Errorf("fleet: read the fence marks of rows table %s: %w", f.o.FenceMarks.Table(), err)
		}
		if len(marks) == 0 {
			return nil
		}
		scan, err := f.w.Scan(ctx)
		if err != nil {
			return fmt.Errorf("fleet: read the lease table to check the fence marks: %w", err)
		}
		b, ok := fenceBehind(marks, scan.Items)
		if !ok {
			return nil
		}
		return fmt.Errorf("fleet: refusing to start: rows table %s holds fence mark %d for key group %d under job_gen %d, "+
			"above counter %d of range %s in lease table %s, so a range taking the key group from this lease table would write "+
			"under a lower fence than the rows hold, and its writes would be refused; %s: %w",
			f.o.FenceMarks.Table(), b.mark, b.kg, gen, b.counter, b.r, f.w.Options().Table, fencesFix, ErrFencesBehind)
	}()
	if err != nil && ctx.Err() != nil {
		return nil // stopping
	}
	return err
}

// behind is a key group whose fence mark is above the lease table's
// counters: the range item covering it with the highest counter.
type behind struct {
	kg            int
	mark, counter int64
	r             lease.Range
}

// fenceBehind returns the lowest key group whose mark is above the counter
// of every range item in items that covers it; key groups no range item
// covers are not judged. ok is false when there is none.
func fenceBehind(marks map[int]int64, items []lease.Item) (b behind, ok bool) {
	for kg := range windowing.MaxParallelism {
		m, marked := marks[kg]
		if !marked {
			continue
		}
		var top *lease.Item
		for i := range items {
			it := &items[i]
			if it.Kind != lease.KindRange || !it.Exists || !it.Range.Contains(kg) {
				continue
			}
			if top == nil || it.Counter > top.Counter {
				top = it
			}
		}
		if top != nil && m > top.Counter {
			return behind{kg: kg, mark: m, counter: top.Counter, r: top.Range}, true
		}
	}
	return behind{}, false
}

// raiseFenceMark is the check of each take, before its range pipeline
// writes anything: it raises the fence marks of the range's key groups to
// the claim's fence, and refuses the range (an error wrapping
// ErrFencesBehind and the store's *sink.FenceAheadError) if a mark is
// above it. cfg is the range's configuration: its job_gen (default 1)
// must be the worker's (Options.JobGen). Without Options.FenceMarks there
// is nothing to raise.
func (f *Fleet) raiseFenceMark(ctx context.Context, p *pipeline, cfg runtime.Config) error {
	if f.o.FenceMarks == nil {
		return nil
	}
	gen := cfg.JobGen
	if gen == 0 {
		gen = 1
	}
	if gen != f.jobGen() {
		return fmt.Errorf("fleet: range %s: its configuration has job_gen %d, the worker's fence marks are checked under job_gen %d (Options.JobGen)",
			p.r, gen, f.jobGen())
	}
	r, fence := p.claim.Range(), p.claim.Fence()
	err := f.o.FenceMarks.RaiseFenceMark(ctx, gen, r.From, r.To, fence)
	if err == nil {
		return nil
	}
	var ahead *sink.FenceAheadError
	if !errors.As(err, &ahead) {
		return fmt.Errorf("fleet: range %s: raise the fence mark to %d in rows table %s: %w", p.r, fence, f.o.FenceMarks.Table(), err)
	}
	return fmt.Errorf("fleet: range %s taken with fence %d from lease table %s, but rows table %s holds fence mark %d "+
		"for key group %d under job_gen %d, so the range's writes would be refused; %s: %w: %w",
		p.r, fence, f.w.Options().Table, f.o.FenceMarks.Table(), ahead.Mark, ahead.KeyGroup, gen, fencesFix, ErrFencesBehind, err)
}
