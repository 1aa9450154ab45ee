// Package flush undoes, after a restore, what a job wrote after the
// checkpoint it restored from, and after a blue/green switch, what the old
// job version wrote after the savepoint the new one started from (seed 001
// Parts 8 and 9, DESIGN.md §6).
//
// Every sink write carries its writer's tag (<w>_ckpt, the id of the last
// barrier the writing subtask passed) and an index key "<epoch>#<shard>"
// (<w>_ix), so the values written since checkpoint c are found by querying
// each writer's tag index for every epoch ≥ c and every index shard, without
// reading the rest of the table. The cost of a flush is therefore
// proportional to what was written since the checkpoint, not to the size of
// the table.
//
// The package has two halves, in the manner of a pure state machine driven
// from outside:
//
//   - Decide is the pure half: given one item found through writer w's index,
//     the restored checkpoint c and what restored state knows, it returns the
//     Action to take (Keep, DeleteItem, RemoveAttrs or RewriteLate). It does
//     no I/O, reads no clock and starts no goroutines.
//   - Full and Sweep are the drivers: they query the tag indexes of a
//     sink.Rows, apply the actions with the store's conditional writes,
//     rewrite and delete running totals in a sink.Totals, and rate-limit
//     their own writes with a token bucket so that live output keeps its
//     write capacity.
//
// A third driver, RebuildTotals, serves the running totals rather than a
// restore: when the running-total store is found wiped (valkey.Store.Wiped),
// it rewrites the totals of every closed minute and hour from the rows, which
// the job's state no longer holds; the job rewrites the open ones itself.
//
// The drivers wait out a slow row store: a call that fails with a transient
// error (IsTransient: the store marks such errors, as sink/dynamo does once
// its own attempts are spent on throttling, 5xx responses, timeouts or
// responses cut short) is sent again after a capped, jittered exponential
// backoff on the drivers' clock, until it succeeds or ctx ends, counted in
// adclick_flush_retries_total and logged at most once per
// Options.RetryLogEvery. Any other error ends the run at once. Every call
// they make is safe to repeat (absolute tagged SETs, conditional removes,
// reads).
//
// The runtime calls Full after restoring state and before reading any input
// (every start from a checkpoint or a savepoint), and Sweep once the old
// version of a blue/green pair has stopped writing. Both are idempotent and
// restartable: if the process dies part way, running them again from the
// start gives the same result as one clean run.
//
// Full reports its progress (Progress: tag-index queries done of all,
// items examined, removed and rewritten) to Options.Progress, synchronously
// between its store calls, and logs it at most every 10 s on its clock, so
// that a long flush after a restore is visible on a terminal and in a log.
//
// Neither driver starts goroutines; both are safe to call concurrently only
// on disjoint stores (two flushes over the same table are not coordinated).
package flush
