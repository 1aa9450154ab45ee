package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adclick/adclick/ckptstore"
	"github.com/adclick/adclick/lease"
	"github.com/adclick/adclick/recount"
)

// LeaseConfig makes a job hold a lease (package lease) for as long as it
// runs, so that two processes can never write as the same job: AWS mode,
// where the data dir's lock covers one machine only.
type LeaseConfig struct {
	// API is the lease table's client (a *dynamodb.Client, or lease.NewMem()
	// in tests).
	API lease.API
	// Options name the table, the job and the key-group range; Logger and
	// Registerer default to the job's.
	Options lease.Options
}

// jobLease is a held lease and its renewal loop.
type jobLease struct {
	l    *lease.Lease
	stop context.CancelFunc
	done chan error
}

// acquireLease takes the job's lease (waiting out a holder that stopped
// renewing, refusing one that renews) and starts renewing it. The lease
// is taken before anything is restored or flushed: the flush is a write.
func (j *Job) acquireLease(ctx context.Context) error {
	lc := j.cfg.Lease
	o := lc.Options
	if o.Logger == nil {
		o.Logger = j.log
	}
	if o.Registerer == nil {
		o.Registerer = j.cfg.Registerer
	}
	l, err := lease.Acquire(ctx, lc.API, o)
	if err != nil {
		return fmt.Errorf("runtime: job lease: %w", err)
	}
	rctx, stop := context.WithCancel(context.Background())
	jl := &jobLease{l: l, stop: stop, done: make(chan error, 1)}
	go func() { jl.done <- l.Run(rctx) }()
	j.lease = jl
	j.log.Info("job lease held", "key", l.Key(), "owner", l.Owner(), "counter", l.Counter())
	return nil
}

// fenceWrites wraps every store the job writes (rows, totals, checkpoints,
// lake) so that each write checks the lease first and runs under it.
func (j *Job) fenceWrites() {
	j.plainTotals = j.totals
	if j.lease == nil {
		return
	}
	f := j.lease.l
	j.rows = lease.FenceRows(j.rows, f)
	j.totals = lease.FenceTotals(j.totals, f)
	j.lake = fencedLake{Store: j.lake, f: f}
	j.ckpts.store = fencedCkpts{Store: j.ckpts.store, f: f}
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
	if rerr := jl.l.Release(ctx); rerr != nil && err == nil && !errors.Is(rerr, lease.ErrLost) {
		err = fmt.Errorf("runtime: release job lease: %w", rerr)
	}
	return err
}

// fenced runs one write under the lease.
func fenced(ctx context.Context, f lease.Fence, write func(context.Context) error) error {
	if err := f.Check(); err != nil {
		return err
	}
	gctx, cancel := f.Guard(ctx)
	defer cancel()
	return write(gctx)
}

// fencedLake fences the lake's writes.
type fencedLake struct {
	recount.Store
	f lease.Fence
}

func (s fencedLake) Put(ctx context.Context, key string, data []byte) error {
	return fenced(ctx, s.f, func(ctx context.Context) error { return s.Store.Put(ctx, key, data) })
}

func (s fencedLake) Delete(ctx context.Context, key string) error {
	return fenced(ctx, s.f, func(ctx context.Context) error { return s.Store.Delete(ctx, key) })
}

// fencedCkpts fences the checkpoint store's writes.
type fencedCkpts struct {
	ckptstore.Store
	f lease.Fence
}

func (s fencedCkpts) Upload(ctx context.Context, dir string, id int64, kind ckptstore.Kind) (st ckptstore.UploadStats, err error) {
	err = fenced(ctx, s.f, func(ctx context.Context) error {
		st, err = s.Store.Upload(ctx, dir, id, kind)
		return err
	})
	return st, err
}

func (s fencedCkpts) Delete(ctx context.Context, id int64, kind ckptstore.Kind) error {
	return fenced(ctx, s.f, func(ctx context.Context) error { return s.Store.Delete(ctx, id, kind) })
}

func (s fencedCkpts) Prune(ctx context.Context, keep int) (st ckptstore.PruneStats, err error) {
	err = fenced(ctx, s.f, func(ctx context.Context) error {
		st, err = s.Store.Prune(ctx, keep)
		return err
	})
	return st, err
}

func (s fencedCkpts) SetHigh(ctx context.Context, e int64) error {
	return fenced(ctx, s.f, func(ctx context.Context) error { return s.Store.SetHigh(ctx, e) })
}
