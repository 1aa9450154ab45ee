// Package valkey is the Valkey (Redis protocol) adapter of sink.Totals: the
// running totals per ad and minute, and per ad and hour, that dashboards
// read within seconds of a click, and the bookkeeping the flush after a
// restore uses to find the totals written since a checkpoint.
//
// # Key layout
//
// With the default prefix "adclick" (Options.Prefix):
//
//	adclick:m:{<ad>}:<YYYY-MM-DDTHH:MMZ>   HASH  a minute total, e.g. adclick:m:{ad_7}:2026-11-29T10:14Z
//	adclick:h:{<ad>}:<YYYY-MM-DDTHHZ>      HASH  an hour total,  e.g. adclick:h:{ad_7}:2026-11-29T10Z
//	    fields: valid         valid clicks (decimal)
//	            spend_micros  spend in micros (decimal)
//	            ckpt          the epoch (last barrier the writer passed) of the write
//	            gen, fence    the token (job_gen, lease fence) of the write; absent: (0, 0)
//	adclick:ep:<epoch>                     SET   the names of the total keys written under epoch
//	adclick:epochs                         ZSET  the epochs that have a set (member and score: the epoch)
//	adclick:marker                         STRING "ok" once armed, "rebuild" during a rebuild (see Wiped)
//	adclick:ep:<scope>:<epoch>             SET   as adclick:ep:<epoch>, for a view with an index scope
//	adclick:epochs:<scope>                 ZSET  as adclick:epochs, for a view with an index scope
//	adclick:marker:<scope>                 STRING as adclick:marker, for a view with an index scope
//
// Times are the UTC start of the minute or hour. The ad id is stored as
// given, between the braces. A dashboard reads a total with
// HMGET adclick:m:{ad_7}:2026-11-29T10:14Z valid spend_micros.
//
// Every write is an absolute HSET of all five fields, never HINCRBY: a
// replay or a flush rewrites a total by setting it again. Each is made by
// one single-key Lua script (EVALSHA, pipelined; loaded again when the
// server answers NOSCRIPT) that refuses the write when the key holds a
// higher (gen, fence) than the writer's token (sink.FencedTotals,
// docs/scale-out.md §6.5.5); the flush's deletes use a second script the
// same way. So once a range's new holder has written a total, a paused old
// holder's late write or delete of it is refused by the server and counted
// (adclick_valkey_totals_refused_total). A total the new holder has not
// written yet still takes the old holder's late write: Valkey requests
// are not signed, so nothing bounds how late it arrives; that touches
// dashboards only, never rows or billing. Every key carries an expiry, set
// again at each write: minute totals Options.MinuteTTL (48h), hour totals
// Options.HourTTL (8 days), epoch sets and the registry Options.EpochTTL
// (the longer of the two), so the bookkeeping outlives the keys it lists.
//
// # Bookkeeping and the flush
//
// SetTotals adds each key to the set of its epoch, and a key rewritten under
// another epoch is listed under both: the flush after restoring checkpoint c
// reads the sets of every epoch >= c, rewrites the keys restored state holds
// and deletes the others (seed 001 Part 8). The sets are written in a round
// trip before the values, so a value is never present without its record.
// DeleteTotals deletes values first and then removes them from every epoch
// set in the registry. ForgetEpochs deletes whole sets; the runtime calls it
// for epochs older than the oldest checkpoint it can still restore, which
// keeps the registry, and the cost of DeleteTotals, small.
//
// Range pipelines sharing a server each write through a view with an index
// scope (Store.Scoped, sink.ValidateScope), such as "kg0-16": the view's
// epoch sets and registry carry the scope, so a range's flush lists, and
// forgets, only what that range recorded, whatever epoch numbers the other
// ranges use. The totals are per ad and stay unscoped: dashboards read
// them the same way. The unscoped store keeps the layout above.
//
// Each view has its own wipe marker, so every range detects a wipe and
// rebuilds its own totals (see Detecting a wipe).
//
// # Cluster mode
//
// The ad id is the hash tag: all totals of one ad live in one slot, so a
// reader may pipeline one ad's minutes to a single node. Epoch sets and the
// registry, scoped or not, are ordinary keys in their own slots (a scope
// holds no '{' or '}'). The store sends only
// single-key commands and single-key scripts, so it works unchanged against a cluster
// (Options.Cluster), where valkey-go routes each command of a pipeline to
// its slot's node. Ordering between the epoch round trip and the value round
// trip holds in both modes because they are separate round trips.
//
// # Client-side caching
//
// valkey-go speaks RESP3 and enables server-assisted client-side caching
// (CLIENT TRACKING) by default. Redis 7.0 and Valkey support both, so it is
// not required to turn it off for them; the store still sets DisableCache:
// it never reads through the cache (no DoCache: dashboards must see fresh
// values), tracking would only cost the server memory and invalidation
// traffic, and some managed servers and proxies refuse CLIENT TRACKING, which
// makes valkey-go fail to connect unless the cache is disabled.
//
// # Availability
//
// Valkey is a view for dashboards, not the source of truth: the counts live
// in the job's state and in the rows. So the store fails fast instead of
// waiting: every round trip is bounded by Options.Timeout (2s), connecting by
// Options.DialTimeout (1s), and the client does not retry. A call needs a
// bounded number of round trips, so an unreachable or unresponsive server
// makes SetTotals return an error within about Timeout + DialTimeout. New
// does not fail when a standalone server is down; the store connects on
// first use and reconnects by itself when the server returns.
//
// After the server restarts, each pooled connection that predates the
// restart fails once, at its next use, with a transport error (EOF, reset,
// broken pipe) before the client replaces it. The store sends a round trip
// again at once after such a failure, up to once per pooled connection, so
// a call right after a restart succeeds; every command it sends gives the
// same result when applied twice. Timeouts, refused dials and reply errors
// are never retried, so an outage still fails a call within about Timeout +
// DialTimeout per round trip.
//
// The contract with the runtime: on a SetTotals error it keeps counting (the
// totals stay in state), and it calls Ping periodically; once Ping succeeds
// it rewrites the running totals of its open windows from state (absolute
// values, so rewriting is always safe) before relying on Valkey again.
//
// # Detecting a wipe
//
// A server that restarts without its data (or is flushed or replaced) loses
// every total, including those of windows that closed long ago, which the
// runtime no longer holds. The key <prefix>:marker detects it: Wiped reports
// true when the marker is missing or a rebuild has not completed, and renews
// its expiry (EpochTTL) otherwise. The runtime checks it periodically; on
// true it calls BeginRebuild, rewrites the totals (flush.RebuildTotals from
// the rows, and its open windows from state), and then Arm, which sets the
// marker back to "ok" only if it still exists: if the store was wiped again
// during the rebuild, Arm reports false and the rebuild starts over. A store
// never armed on its prefix reports true, so a new server is filled too.
//
// # Metrics
//
//	adclick_valkey_up                       gauge: 1 after a round trip reached the server, 0 after one failed to
//	adclick_valkey_errors_total{op}         failed round trips (op: set, get, list, delete, forget, ping, marker)
//	adclick_valkey_stale_retries_total{op}  round trips sent again after a stale pooled connection failed
//	adclick_valkey_totals_written_total     totals written
//	adclick_valkey_totals_deleted_total     totals deleted
//	adclick_valkey_totals_refused_total{op} writes (set) and deletes (delete) refused by a higher stored (gen, fence)
//	adclick_valkey_call_duration_seconds{op}
//
// A reply error from the server (such as WRONGTYPE) counts as an error and
// shows the server up; a round trip ended by the caller's own context counts
// as an error and leaves the gauge as it was. Totals refused before any I/O
// (ErrBadTotal) are not counted.
package valkey
