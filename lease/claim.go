package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/adclick/adclick/sink/fence"
)

// Claim is one lease a Worker holds: a range, its slot, or the recount
// lease, from a successful Take until it is lost, released or retired. It
// keeps the job lease's rules (see Lease): renewals every D/3 conditional
// on owner and counter, Check passing for 2D/3 after the last successful
// renewal was sent, Guard's contexts ending with the lease. Its writes to
// its own item that do not move the counter (open epoch, commit, sweep due)
// are conditional on owner and fence instead, so they never disturb a
// renewal and are refused once another take has happened. No write holds
// a lock while it waits for the table: a renewal never waits for a slow
// commit (nor a commit for a renewal), and the answers of writes that ran
// at the same time are folded (the counter and validity only rise, the
// checkpoint and epoch high only rise). *Claim implements fence.Fence.
// Safe for concurrent use; Run may run once at a time.
type Claim struct {
	w     *Worker
	owner string // this tenure's owner string, "<worker id>~<nonce>"
	key   string
	kind  Kind
	rng   Range
	fence int64
	// prevFence is the fence of the holder this take took over (the item
	// was held, not released, when it was taken); 0 otherwise.
	prevFence int64

	running atomic.Bool

	mu        sync.Mutex
	counter   int64         // the counter of this holder's last write
	validFrom time.Duration // Clock.Now before sending the last successful take or renewal
	confirmed bool          // validFrom is set: a take or renewal was seen to succeed
	item      Item          // the item as last written or read
	err       error         // set once lost, released or retired: what Check returns from then on
	taken     bool          // lost to another owner: Release has nothing to give up
	released  bool          // released or retired by this holder

	ended    context.Context
	endCause context.CancelCauseFunc
}

// A held claim fences its holder's writes (package fence).
var _ fence.Fence = (*Claim)(nil)

func newClaim(w *Worker, it Item, owner string, f int64) *Claim {
	ended, endCause := context.WithCancelCause(context.Background())
	return &Claim{w: w, owner: owner, key: it.Key, kind: it.Kind, rng: it.Range, fence: f, counter: it.Counter, item: it,
		ended: ended, endCause: endCause}
}

// TookOver returns the fence of the holder this claim's take took over,
// and whether it did: the item was still held by a holder that had stopped
// renewing, which may be paused rather than dead and still land writes it
// signed before (a fence sweep is owed). A take of a released item, or of
// a handoff, took over nobody.
func (c *Claim) TookOver() (fence int64, ok bool) { return c.prevFence, c.prevFence > 0 }

// Key returns the lease key.
func (c *Claim) Key() string { return c.key }

// Owner returns the owner string of this tenure, "<worker id>~<nonce>".
func (c *Claim) Owner() string { return c.owner }

// Kind returns what the lease stands for.
func (c *Claim) Kind() Kind { return c.kind }

// Range returns the key groups of a range's lease (zero for a slot or the
// recount lease).
func (c *Claim) Range() Range { return c.rng }

// Fence returns the fence of this tenure: the counter the take wrote. It
// rises with every take of the range, and the fence of a split's or
// merge's new range starts above its origins', so it rises per key group.
// Every row and total write of the holder carries it (§6.5).
func (c *Claim) Fence() int64 { return c.fence }

// Counter returns the counter of this holder's last successful write.
func (c *Claim) Counter() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counter
}

// Item returns the item as this holder last wrote or read it: at first the
// item as the take wrote it (checkpoint, epoch high, origins and sweep due
// to restore from), then as each renewal returned it.
func (c *Claim) Item() Item {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.item
	it.Origins = slices.Clone(it.Origins)
	it.SweepsDue = slices.Clone(it.SweepsDue)
	return it
}

// HandoffTo returns the worker that asked for this range, as the last
// renewal saw it ("" if none).
func (c *Claim) HandoffTo() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.item.HandoffTo
}

func (c *Claim) validity() time.Duration   { return 2 * c.w.o.Duration / 3 }
func (c *Claim) renewEvery() time.Duration { return c.w.o.Duration / 3 }
func (c *Claim) retryEvery() time.Duration { return max(c.w.o.Duration/30, time.Millisecond) }

// Check reports whether the holder may still write under the lease: nil
// while the last successful take or renewal (timed from when it was sent)
// is less than 2/3 of the lease duration old and the lease was neither
// lost, released nor retired; otherwise an error wrapping ErrLost. It does
// no I/O. See (*Lease).Check for why 2/3 leaves a taker's watch a margin
// of D/3.
func (c *Claim) Check() error {
	now := c.w.o.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if !c.confirmed {
		return fmt.Errorf("lease: %s not confirmed yet: %w", c.key, ErrLost)
	}
	return checkValidity(c.key, now, c.validFrom, c.validity())
}

// Guard returns a context derived from ctx that is also cancelled, with
// the ErrLost error as its cause, once the lease ends: lost (as Run or
// Renew find it), released or retired. Call cancel when the write is done.
func (c *Claim) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	return guardUntil(ctx, c.ended)
}

// Lost returns a channel that is closed once the lease has ended; Check
// then returns the reason.
func (c *Claim) Lost() <-chan struct{} { return c.ended.Done() }

// end records why the lease can no longer be written under (the first
// reason wins) and returns the reason in effect.
func (c *Claim) end(err error, taken bool) error {
	c.mu.Lock()
	if c.err == nil {
		c.err, c.taken = err, taken
		if !errors.Is(err, errReleased) {
			c.w.m.lost.WithLabelValues(c.kind.String()).Inc()
		}
	}
	err = c.err
	c.mu.Unlock()
	c.endCause(err)
	return err
}

func (c *Claim) errOrNil() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// noteItem records the item a write returned (ALL_NEW); a malformed answer
// is ignored, the write having succeeded.
func (c *Claim) noteItem(av map[string]types.AttributeValue) {
	if len(av) == 0 {
		return
	}
	it, err := decodeLease(c.w.o.Job, c.key, av)
	if err != nil {
		return
	}
	c.setItem(it)
}

// setItem folds the item a write returned or a read found into the one
// held. Writes run concurrently (a renewal beside a commit), so their
// answers may arrive in any order: the item of the higher counter wins,
// but the checkpoint and the epoch high, which only this holder raises and
// only upwards, are the highest either shows.
func (c *Claim) setItem(it Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.item = foldItem(c.item, it)
	c.counter = max(c.counter, it.Counter)
}

// foldItem returns the newer of two reads of one item (the higher
// counter; b on a tie), with the higher checkpoint and epoch high of both.
func foldItem(a, b Item) Item {
	out, old := b, a
	if a.Counter > b.Counter {
		out, old = a, b
	}
	if old.Checkpoint.ID > out.Checkpoint.ID {
		out.Checkpoint = old.Checkpoint
	}
	out.EpochHigh = max(out.EpochHigh, old.EpochHigh)
	return out
}

// confirm records a counter-moving write of this holder (a renewal, a
// confirmed take) that succeeded: sent at sent, it wrote counter n.
func (c *Claim) confirm(n int64, sent time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counter = max(c.counter, n)
	if !c.confirmed || sent > c.validFrom {
		c.validFrom = sent
	}
	c.confirmed = true
}

// takenOver ends the lease, found held by cur.Owner under another fence.
func (c *Claim) takenOver(cur Item) error {
	by := cur.Owner
	if by == "" {
		by = "nobody (released by another tenure, or by an operator?)"
	}
	c.w.log.Error("lease lost: another tenure holds it; stop writing", "lease", c.key, "holder", cur.Owner, "fence", cur.Fence, "my_fence", c.fence)
	return c.end(fmt.Errorf("lease: %s taken over by %s (fence %d, this holder's %d): %w", c.key, by, cur.Fence, c.fence, ErrLost), true)
}

// The holder's conditional writes (§6.2).
const (
	condMine = "#o = :me AND #c = :c"
	condFenc = "#o = :me AND #fe = :fe"

	updRenewClaim   = "SET #c = :n, #r = :r, #d = :d"
	updReleaseClaim = "SET #c = :n, #r = :r, #lo = :me REMOVE #o"

	condOpenEpoch = condFenc + " AND (attribute_not_exists(#eh) OR #eh < :e)"
	updOpenEpoch  = "SET #eh = :e"
	condCommit    = condFenc + " AND (attribute_not_exists(#cp) OR #cp < :cp)"
	updCommit     = "SET #cp = :cp, #ck = :ck, #wm = :wm, #sw = :zero"
	condRetire    = condFenc + " AND #fe < :next AND #cp = :cp AND " + isActive
	updRetire     = "SET #st = :retired, #lo = :me REMOVE #o"
	updSweep      = "SET #sd = :sd"
	updClearSweep = "REMOVE #sd"
	updConsumer   = "SET #ca = :ca"
)

// Renew renews the lease once: counter = :c + 1, conditional on this owner
// and the counter of its last write, each attempt bounded by the validity
// left. It returns nil on success, an error wrapping ErrLost once the
// lease has ended (taken over, released, or not renewed within its
// validity: the holder must stop writing), and any other error for a
// failed attempt, to be retried while Check passes. The renewal returns
// the item, so the holder sees a handoff request (HandoffTo) at once. It
// never waits for the holder's other writes (a commit, an open epoch):
// those do not move the counter, so they cannot refuse it.
func (c *Claim) Renew(ctx context.Context) error {
	for adopted := 0; ; adopted++ {
		c.mu.Lock()
		cnt, from, confirmed, ended := c.counter, c.validFrom, c.confirmed, c.err
		c.mu.Unlock()
		if ended != nil {
			return ended
		}
		sent := c.w.o.Clock.Now()
		actx, cancel := ctx, context.CancelFunc(func() {})
		if confirmed {
			left := from + c.validity() - sent
			if left <= 0 {
				c.w.log.Error("lease lost: no renewal succeeded within its validity; stop writing", "lease", c.key, "validity", c.validity())
				return c.end(fmt.Errorf("lease: %s: no renewal succeeded within %v: %w", c.key, c.validity(), ErrLost), false)
			}
			actx, cancel = context.WithTimeout(ctx, left)
		}
		out, err := c.w.api.UpdateItem(actx, c.w.request(c.key, condMine, updRenewClaim, map[string]types.AttributeValue{
			":me": avS(c.owner), ":c": avN(cnt), ":n": avN(cnt + 1),
			":r": wallString(c.w.o.Clock.Wall()), ":d": avN(c.w.o.Duration.Milliseconds()),
		}))
		cancel()
		if err == nil {
			c.noteItem(out.Attributes)
			c.confirm(cnt+1, sent)
			c.w.m.renewals.WithLabelValues(c.kind.String()).Inc()
			return nil
		}
		if !isRefused(err) {
			c.w.m.failures.WithLabelValues(c.kind.String()).Inc()
			return fmt.Errorf("lease: renew %s: %w", c.key, err)
		}
		if ended := c.errOrNil(); ended != nil {
			return ended // released or retired meanwhile: the refusal is this holder's own
		}
		cur, rerr := c.w.read(ctx, c.key)
		if rerr != nil {
			c.w.m.failures.WithLabelValues(c.kind.String()).Inc()
			return fmt.Errorf("lease: renew %s: refused, and the item cannot be read: %w", c.key, rerr)
		}
		if cur.Owner == c.owner && cur.Fence == c.fence {
			if adopted == maxAdopt {
				return fmt.Errorf("lease: renew %s: the counter keeps moving under this owner", c.key)
			}
			// This holder's own earlier write, applied although its answer
			// was lost: adopt its counter and renew again. Validity is
			// only ever counted from a write seen to succeed.
			c.setItem(cur)
			continue
		}
		return c.takenOver(cur)
	}
}

// Run renews the lease every Duration/3 until ctx is done or the lease is
// released or retired (it then returns nil), or the lease is lost (an
// error wrapping ErrLost). Failed renewals are retried every Duration/30
// within the validity, as the job lease's Run does.
func (c *Claim) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("lease: %s: Run is already running", c.key)
	}
	defer c.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ended, cancel)
	defer stop()
	clk := c.w.o.Clock
	var lastWarn time.Duration = -1
	for {
		c.mu.Lock()
		wait := c.validFrom + c.renewEvery() - clk.Now()
		c.mu.Unlock()
		for {
			if err := c.errOrNil(); err != nil {
				return runResult(err)
			}
			if err := clk.Sleep(ctx, wait); err != nil {
				return runResult(c.errOrNil())
			}
			err := c.Renew(ctx)
			if err == nil {
				break
			}
			if ended := c.errOrNil(); ended != nil {
				return runResult(ended)
			}
			if ctx.Err() != nil {
				return runResult(c.errOrNil())
			}
			now := clk.Now()
			c.mu.Lock()
			left := c.validFrom + c.validity() - now
			c.mu.Unlock()
			if lastWarn < 0 || now-lastWarn >= c.renewEvery() {
				lastWarn = now
				c.w.log.Warn("lease renewal failed; retrying", "lease", c.key, "valid_for", left, "err", err)
			}
			wait = max(min(c.retryEvery(), left), 0)
		}
	}
}

// Release gives the lease up at once (counter = :c + 1, owner removed,
// conditional on this owner and counter), on a clean stop or to honour a
// handoff, after the last write: from the moment it is called Check fails
// and Run returns. A pending handoff request stays on the item, so the
// range is then reserved for the worker that asked. A lease already lost
// has nothing to release (nil). If the write fails, the lease is left to
// expire.
func (c *Claim) Release(ctx context.Context) error {
	c.end(fmt.Errorf("lease: %s %w by this worker: %w", c.key, errReleased, ErrLost), false)
	c.mu.Lock()
	done := c.taken || c.released
	c.mu.Unlock()
	if done {
		return nil
	}
	for adopted := 0; ; adopted++ {
		cnt := c.Counter()
		out, err := c.w.api.UpdateItem(ctx, c.w.request(c.key, condMine, updReleaseClaim, map[string]types.AttributeValue{
			":me": avS(c.owner), ":c": avN(cnt), ":n": avN(cnt + 1), ":r": wallString(c.w.o.Clock.Wall()),
		}))
		if err == nil {
			c.noteItem(out.Attributes)
			c.mu.Lock()
			c.counter, c.released = max(c.counter, cnt+1), true
			c.mu.Unlock()
			c.w.m.releases.WithLabelValues(c.kind.String()).Inc()
			c.w.log.Info("lease released", "lease", c.key, "counter", cnt+1)
			return nil
		}
		if !isRefused(err) {
			return fmt.Errorf("lease: release %s: %w", c.key, err)
		}
		cur, rerr := c.w.read(ctx, c.key)
		if rerr != nil {
			return fmt.Errorf("lease: release %s: refused, and the item cannot be read: %w", c.key, rerr)
		}
		switch {
		case cur.Owner == c.owner && cur.Fence == c.fence && adopted < maxAdopt:
			c.setItem(cur) // a renewal in flight moved the counter, or an earlier attempt's answer was lost
		case cur.Owner == "":
			c.mu.Lock()
			c.released = true // by an earlier attempt whose answer was lost, or nothing left to release
			c.mu.Unlock()
			return nil
		default:
			c.mu.Lock()
			c.taken = true
			c.mu.Unlock()
			return fmt.Errorf("lease: release %s: taken over by %s: %w", c.key, cur.Owner, ErrLost)
		}
	}
}

// fenced sends one write of the holder that does not move the counter:
// conditional on this owner and fence (and cond's own terms), after
// Check. It neither waits for a renewal nor holds one up: Check counts
// validity only from renewals seen to succeed, and the condition does not
// name the counter. A refused write is either this holder's own earlier attempt,
// applied although its answer was lost (applied tells, from the item as
// read), a write its condition forbids (applied's error), or a takeover
// (the lease is lost: an error wrapping ErrLost).
func (c *Claim) fenced(ctx context.Context, op, cond, upd string, vals map[string]types.AttributeValue, applied func(Item) error) error {
	if err := c.Check(); err != nil {
		return err
	}
	vals[":me"], vals[":fe"] = avS(c.owner), avN(c.fence)
	out, err := c.w.api.UpdateItem(ctx, c.w.request(c.key, cond, upd, vals))
	if err == nil {
		c.noteItem(out.Attributes)
		return nil
	}
	if !isRefused(err) {
		return fmt.Errorf("lease: %s %s: %w", op, c.key, err)
	}
	cur, rerr := c.w.read(ctx, c.key)
	if rerr != nil {
		return fmt.Errorf("lease: %s %s: refused, and the item cannot be read: %w", op, c.key, rerr)
	}
	if cur.Owner != c.owner || cur.Fence != c.fence {
		return c.takenOver(cur)
	}
	c.setItem(cur)
	return applied(cur)
}

// OpenEpoch records epoch e as opened (epoch_high = e), before barrier e:
// a holder may tag writes with e only after it did. Conditional on owner,
// fence and epoch_high < e, so an old owner can never open an epoch above
// the epoch_high the new owner read at its take.
func (c *Claim) OpenEpoch(ctx context.Context, e int64) error {
	return c.fenced(ctx, "open epoch", condOpenEpoch, updOpenEpoch, map[string]types.AttributeValue{":e": avN(e)}, func(cur Item) error {
		if cur.EpochHigh == e {
			return nil
		}
		return fmt.Errorf("lease: open epoch %d of %s: epoch %d is open already", e, c.key, cur.EpochHigh)
	})
}

// Commit records checkpoint cp as the range's latest (checkpoint,
// checkpoint_key, watermark; owner_switches = 0), after its manifest was
// uploaded: a checkpoint counts only once committed here. Conditional on
// owner, fence and checkpoint < cp.ID.
func (c *Claim) Commit(ctx context.Context, cp Checkpoint) error {
	return c.fenced(ctx, "commit", condCommit, updCommit, map[string]types.AttributeValue{
		":cp": avN(cp.ID), ":ck": avS(cp.Key), ":wm": avN(cp.Watermark), ":zero": avN(0),
	}, func(cur Item) error {
		if cur.Checkpoint == cp {
			return nil
		}
		return fmt.Errorf("lease: commit checkpoint %d of %s: checkpoint %d is committed already", cp.ID, c.key, cur.Checkpoint.ID)
	})
}

// SetSweepsDue records the fence sweeps this holder owes (§6.5),
// conditional on owner and fence: after a takeover, those read at the take
// and its own; after a sweep, those still owed (none removes the
// attribute). Only the holder writes them, so a read-modify-write under
// the fence is safe.
func (c *Claim) SetSweepsDue(ctx context.Context, ss []SweepDue) error {
	upd, vals := updSweep, map[string]types.AttributeValue{":sd": sweepsValue(ss)}
	if len(ss) == 0 {
		upd, vals = updClearSweep, map[string]types.AttributeValue{}
	}
	return c.fenced(ctx, "record the sweeps due of", condFenc, upd, vals, func(cur Item) error {
		if slices.EqualFunc(cur.SweepsDue, ss, SweepDue.same) {
			return nil
		}
		return fmt.Errorf("lease: record the sweeps due of %s: refused", c.key)
	})
}

// SetConsumer records the slot's EFO consumer ARN in its item.
func (c *Claim) SetConsumer(ctx context.Context, arn string) error {
	if c.kind != KindSlot {
		return fmt.Errorf("lease: set the consumer of %s: not a slot", c.key)
	}
	return c.fenced(ctx, "set the consumer of", condFenc, updConsumer, map[string]types.AttributeValue{":ca": avS(arn)}, func(cur Item) error {
		if cur.ConsumerARN == arn {
			return nil
		}
		return fmt.Errorf("lease: set the consumer of %s: refused", c.key)
	})
}

// Retire retires the range after its final savepoint (a split or a
// merge): state = retired, owner removed, conditional on owner, fence,
// checkpoint = savepoint, state active, and fence < next, the first
// counter of the new ranges that replace it (RangeSpec.Counter). From the
// moment it is called Check fails and Run returns, as for Release.
//
// The scale-out note conditions the retire on owner, checkpoint and state
// only. The fence terms are added so that fences rise per key group: a new
// range's first take writes a fence above next, and the retired range can
// never be taken again, so every fence its key groups had is below every
// fence they get. Without them a holder that lost the range and took it
// again between creating the new ranges and retiring the old one could
// leave a fence of the old range at or above the new ones'.
//
// If the write is refused while the range is still held (the savepoint is
// not the committed checkpoint, or the fence is not below next), the error
// says so and the holder should Release it.
func (c *Claim) Retire(ctx context.Context, savepoint, next int64) error {
	if c.kind != KindRange {
		return fmt.Errorf("lease: retire %s: not a range", c.key)
	}
	c.end(fmt.Errorf("lease: %s retired by this worker (%w): %w", c.key, errReleased, ErrLost), false)
	c.mu.Lock()
	taken, released := c.taken, c.released
	c.mu.Unlock()
	if taken || released {
		return fmt.Errorf("lease: retire %s: no longer held: %w", c.key, ErrLost)
	}
	out, err := c.w.api.UpdateItem(ctx, c.w.request(c.key, condRetire, updRetire, map[string]types.AttributeValue{
		":me": avS(c.owner), ":fe": avN(c.fence), ":cp": avN(savepoint), ":next": avN(next),
		":active": avS(string(StateActive)), ":retired": avS(string(StateRetired)),
	}))
	if err == nil {
		c.noteItem(out.Attributes)
		c.mu.Lock()
		c.released = true
		c.mu.Unlock()
		c.w.m.releases.WithLabelValues(c.kind.String()).Inc()
		c.w.log.Info("range retired", "lease", c.key, "savepoint", savepoint)
		return nil
	}
	if !isRefused(err) {
		return fmt.Errorf("lease: retire %s: %w", c.key, err)
	}
	cur, rerr := c.w.read(ctx, c.key)
	if rerr != nil {
		return fmt.Errorf("lease: retire %s: refused, and the item cannot be read: %w", c.key, rerr)
	}
	switch {
	case cur.State == StateRetired && cur.Owner == "" && cur.LastOwner == c.owner && cur.Fence == c.fence:
		c.mu.Lock()
		c.released = true // an earlier attempt, whose answer was lost
		c.mu.Unlock()
		return nil
	case cur.Owner == c.owner && cur.Fence == c.fence:
		return fmt.Errorf("lease: retire %s: its committed checkpoint is %d (want the savepoint %d), its fence %d (want below %d), its state %s; release it",
			c.key, cur.Checkpoint.ID, savepoint, cur.Fence, next, cur.State)
	}
	c.mu.Lock()
	c.taken = true
	c.mu.Unlock()
	return fmt.Errorf("lease: retire %s: taken over by %s: %w", c.key, cur.Owner, ErrLost)
}
