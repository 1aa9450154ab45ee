// Package lease keeps two processes from ever writing as the same job: a
// job (and, in the coming multi-worker mode, each key-group range of a job)
// is written only by the holder of its lease, an item in a DynamoDB table
// kept in the Kinesis Client Library's lease-table model (DESIGN.md §7):
// conditional writes, a counter, and expiry measured by the taker's own
// clock, never by comparing two machines' clocks.
//
// # The lease item
//
// One item per (job, key-group range), keyed by lease_key
// "<job>#kg<from>-<to>" (from inclusive, to exclusive; a single-worker job
// holds 0-128). Its attributes: owner (absent when released), counter
// (raised by every take, renewal and release), duration_ms (the holder's
// lease duration), and for operators renewed_at (the holder's wall clock,
// RFC 3339; informational only, never read for a decision), last_owner,
// job, kg_from, kg_to. CreateTable makes the table (key lease_key, a
// string; on-demand billing).
//
// # How it is driven
//
//	l, err := lease.Acquire(ctx, api, opts) // before anything is restored
//	var held *lease.HeldError
//	if errors.As(err, &held) { … another process runs the job: refuse to start … }
//	go func() { errc <- l.Run(runCtx) }()   // renews every Duration/3
//	…
//	if err := l.Check(); err != nil { … }   // before every sink write
//	wctx, done := l.Guard(ctx)              // and the write runs under Guard
//	…
//	stop Run; l.Release(ctx)                // after the last write, on a clean stop
//
// A *Lease is a fence.Fence: package fence wraps the sinks, the lake and
// the checkpoint store with it, so that every write is checked and guarded.
//
// # Why it is safe
//
// A taker reads the counter, waits one lease duration D on its own
// monotonic clock and takes the lease over only if the counter has not
// moved, with a write conditional on that counter. The holder renews every
// D/3 with a write conditional on its owner and counter, and lets itself
// write (Check) only until 2D/3 after it sent its last successful renewal.
// The taker's first read comes after that renewal was sent, so the holder
// stops writing at least D/3 before any takeover; Guard cancels writes
// still in progress at that moment (see Check). A refused renewal means the
// lease was taken: it is lost for good, and Run reports ErrLost. A release
// (conditional on owner and counter) frees the lease at once, so a restart
// after a clean stop does not wait.
//
// Every write this package sends sets the counter to an absolute value
// under a condition on the value read, so of two processes that read the
// same counter at most one write succeeds; the other gets
// ConditionalCheckFailedException (matched as a typed error) and learns who
// won from a consistent read. A write whose answer was lost but which was
// applied is recognised by its owner string (unique per Acquire) and
// adopted, never mistaken for a takeover.
//
// # Range leases: many workers, one job
//
// A multi-worker job (docs/scale-out.md, §6) keeps its lease table in the
// same model, one item per key-group range, beside a ranges map
// ("<job>#ranges"), one slot lease per worker ("<job>#slot<k>") and the
// recount lease ("<job>#recount"). A Worker reads the table (Scan) and
// sends the writes of its own (setup, create, activate, the map, takes,
// handoff requests); a take returns a Claim, the held lease, which renews,
// opens epochs, commits checkpoints, records a sweep due, and releases or
// retires its range. Every take writes the owner "<worker id>~<nonce>",
// new for each take, and a fence equal to the counter it wrote; a range
// item also carries its state, its last committed checkpoint, its epoch
// high-water mark, a pending handoff request and its origins. A Claim
// implements the fence.Fence of the sinks, as a Lease does.
//
// Which ranges to take is decided by Balance, a pure function of a
// Snapshot (a Watcher's record of successive scans: each item and how
// long its counter has stood still on the worker's own clock), the
// worker's id and the time, with the Kinesis Client Library's taker rules:
// target = ceil(active ranges / live workers), free and expired ranges
// first, at most one range asked of the most loaded worker at a time, and
// that ask a graceful handoff (the holder checkpoints and releases the
// range reserved for the asker), never a steal from a live holder. The
// loop that drives it (scan every 10 s, balance, act, renew) is the
// runtime's:
//
//	w, _ := lease.NewWorker(api, lease.WorkerOptions{Table: t, Job: job})
//	watch := lease.NewWatcher()
//	scan, _ := w.Scan(ctx)
//	snap := watch.Observe(scan)
//	it, ok := lease.ChooseSlot(snap, job, scan.At, maxWorkers, w.BalanceOptions())
//	slot, _ := w.Take(ctx, it)              // if ok; go slot.Run(ctx); exit when it is lost
//	plan := lease.Balance(snap, w.ID(), scan.At, w.BalanceOptions())
//	for _, it := range plan.Take { c, err := w.Take(ctx, it); … restore, go c.Run(ctx) … }
//	if plan.Ask != nil { w.AskHandoff(ctx, *plan.Ask) }
//	for _, it := range plan.HandOff { … final checkpoint, c.Commit, c.Release … }
//	for _, it := range plan.Cancel { w.CancelHandoff(ctx, it) }
//
// Every write is conditional on the item as the snapshot showed it, so a
// plan acted on late is refused (ErrChanged) rather than wrong.
//
// The in-process twin of the lease table, with the same conditions
// (RangeAPI: Scan included), is leasetest.Mem, beside sinktest's and
// kinesistest's twins: it is test support, not part of this package.
package lease
