package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/runtime"
	"github.com/adclick/adclick/windowing"
)

// DefaultSweepDelay is Options.SweepDelay's default: AWS refuses a request
// that arrives more than 5 minutes (DynamoDB) or 15 minutes (S3) after its
// signature time, so 20 minutes after a takeover nothing the old holder
// signed before it can land any more (docs/scale-out.md §6.5.3).
const DefaultSweepDelay = 20 * time.Minute

// oweSweep records in the range's lease item, before its pipeline writes
// anything, the fence sweep a takeover owes: the epochs from the committed
// checkpoint to the epoch high the take read, which the old holder may
// still be writing. Sweeps owed by the holder taken over (which did not
// finish them) stay in the list, oldest first. Recording before the
// restore means a crash of this holder passes the obligation on: the next
// take reads it, with the same or a wider range of epochs.
func (f *Fleet) oweSweep(ctx context.Context, r windowing.KeyGroups, c *lease.Claim) error {
	prev, ok := c.TookOver()
	if !ok {
		return nil
	}
	it := c.Item()
	s := lease.SweepDue{Fence: prev, From: it.Checkpoint.ID, To: max(it.EpochHigh, it.Checkpoint.ID),
		NotBefore: time.Now().Add(f.o.SweepDelay).UTC().Truncate(time.Millisecond)}
	if err := c.SetSweepsDue(ctx, append(it.SweepsDue, s)); err != nil {
		return fmt.Errorf("fleet: range %s: record the fence sweep its takeover owes: %w", r, err)
	}
	f.log.Info("fence sweep owed", "range", r.String(), "of_fence", prev, "from_epoch", s.From, "to_epoch", s.To,
		"not_before", s.NotBefore, "owed", len(it.SweepsDue)+1)
	return nil
}

// SweepsDue returns the sweeps owed as the range's item holds them (after
// oweSweep, this holder's own included).
func (c claimLease) SweepsDue() []runtime.Sweep {
	ss := c.Item().SweepsDue
	out := make([]runtime.Sweep, len(ss))
	for i, s := range ss {
		out[i] = runtime.Sweep{Fence: s.Fence, From: s.From, To: s.To, NotBefore: s.NotBefore}
	}
	return out
}

// SweepsDone records the sweeps still owed.
func (c claimLease) SweepsDone(ctx context.Context, left []runtime.Sweep) error {
	ss := make([]lease.SweepDue, len(left))
	for i, s := range left {
		ss[i] = lease.SweepDue{Fence: s.Fence, From: s.From, To: s.To, NotBefore: s.NotBefore}
	}
	return c.SetSweepsDue(ctx, ss)
}

var _ runtime.SweepLease = claimLease{}
