// Package state is the Pebble state backend of one adclick process: the
// serialized state of operators (small blobs per operator and key group,
// written at the barrier) and the dedup sets of clicks (ad, click id) with
// event-time expiry. One DB serves every subtask of the process.
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
//	'g' kg(click id) bucket(8 bytes)
//	    len(ad)(uvarint) ad click id                  → empty: dedup entry
//	'd' kg(click id) bucket(8 bytes) click id         → empty: legacy dedup entry
//	'f' kg(click id)                                  → bucket(8 bytes): expiry bound
//
// Dedup key groups are one byte. An operator name may not contain 0x00.
// An ad id may (ingest accepts control characters), so the ad is preceded
// by its length rather than followed by a separator. The dedup bucket is
// the minute of the entry's expiry, floor(expiryMs / 60000), as a
// big-endian int64 with its sign bit flipped, so that negative times order
// before positive ones. The click id's key group comes first and the
// bucket next, as in the legacy layout: a key group's entries are one span
// in bucket order, so a Dedup loads a key group or rebuilds a filter with
// one iteration, a sorted commit batch lands on a few places per key group
// of the memtable, and Expire deletes one range per key group. The ad's key
// group is not in the key: a range pipeline's DB holds only its own ads'
// entries, since its source drops other ranges' clicks before the
// pre-aggregators (docs/scale-out.md §3.3).
//
// # Dedup identity and expiry
//
// A click is identified by (key group of the click id, ad, click id): two
// copies of one id with one ad are one click whatever impression (and so
// expiry) each carries, so Insert answers "duplicate" for any (ad, id)
// already present; the same id with another ad is another click. The
// bucket in the key is bookkeeping beside the identity: the DB holds each
// (ad, id) once, under the bucket of the latest expiry any of its copies
// carried. A copy whose expiry lies in a later bucket than the stored one
// (rare: a resend normally carries the same impression) moves the entry:
// the old key is deleted and the new one set in the same batch. Expiring
// ids by event time (seed 001 Part 5: the timer at impression + 2 h, never
// a processing-time TTL) is then a bound per key group, the first bucket
// not expired ('f'): every reader (Insert, a Dedup's load, a restored
// checkpoint) skips the keys below it. Expire moves it, a point write per
// key group, and deletes the keys below it in batches, one DeleteRange per
// key group that holds entries: every minute at a high rate, at least every
// 32 minutes at a low one (a range deletion per key group and minute made
// a replay of a low-rate stream cost eleven times as much CPU per insert,
// as Pebble fragments a memtable's range deletions again after each one,
// see physicalPerKeyGroup). One write per new click and no separate timer
// keys. Entries are forgotten up to a
// minute after the latest expiry of their copies, which only keeps them
// longer than required. (preagg.MemDedup, the reference, keeps an entry
// until its first copy's expiry; keeping it until the latest one is never
// shorter.)
//
// Legacy entries ('d') are those of the previous version, whose identity
// was the click id alone. They are never written; a lookup consults them
// too, so a copy of a legacy id is a duplicate whatever its ad (as it was
// when the id was counted), and a copy with a later expiry than the legacy
// entry's is added as a new entry in its own bucket. Expire removes them
// as it removes the others (the same bound, and one DeleteRange per key
// group while any remain), so they are gone one horizon after the upgrade
// (26 h if the processing-time guard is in play). Their filters (below)
// are kept apart, by the hash of the id alone, and dropped with them: once
// they are gone an Insert tests nothing it did not test before the
// upgrade.
//
// # Dedup batches and filters
//
// Each Dedup (one per pre-aggregator subtask, on its own key groups of
// click ids) keeps its uncommitted writes in memory: the keys back to back
// in one reused buffer plus a small open-addressing hash table over them,
// indexed by (key group, ad, id), so Insert sees its own pending ids
// whatever their bucket and allocates nothing in steady state. Commit sorts the pending keys and
// applies them to the DB as one plain batch in key order (the memtable
// inserts sorted keys faster than random ones); Insert commits by itself
// once the pending keys pass Options.DedupBatchBytes. (An indexed Pebble
// batch would cost a second skiplist insert per id, on top of the
// memtable's.)
//
// Most Inserts are new ids, and proving absence through Pebble (the
// memtables, every level's filter) costs several microseconds, more so
// when the id could be in any of a hundred buckets. So a Dedup also keeps
// an in-memory split-block Bloom filter per (key group of the click id,
// partition of 32 expiry buckets), of the hashes of (ad, id), and per
// partition a bitmask of the buckets that hold ids; a hit is looked up
// under (key group, bucket, ad, id). Each id sets, in one 64-byte block,
// 8 bits from its hash and 8 bits from its hash mixed with its bucket's
// offset in the partition (24 bits per id: 3 bytes per id held; a new
// partition is sized for 1.5 times the largest of its key group, so 4–6
// bytes per live id, see FilterBytes). An Insert tests the block of its id
// in every live partition of its key group (four or five for a 2 h
// horizon, read ahead by Prefetch, and as many legacy ones while legacy
// entries last); when all say "absent", the id is new without touching
// Pebble. When one says "maybe" (every duplicate, and under 1% of new
// ids), the pending set
// decides, or else a point Get in each bucket of the partitions that hit
// whose tag bits match too (usually only the id's own bucket; well under
// 0.5% of new ids need one Get in vain). Expire clears expired buckets from
// the bitmasks and drops a partition's filter once none of its buckets
// holds ids, so a filter holds expired ids up to 32 minutes longer than the
// DB, which costs memory and lookups only. A full filter is rebuilt four
// times as large from its partition's keys in the DB and the pending
// batch (one span of keys): each filter stays a single Bloom filter, one
// block per partition to test. A key group's filters are built from the
// DB on the Dedup's first use of that key group, by Insert or Expire
// (after a restore this reads every id of the key group once, in key
// order), which is why two Dedups must not share a key group.
//
// The filters' memory has a budget (Dedup.SetFilterBudget; the job gives
// each pre-aggregator its share of --dedup-memory-mb). Past it, a filter
// is folded in half — adjacent blocks ORed together, which keeps every id
// because an id's block among n/2 blocks is its block among n halved —
// the densest filter first, so the budget is spread evenly over the ids.
// A folded filter takes more ids than it was sized for, and is rebuilt
// larger (folding others) only once it holds twice the ids it had when
// folded, so the newest partition keeps growing and the old ones are not
// read back for a stray id. So memory is bounded whatever the number of
// live ids, and what rises instead is the share of new ids that a filter
// cannot answer, each answered by point Gets in Pebble (whose own table
// filters and block cache are bounded by Options). BenchmarkDedupBudget
// measures the cost.
package state
