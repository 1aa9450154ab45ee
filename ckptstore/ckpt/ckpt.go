// Package ckpt is the contract between the runtime and the store that
// keeps its checkpoints, savepoints and epoch high-water mark: the Store
// interface, the two kinds of snapshot and their errors. The stores
// themselves (a local folder, an S3 bucket) are in package ckptstore; the
// runtime depends on this package only, and its caller picks the store.
package ckpt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Kind says whether an id names a checkpoint (pruned by retention) or a
// savepoint (kept until deleted explicitly). The two have separate id
// spaces: savepoint 42 is usually a copy of checkpoint 42.
type Kind uint8

const (
	// Checkpoint is a periodic checkpoint, subject to Prune.
	Checkpoint Kind = iota + 1
	// Savepoint is an operator's savepoint, never pruned.
	Savepoint
)

// String returns "checkpoint" or "savepoint".
func (k Kind) String() string {
	switch k {
	case Checkpoint:
		return "checkpoint"
	case Savepoint:
		return "savepoint"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid returns an error for a Kind other than Checkpoint and Savepoint.
func (k Kind) Valid() error {
	if k != Checkpoint && k != Savepoint {
		return fmt.Errorf("ckpt: unknown kind %d", k)
	}
	return nil
}

// Prefix returns "ckpt-" or "sp-".
func (k Kind) Prefix() string {
	if k == Savepoint {
		return "sp-"
	}
	return "ckpt-"
}

// Name returns the directory (or object prefix) name of id: ckpt-<12 digits>
// for checkpoints, as the runtime has always named them.
func (k Kind) Name(id int64) string {
	return fmt.Sprintf("%s%012d", k.Prefix(), id)
}

var (
	// ErrNotFound is returned by Download and Delete for an id that has no
	// complete checkpoint or savepoint.
	ErrNotFound = errors.New("ckpt: not found")
	// ErrExists is returned by Upload when a complete checkpoint or
	// savepoint with the same id exists already.
	ErrExists = errors.New("ckpt: already exists")
	// ErrCorrupt is returned by Download when a file does not match the
	// size or checksum its manifest records.
	ErrCorrupt = errors.New("ckpt: corrupt")
)

// Store keeps checkpoints, savepoints and the epoch high-water mark. Ids
// are the runtime's checkpoint ids (≥ 0). Implementations are safe for
// concurrent use.
type Store interface {
	// Upload stores the directory tree localDir (regular files and
	// directories only) as checkpoint or savepoint id. The copy becomes
	// visible to Latest, List and Download only once complete; a failed or
	// interrupted upload is never restored. localDir is not modified.
	Upload(ctx context.Context, localDir string, id int64, kind Kind) (UploadStats, error)
	// Latest returns the newest complete id of kind, or ok false if none.
	Latest(ctx context.Context, kind Kind) (id int64, ok bool, err error)
	// List returns the complete ids of kind, ascending.
	List(ctx context.Context, kind Kind) ([]int64, error)
	// Download recreates the tree of a complete id in localDir, which must
	// not exist or be an empty directory. Every file is checked against the
	// size and SHA-256 recorded at upload; localDir appears only once all
	// of them are in place.
	Download(ctx context.Context, id int64, kind Kind, localDir string) error
	// ReadFile returns one file of a complete id by its slash-separated
	// path in the tree (for example "meta.json"), checked like Download's;
	// ErrNotFound if the id is not complete or has no such file.
	ReadFile(ctx context.Context, id int64, kind Kind, path string) ([]byte, error)
	// Delete removes a complete or partial id (ErrNotFound if nothing is
	// stored under it). Shared files are left to Prune.
	Delete(ctx context.Context, id int64, kind Kind) error
	// Prune keeps the newest keep (≥ 1) checkpoints and every savepoint,
	// removes abandoned partial uploads and the shared files nothing kept
	// references.
	Prune(ctx context.Context, keep int) (PruneStats, error)
	// SetHigh durably records that epochs up to e may have been written.
	// It is called before any write tagged e can happen.
	SetHigh(ctx context.Context, e int64) error
	// High returns the last value given to SetHigh, or ok false if it was
	// never called.
	High(ctx context.Context) (e int64, ok bool, err error)
	// PinStart records startMs (Unix ms, processing time) as when this
	// lineage of checkpoints first started reading, unless a start is
	// recorded already, and returns the recorded one. A source that
	// starts a shard without a saved position at "latest" starts it at
	// that time instead, so that a crash before the first checkpoint (or
	// a shard that had no record by then) loses nothing to a later
	// "latest". It is called before the source opens.
	PinStart(ctx context.Context, startMs int64) (int64, error)
	// Location describes where id is kept, for logs and operators: a
	// directory (Local) or the s3:// URL of its manifest (Remote).
	Location(id int64, kind Kind) string
}

// UploadStats describes one Upload. Reused files were already stored by an
// earlier upload (Remote: shared table files; Local: hard links) and cost
// no transfer.
type UploadStats struct {
	Files         int           // files in the tree
	FilesUploaded int           // files transferred
	FilesReused   int           // files referenced, not transferred
	BytesUploaded int64         // bytes transferred (the manifest excluded)
	BytesReused   int64         // bytes referenced, not transferred
	Duration      time.Duration // wall time of the whole upload
}

// PruneStats describes one Prune.
type PruneStats struct {
	Checkpoints int   // complete checkpoints removed
	Partial     int   // abandoned partial uploads removed
	Shared      int   // shared files removed (Remote only)
	SharedBytes int64 // their size
}

// DropAfter deletes the checkpoints with ids above id: a start from
// savepoint id abandons them, and the new lineage reuses their ids.
func DropAfter(ctx context.Context, s Store, id int64) error {
	ids, err := s.List(ctx, Checkpoint)
	if err != nil {
		return err
	}
	for _, x := range ids {
		if x > id {
			if err := s.Delete(ctx, x, Checkpoint); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
	}
	return nil
}
