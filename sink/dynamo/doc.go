// Package dynamo implements sink.Rows on Amazon DynamoDB: the ad_metrics
// table of DESIGN.md §5, written with the tagged, conditional, absolute
// writes of seed 001 Part 8.
//
// The table has the key entity (S, HASH) + bucket (S, RANGE) and two global
// secondary indexes, fast_ix and late_ix, each keyed by the writer's tag
// index key "<epoch>#<shard>" and projecting ALL attributes. CreateTable
// makes it (on-demand billing) or checks an existing one.
//
// Every tagged write is one UpdateItem that SETs absolute values (never ADD)
// under the conditions in sink.Put's doc comment; a write refused by its
// condition is counted and never retried. Throttling, 5xx responses and
// transport errors are retried by the Store itself with capped, jittered
// exponential backoff, so the client passed to New should have the SDK's own
// retries turned off; NewClient builds such a client. When a request still
// fails after Options.MaxAttempts, the error is a *TransientError (IsTransient
// reports true; it has a Transient() bool method), so that a caller that can
// wait, such as the flush, retries it without importing this package.
//
// Why projection ALL: the flush reads every index entry's attributes (the
// ckpt to compare, the values to keep), so KEYS_ONLY would cost one GetItem
// per entry, doubling the flush's round trips and read units. ALL costs index
// storage and write units (each tagged write also writes a full index item),
// which is the price of a one-round-trip flush. Index reads are eventually
// consistent; the flush runs after a restore, long after the writes it
// looks for, and its own Remove/Delete carry ckpt conditions, so a stale
// index entry cannot make it change the wrong value.
//
// A Store is safe for concurrent use. It bounds the requests it has in
// flight at once (Options.MaxInFlight), across all calls.
package dynamo
