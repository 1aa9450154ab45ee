// Package state is the Pebble state backend of one adclick process: the
// serialized state of operators (small blobs per operator and key group,
// written at the barrier) and the dedup sets of click ids with event-time
// expiry. One DB serves every subtask of the process.
//
// # Durability
//
// The write-ahead log is off. Durability comes from checkpoints only:
// Checkpoint flushes the memtable and asks Pebble for a consistent on-disk
// copy, in which SSTables are hard links (so a checkpoint costs only the
// tables written since the previous one, until compactions rewrite them).
// After a crash the process restores with OpenFromCheckpoint and replays its
// sources from the positions saved with that checkpoint; anything written
// after the checkpoint is gone, as it must be.
//
// The runtime calls Checkpoint only while no operator writes (operators are
// paused at the barrier), after calling Commit on every Dedup.
//
// # Sizing (two cores)
//
// Defaults: a 64 MiB block cache; 64 MiB memtables (fewer, larger flushes
// cost about 15% less compaction CPU than 32 MiB for random dedup ids; at
// most two exist at once); 10-bit Bloom filters on every level's tables (a
// point lookup of an absent key rarely reads a data block); L0 compaction
// from 16 files (writes stall at 64), 16 MiB L0 files and a 256 MiB Lbase
// (on a 10M-click run, about 12% less CPU for the whole job than Pebble's
// 4 files, 2 MiB and 64 MiB, for about 20% more state on disk, and far
// fewer tables rewritten between checkpoints); at most two concurrent
// compactions; 1 MiB dedup batches.
// Cache, memtable, compactions and batch size are Options fields.
//
// # Key layout
//
//	'b' op 0x00 kg(2 bytes, big-endian)              → operator blob
//	'd' kg(1 byte) bucket(8 bytes) click id           → empty: dedup entry
//
// An operator name may not contain 0x00. The dedup bucket is the minute of
// the id's expiry, floor(expiryMs / 60000), as a big-endian int64 with its
// sign bit flipped, so that negative times order before positive ones.
//
// Why the bucket is in the key: a duplicate is a resend of the same click,
// so it carries the same impression time and therefore the same expiry
// (impression + 2 h, computed by the caller). A lookup is a single point Get
// of (kg, bucket, id), and expiring ids by event time (seed 001 Part 5: the
// timer at impression + 2 h, never a processing-time TTL) is one DeleteRange
// per key group over whole buckets whose minute ends at or before the
// watermark: one write per new click and no separate timer keys. Ids are
// removed up to a minute after their exact expiry, which only keeps them
// longer than required.
//
// # Dedup batches and filters
//
// Each Dedup (one per pre-aggregator subtask, on its own key groups) keeps
// its uncommitted inserts in memory: the keys back to back in one reused
// buffer plus a small open-addressing hash table over them, so Insert sees
// its own pending ids and allocates nothing in steady state. Commit sorts the
// pending keys and applies them to the DB as one plain batch in key order
// (the memtable inserts sorted keys faster than random ones); Insert commits
// by itself once the pending keys pass Options.DedupBatchBytes. (An indexed
// Pebble batch would cost a second skiplist insert per id, on top of the
// memtable's.)
//
// Most Inserts are new ids, and proving absence through Pebble (the
// memtables, every level's filter) costs several microseconds. So a Dedup
// also keeps an in-memory split-block Bloom filter per (key group, expiry
// bucket), 12 bits per id (about 1.5 bytes of memory per live id, 15 MB for
// 10M ids, see FilterBytes): when it says "absent", the id is new without
// touching Pebble; when it says "maybe" (every duplicate, and about 0.5% of
// new ids), the pending set and then a point Get decide. Filters of expired
// buckets are dropped by Expire. A key group's filters are built from the DB
// on the Dedup's first use of that key group (after a restore this reads
// every id of the key group once), which is why two Dedups must not share a
// key group.
package state
