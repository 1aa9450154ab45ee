package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/ckptstore/ckpt"
	"github.com/adclick/adclick/recount"
	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/fence"
)

// Lease is a job lease, held for as long as the job runs so that two
// processes can never write as the same job: AWS mode, where the data
// dir's lock covers one machine only. cmd/adclick takes it in DynamoDB
// (package lease); every write of the job is fenced by it (package fence).
type Lease interface {
	fence.Fence
	// Run renews the lease until ctx ends (nil) or the lease is lost (an
	// error saying why).
	Run(ctx context.Context) error
	// Lost is closed once the lease is lost or released.
	Lost() <-chan struct{}
	// Release frees the lease, so that the next start takes it at once. A
	// lease already lost is not an error.
	Release(ctx context.Context) error
}

// CommitLease is a Lease that also keeps the job's progress: a key-group
// range of a fleet, whose lease item in DynamoDB records the range's epoch
// high-water mark and its latest committed checkpoint (docs/scale-out.md
// §6.1, §6.5). Both writes are conditional on this holder's tenure, so a
// holder that lost the lease (paused, cut off) can neither open an epoch
// above what the next holder read at its take nor publish a checkpoint:
// its late uploads are never restored.
//
// With a CommitLease the job restores exactly the committed checkpoint
// (none: empty state) and removes the newer uploads, which only a holder
// that opened their epochs in the lease can have made; it opens each epoch
// in the lease before its barrier, and a checkpoint is complete only once
// committed there. A store holding a checkpoint or epoch above the lease's
// high-water mark, or a committed checkpoint at another location, is
// another lineage (a changed job name, lease table or checkpoint store):
// the start is refused rather than wipe it.
type CommitLease interface {
	Lease
	// Committed returns the committed checkpoint (0: none), the location
	// of its manifest as the store named it, and the epoch high-water mark,
	// as the take read them.
	Committed() (checkpoint int64, key string, epochHigh int64)
	// OpenEpoch records that epochs up to e may be written (idempotent).
	OpenEpoch(ctx context.Context, e int64) error
	// Commit records checkpoint id, whose manifest is at key, with the
	// job's watermark at its barrier, as the latest.
	Commit(ctx context.Context, id int64, key string, watermarkMs int64) error
}

// Sweep is a fence sweep the holder of a range owes (docs/scale-out.md
// §6.5.4): a predecessor that was taken over, not released, may still land
// writes it signed before it lost the range, tagged with epochs in
// [From, To]. Once NotBefore (wall time: the AWS signature window after
// the takeover) has passed, none can land any more, and the sweep applies
// the restore flush's rule to what is tagged there, from current state.
type Sweep struct {
	Fence     int64 // the holder taken over
	From, To  int64 // epochs
	NotBefore time.Time
}

// SweepLease is a CommitLease that carries fence sweeps: the obligations
// recorded in the lease item (by the takeover that created them, or
// inherited from a holder that did not finish them), and the way to mark
// them done. The obligation stays in the item until SweepsDone, so a crash
// passes it to the next holder.
//
// With any CommitLease the job never tags a write of its own with an epoch
// at or below the epoch high the take read: its first epoch after a
// restore, and the tag of its restore flush's rewrites, is that high + 1.
// So everything tagged in a sweep's [From, To] is a predecessor's.
type SweepLease interface {
	CommitLease
	// SweepsDue returns the sweeps owed, as the take read them.
	SweepsDue() []Sweep
	// SweepsDone records that the sweeps left are all that is still owed.
	SweepsDone(ctx context.Context, left []Sweep) error
}

// LeaseConfig makes a job hold a Lease.
type LeaseConfig struct {
	// Acquire takes the lease, waiting out a holder that stopped renewing
	// and refusing one that renews. log and reg are the job's.
	Acquire func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) (Lease, error)
}

// jobLease is a held lease and its renewal loop.
type jobLease struct {
	l    Lease
	stop context.CancelFunc
	done chan error
}

// acquireLease takes the job's lease and starts renewing it. The lease is
// taken before anything is restored or flushed: the flush is a write.
func (j *Job) acquireLease(ctx context.Context) error {
	l, err := j.cfg.Lease.Acquire(ctx, j.log, j.cfg.Registerer)
	if err != nil {
		return fmt.Errorf("runtime: job lease: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	jl := &jobLease{l: l, stop: stop, done: make(chan error, 1)}
	go func() { jl.done <- l.Run(rctx) }()
	j.lease = jl
	return nil
}

// FenceLease is a Lease whose every tenure has its own fence, rising with
// each take (a fleet's range lease): the job's row writes carry the token
// (job_gen, fence), so that once a newer holder has written an item, this
// holder's late writes to it are refused by the store itself, whatever
// its clock says (sink.Fenced; docs/scale-out.md §6.5).
type FenceLease interface {
	Lease
	Fence() int64
}

// fenceWrites wraps every store the job writes (rows, totals, checkpoints,
// lake) so that each write checks the lease first and runs under it, and,
// with a FenceLease, so that row writes carry its fence.
func (j *Job) fenceWrites() error {
	j.plainTotals = j.totals
	if err := j.totalsUnderToken(); err != nil {
		return err
	}
	if j.lease == nil {
		return nil
	}
	f := j.lease.l
	j.rows = fence.Rows(j.rows, f)
	if fl, ok := f.(FenceLease); ok && fl.Fence() > 0 {
		rows, err := sink.Fenced(j.rows, sink.Token{Gen: j.cfg.JobGen, Fence: fl.Fence()})
		if err != nil {
			return fmt.Errorf("runtime: the job's lease fences its writes, but its row store cannot carry the fence: %w", err)
		}
		j.rows, j.fence = rows, fl.Fence()
	}
	if j.fence > 0 {
		if err := j.totalsUnderToken(); err != nil {
			return err
		}
	}
	j.totals = fence.Totals(j.totals, f)
	j.lake = fencedLake{Store: j.lake, f: f}
	j.ckpts.store = fencedCkpts{Store: j.ckpts.store, f: f}
	return nil
}

// releaseLease stops renewing and frees the lease (a clean stop lets the
// next start take it at once). It returns the renewal loop's error: the
// lease was lost.
func (j *Job) releaseLease() error {
	jl := j.lease
	if jl == nil {
		return nil
	}
	j.lease = nil
	jl.stop()
	err := <-jl.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := jl.l.Release(ctx); rerr != nil && err == nil {
		err = fmt.Errorf("runtime: release job lease: %w", rerr)
	}
	return err
}

// fencedLake fences the lake's writes.
type fencedLake struct {
	recount.Store
	f fence.Fence
}

func (s fencedLake) Put(ctx context.Context, key string, data []byte) error {
	return fence.Run(ctx, s.f, func(ctx context.Context) error { return s.Store.Put(ctx, key, data) })
}

func (s fencedLake) Delete(ctx context.Context, key string) error {
	return fence.Run(ctx, s.f, func(ctx context.Context) error { return s.Store.Delete(ctx, key) })
}

// fencedCkpts fences the checkpoint store's writes.
type fencedCkpts struct {
	ckpt.Store
	f fence.Fence
}

func (s fencedCkpts) Upload(ctx context.Context, dir string, id int64, kind ckpt.Kind) (st ckpt.UploadStats, err error) {
	err = fence.Run(ctx, s.f, func(ctx context.Context) error {
		st, err = s.Store.Upload(ctx, dir, id, kind)
		return err
	})
	return st, err
}

func (s fencedCkpts) Delete(ctx context.Context, id int64, kind ckpt.Kind) error {
	return fence.Run(ctx, s.f, func(ctx context.Context) error { return s.Store.Delete(ctx, id, kind) })
}

func (s fencedCkpts) Prune(ctx context.Context, keep int) (st ckpt.PruneStats, err error) {
	err = fence.Run(ctx, s.f, func(ctx context.Context) error {
		st, err = s.Store.Prune(ctx, keep)
		return err
	})
	return st, err
}

func (s fencedCkpts) SetHigh(ctx context.Context, e int64) error {
	return fence.Run(ctx, s.f, func(ctx context.Context) error { return s.Store.SetHigh(ctx, e) })
}

// totalsUnderToken makes the running totals carry the job's token
// (job_gen, fence; fence 0 without a range lease), so that the store
// refuses a write or delete of an older holder (sink.TotalsUnder). A store
// that keeps no token (sink/embedded, which one process holds through its
// data dir's lock) is written as before.
func (j *Job) totalsUnderToken() error {
	if j.plainTotals == nil {
		return nil
	}
	if _, ok := j.plainTotals.(sink.FencedTotals); !ok {
		return nil
	}
	t, err := sink.TotalsUnder(j.plainTotals, sink.Token{Gen: j.cfg.JobGen, Fence: j.fence})
	if err != nil {
		return fmt.Errorf("runtime: running totals: %w", err)
	}
	j.totals = t
	return nil
}
