// Package source is the contract between the job and what it reads: a
// Source hands over records one at a time, in arrival order per shard,
// knows the position after the last record the job routed, and is opened at
// the positions of the checkpoint the job restored. This package also holds
// the file replay and generator sources; the Kinesis source lives with its
// reader in ingest/kinesis.
//
// Adding a source is a new package with an Open function and one line in
// cmd/adclick that passes it as runtime.Config.OpenSource.
package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adclick/adclick/clock"
	"github.com/adclick/adclick/ingest"
)

// Event is a shard lifecycle event a Record may carry instead of a payload.
type Event uint8

// Shard events.
const (
	// NoEvent: the record carries a payload.
	NoEvent Event = iota
	// ShardAdded comes before a shard's first record: the shard takes part
	// in the watermark from now on.
	ShardAdded
	// ShardClosed comes after a shard's last record: it no longer holds the
	// watermark back, and its position is final.
	ShardClosed
	// ShardReader reports the state of a shard's reader (Record.Reader),
	// after the records of the read it describes: a shard may go idle only
	// while its reader is caught up.
	ShardReader
)

// Record is one item a source hands the job: a payload, or a shard event
// (then only Shard is set).
type Record struct {
	Line      []byte // the payload; the job does not keep it past the next call
	Truncated bool   // the payload was cut at the size limit
	ArrivalMs int64  // 0 when the arrival time is inside the line (a file replay)
	Shard     string // set when the source knows the shard
	Seq       string // the record's position, for the exceptions log
	Event     Event
	// Bad is a reason the payload could not be unpacked (a KPL aggregate
	// with a bad checksum): the record goes to the exceptions log.
	Bad string
	// Reader is the reader's state of a ShardReader event.
	Reader ingest.ReaderState
}

// Source is what the job reads. It is used by one goroutine.
type Source interface {
	// Next returns the next record. A real-time source waits at most wait
	// and returns ok false if nothing came (or ctx ended); io.EOF ends
	// bounded input.
	Next(ctx context.Context, wait time.Duration) (r Record, ok bool, err error)
	// Routed tells the source that the record last returned has been
	// routed into the graph: positions now cover it.
	Routed()
	// Positions returns the position after the last routed record, by
	// shard (or any keys the source chooses); a checkpoint saves them and
	// the next Open gets them back.
	Positions() map[string]string
	// Virtual reports whether processing time is the records' arrival time
	// (a replay) rather than the clock.
	Virtual() bool
	Close() error
}

// Optional capabilities a Source may have.
type (
	// CaughtUpper reports whether every shard is read to its tip (for
	// --exit-when-idle; a source without it is caught up when idle).
	CaughtUpper interface{ CaughtUp() bool }
	// Lagger reports each shard's consumer lag (Kinesis
	// MillisBehindLatest), for the status page.
	Lagger interface{ Lag() map[string]int64 }
)

// Start is what a source is opened with.
type Start struct {
	// Checkpoint is the id of the checkpoint the job restored (0: none),
	// and Positions its saved positions (nil: start from the beginning).
	Checkpoint int64
	Positions  map[string]string
	// StartMs is when this job's lineage first started reading (Unix ms,
	// pinned in its checkpoint store before the first open; 0: unknown).
	// A source told to start where it has no position at "latest" starts
	// there instead, so that nothing that arrived since the first start
	// is skipped by a restart.
	StartMs    int64
	Clock      clock.Clock // processing time of a real-time source
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Open opens a source at the restored positions.
type Open func(ctx context.Context, at Start) (Source, error)
