// Package ckptstore keeps the job's checkpoints, savepoints and epoch
// high-water mark in durable storage: a local folder (Local, embedded mode)
// or an S3 bucket (Remote, AWS mode, where a container's disk does not
// survive a restart). Both implement ckpt.Store, the contract the runtime
// depends on; its caller picks the store.
//
// # How the runtime drives it
//
// The runtime builds each checkpoint in a local directory (meta.json and a
// Pebble checkpoint under state/), then:
//
//	SetHigh(e)        before any write tagged e can happen
//	Upload(dir, id)   after the local checkpoint is complete; it is
//	                  restorable once Upload returns nil
//	Prune(keep)       after Upload: keeps the newest keep checkpoints and
//	                  every savepoint
//	Latest + Download at start, onto an empty data directory
//
// # Remote layout (all keys under PREFIX/)
//
//	epoch-high                             the high-water mark, "N\n"
//	shared/<sha256>.sst                    Pebble table files, content-addressed,
//	                                       shared by every checkpoint that holds them
//	checkpoints/ckpt-<id>/intent.json      shared keys the upload will reference,
//	                                       written before any of them is put
//	checkpoints/ckpt-<id>/files/<path>     every other file (MANIFEST-*, OPTIONS-*,
//	                                       meta.json, ...)
//	manifests/ckpt-<id>.json               written last: every file with its size,
//	                                       SHA-256 and key. A checkpoint exists
//	                                       only once its manifest does.
//	savepoints/sp-<id>/..., manifests/sp-<id>.json   the same for savepoints
//
// (<id> is zero-padded to 12 digits.) Table files are immutable, so a table
// a previous checkpoint uploaded is referenced again, not sent again: an
// incremental checkpoint uploads only the tables written since, plus a few
// small files. Addressing by content rather than by file name matters: a
// Pebble database restored from an older checkpoint reuses file numbers
// with different contents.
//
// # Prune and concurrent uploads
//
// Only Prune deletes shared tables, and it deletes a table only when no kept
// checkpoint, no savepoint and no upload that may still be running
// references it. Within one Remote, Upload decides which tables to reuse
// and registers them as in flight under the same lock that Prune holds while
// it computes and deletes; Prune also removes what it deletes from the set
// of tables known to be present, so an upload after it sends them again. An
// upload reuses only tables referenced by a checkpoint this Remote uploaded
// or downloaded, or by the newest complete checkpoint, all of which a prune
// keeps. Incomplete uploads (no manifest) are protected through their
// intent.json while they may still be running: in flight in this process,
// newer than the newest complete one, or younger than Options.PendingGrace;
// older ones are abandoned and removed with their files. A dropped
// checkpoint loses its manifest before its files.
//
// One writer per prefix: a running job owns its prefix (as it owns its data
// directory). Two jobs, for example blue and green after a savepoint, need
// different prefixes; their checkpoint ids would clash anyway.
//
// All methods of Local and Remote are safe for concurrent use.
package ckptstore
