// Package dynamo implements sink.Rows on Amazon DynamoDB: the ad_metrics
// table of DESIGN.md §5, written with the tagged, conditional, absolute
// writes of seed 001 Part 8.
//
// The table has the key entity (S, HASH) + bucket (S, RANGE) and three
// global secondary indexes projecting ALL attributes: fast_ix and late_ix,
// each keyed by the writer's tag index key "<epoch>#<shard>" (the flush's),
// and by_bucket_shard (BucketIndex), keyed bucket_shard (HASH) + entity
// (RANGE), which QueryBucket reads so that a page of GET /v1/hours/{hour}
// costs its own rows instead of a Scan of the table. CreateTable makes the
// table (on-demand billing), or checks an existing one and adds
// by_bucket_shard to a table made before it, and turns TTL on for
// expires_at.
//
// Every write sets expires_at (TTLAttribute), the end of the row's bucket
// plus Options.Retention, in Unix seconds: DynamoDB deletes the row some
// time after it (sink.Retention says why that never takes a row the flush
// or the recount needs). decodeItem ignores the attribute.
//
// Every write that can create a row (Put, PutFinal) also sets bucket_shard
// (BucketShardAttribute) to "<bucket>#<n>", n = BucketShard(entity): the
// first four bytes of SHA-256 of the ad id, big-endian, mod BucketShards
// (32). The number of shards and the hash are part of the data contract:
// QueryBucket queries the 32 keys "<bucket>#0" to "<bucket>#31" and merges
// them in entity order. Like expires_at, bucket_shard is no writer's
// attribute: no sink.Item carries it, and the flush's conditional Delete
// does not count it. A row written before the attribute existed is missing
// from the index until it is written again or BackfillBucketShards sets it.
//
// by_bucket_shard's price: each row write also writes the index's copy,
// and the rows of one minute (or hour) of every ad are written in a burst
// when the watermark closes the minute. One index partition key takes
// about 1,000 writes a second; the bucket's rows are spread over 32 keys by
// the ad's hash, so a bucket takes about 32 × 1,000 = 32,000 writes a
// second before the index throttles, and a throttled global secondary
// index throttles the table's writes (adclick_dynamo_throttles_total).
// A page of QueryBucket costs 32 queries (each at least one read unit's
// half), and reads a few rows per shard past the page.
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
// The condition carries the writer's token (sink.Token): job_gen and wf,
// the lease fence of the last tagged write, compared lexicographically. A
// write with fence 0 REMOVEs wf, so a store written without range leases
// holds the same items as before fences. RemoveFenced and DeleteFenced
// (sink.FencedRows) add the fence to the flush's removals; with a fence
// above 0, RemoveFenced sends a second UpdateItem only when the first,
// which also raises wf and needs job_gen to be the token's, is refused (an
// item of another generation, whose fence is not comparable).
//
// The table also holds one item per job_gen that is no row: the fence
// marks (RaiseFenceMark, FenceMarks; sink.FenceAheadError says what they
// are for), key FenceMarkEntity "#fences" + "g<gen>", one number k<kg> per
// key group, the highest fence a range covering it has taken under that
// generation, and a version v. Its bucket, not its entity, keeps it apart
// from the rows (a row's bucket starts with M or H). It has no tag index
// key and no bucket_shard (so it is in no index) and no expires_at;
// Scan skips it and BackfillBucketShards leaves it alone, and Get,
// QueryIndex and QueryBucket, which read rows by their buckets and
// indexes, never meet it.
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
// Range pipelines sharing the table each write through a view with an
// index scope (Store.Scoped): the view's tag index keys are
// "<scope>/<epoch>#<shard>" (sink.ScopedIndexKey), in the same two GSIs, so
// a range's flush queries only what it wrote, whatever epoch numbers the
// other ranges use. The unscoped store keeps "<epoch>#<shard>".
//
// A Store is safe for concurrent use. It bounds the requests it has in
// flight at once (Options.MaxInFlight), across all calls and all its views.
package dynamo
