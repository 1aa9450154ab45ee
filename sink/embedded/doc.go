// Package embedded is the in-process twin of DynamoDB's ad_metrics table and
// of Valkey's running totals, on one Pebble database. Embedded mode (no AWS)
// writes its rows and totals here, `adclick rows` reads them back in order,
// and tests use it as the reference store. It is production code, not a
// mock: *Store implements both sink.Rows and sink.Totals with the exact
// semantics documented in package sink (per-writer conditional SET and
// REMOVE, job_gen and lease-fence fencing, the closed-row condition, the
// sharded tag index, conditional Remove/Delete, epoch bookkeeping of
// totals).
//
// # Durability
//
// The store plays DynamoDB, which is durable, so it keeps Pebble's write-ahead
// log on. Items are applied one by one without waiting for the disk, and every
// mutating call syncs the log once before it returns (a sync per call, not
// per item): when Put, PutFinal, Remove, Delete, Sync, DeleteTotals or
// ForgetEpochs returns nil, its effects survive the process being killed.
// BenchmarkPut measures the price: a call of 100 puts took about 1.2 ms
// without the sync and 1.6 ms with it on a busy two-core machine, so the
// sync is paid once per call, never per item.
//
// Running totals play Valkey, a memory store: SetTotals only updates memory,
// and Sync writes what changed (values and epoch records) in one batch. The
// runtime calls Sync while the graph is stopped at every checkpoint, before
// the checkpoint completes, and Close calls it; so every total set before a
// checkpoint's barrier is on disk before that checkpoint can be restored,
// and after a crash the flush rewrites what restored state implies, as it
// does for Valkey. (Writing each total through Pebble cost a fifth of the
// job's CPU; see BENCHMARKS.md.)
//
// # Atomicity
//
// Each item's read-modify-write (read the item, evaluate the condition, write
// the item and its index entries in one Pebble batch) runs under one of 256
// striped mutexes chosen by a hash of the item's key, so conditions are
// evaluated atomically per item, as DynamoDB's UpdateItem conditions are.
// Nothing is atomic across items. All methods are safe for concurrent use.
//
// # Key layout
//
// Strings inside keys are escaped so that byte order equals string order and
// a string can never be a prefix-collision of another: every 0x00 byte
// becomes 0x00 0xFF and the string ends with 0x00 0x01. Integers are 8-byte
// big-endian with the sign bit flipped, so negative values order first.
//
//	'i' esc(entity) esc(bucket)                    → item (see below)
//	'x' writer esc(ix) esc(entity) esc(bucket)     → empty: tag index entry
//	'b' esc(bucket) esc(entity)                    → empty: bucket index entry
//	'y' int64(expires_at) esc(entity) esc(bucket)  → empty: expiry queue entry
//	'm' esc("bucket_ix")                           → empty: the bucket index is complete
//	't' esc(ad) hour int64(startMs)                → total
//	'e' int64(epoch) esc(ad) hour int64(startMs)   → empty: total written in epoch
//	'r' esc(ad) hour int64(startMs) int64(epoch)   → empty: reverse of 'e'
//	'E' esc(scope) int64(epoch) esc(ad) hour int64(startMs)   → empty: 'e' of a scope
//	'R' esc(scope) esc(ad) hour int64(startMs) int64(epoch)   → empty: 'r' of a scope
//
// writer is the sink.Writer byte (1 fast, 2 late) and hour is 0 or 1.
// A view with an index scope (Store.Scoped) writes ix =
// "<scope>/<epoch>#<shard>" (sink.ScopedIndexKey) in its items and 'x'
// entries, and keeps its epoch records under 'E' and 'R'; the unscoped
// store writes "<epoch>#<shard>" and 'e' and 'r', as before scopes. Items
// therefore iterate in (entity, bucket) order, which ScanOrdered relies on,
// and QueryIndex(w, ix) is a prefix scan over 'x' writer esc(ix): its cost is
// proportional to the number of matches, not to the size of the table. The
// bucket index is the twin of DynamoDB's by_bucket_shard index: QueryBucket is a
// prefix scan over 'b' esc(bucket), in entity order, from the cursor on.
// Open writes the bucket entries of every item once in a store that
// predates them (the 'm' marker records it). The expiry queue orders items
// by expires_at, so Expire reads only the items that are due. The reverse
// epoch entries let DeleteTotals forget a key from every epoch that
// recorded it without scanning epochs.
//
// # Expiry
//
// Rows expire as DynamoDB's TTL expires them (sink.Retention): every
// tagged write sets the row's expires_at, the end of its bucket plus the
// retention of its kind (the recount's write only where there is none),
// and an expiry pass deletes the rows whose expires_at is past, with their
// index entries. Nothing sleeps and no goroutine runs: a Put or PutFinal
// call runs a bounded pass when the store's clock has moved a minute since
// the last one, and Expire runs one on demand. The clock (Options.Clock)
// defaults to the data clock, the start of the newest bucket written, so a
// replay gives the same rows whenever it runs; unlike DynamoDB, which
// deletes some time (up to days) after expires_at, the embedded store
// deletes at the first pass after it.
//
// # Value encoding
//
// An item is a compact binary record: a format byte (1), a flags byte (bit 0
// job_gen present, bit 1 fast_* present, bit 2 late_* present, bit 3 final_*
// present), then zig-zag varints: job_gen; for fast and late in that order,
// if present, valid, spend_micros, ckpt, gen and the index key as a
// uvarint-length-prefixed string; for final, if present, valid,
// spend_micros, gen, at; then, if bit 4 is set, expires_at (Unix seconds);
// then, if bit 5 is set, wf (the fence of the last tagged write, never 0:
// a write with fence 0 leaves bit 5 unset, so such items are byte for byte
// those written before fences).
// Entity and bucket come from the key. A total is a
// format byte (1) then varints valid, spend_micros, epoch.
package embedded
