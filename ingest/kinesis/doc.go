// Package kinesis is the production click source: it reads every shard of
// an Amazon Kinesis data stream, by polling with GetRecords or by enhanced
// fan-out with SubscribeToShard, and puts records into one.
//
// # Reading
//
// Open lists the stream's shards and starts one reader goroutine per shard
// that may be read. A reader takes a shard iterator (after the restored
// position, or from Options.StartAt for a shard with no position), then
// loops on GetRecords within the service limits: at most one call per
// MinCallInterval (200 ms: 5 calls per second per shard), at most Limit
// records per call, and no faster than 2 MiB/s per shard. Throttling
// (ProvisionedThroughputExceededException, LimitExceededException) and
// server errors back off with jitter; an expired iterator is re-acquired
// after the last record fetched. Each reader de-aggregates KPL records
// (package kpl) into user records and queues them, up to BufferRecords per
// shard; a full queue stops that reader fetching (backpressure).
//
// # Enhanced fan-out
//
// Options.Read chooses how shards are read: ReadPoll (the default, above)
// or ReadEFO with Options.Consumer, a consumer name. Polling readers of a
// stream share each shard's 5 calls and 2 MiB per second; with enhanced
// fan-out the service pushes each shard to each registered consumer at up
// to 2 MiB/s of its own, so production fleets of two or more workers read
// by EFO, one consumer per worker slot, and a single process, tests and
// kinesalite (which has no SubscribeToShard) poll.
//
// In EFO mode Open finds the stream's ARN (DescribeStreamSummary),
// registers the consumer if DescribeStreamConsumer does not know it
// (RegisterStreamConsumer; ResourceInUseException means someone else just
// registered it), and waits up to ConsumerWait until it is ACTIVE. Each
// shard's reader then subscribes from the same start a poller would take
// (the restored position, StartAt, or TRIM_HORIZON for children) and
// queues each SubscribeToShardEvent's records through the same
// de-aggregation, queue, back-pressure (a full queue stops it taking
// events, and the service stops pushing), positions and lag as polled
// records. A subscription lasts 5 minutes; the reader subscribes again
// after the last event's ContinuationSequenceNumber, at most once per
// SubscribeInterval. A subscription refused with ResourceInUseException
// (another one of the consumer and shard less than 5 s old) or taken over
// mid-stream is retried with backoff and counted, not as a failure. The
// last event of a closed shard has no continuation: the shard ends as a
// polled one does, so children still start after their parents. Two
// sources must never read through one consumer at once: each would take
// the other's subscriptions over, and both would read every record.
//
// # The driver
//
// The driver goroutine consumes the queues through Next, one user record at
// a time, in order within a shard, the shards with queued records taking
// turns one record each. Right after Open, Next holds back user records
// (not shard events) until every shard it started has fetched (a user
// record, a caught-up reply or its end), for at most StartHold (10 s):
// otherwise a backlog would come out in the order the shards' first
// GetRecords calls return, one whole shard after another, and the job
// watermark, a minimum over shards, would stay unset while it is read.
// The driver loop:
//
//	src, err := kinesis.Open(ctx, client, kinesis.Options{Stream: "clicks", Positions: restored})
//	defer src.Close()
//	for {
//		r, ok, err := src.Next(ctx, 100*time.Millisecond)
//		// err: fatal (stream deleted, access denied, retries exhausted)
//		// !ok: nothing arrived within the wait; tick the watermarks
//		switch r.Event {
//		case kinesis.EventShardAdded:  // watermarks.AddShard(r.Shard, now)
//		case kinesis.EventShardClosed: // watermarks.CloseShard(r.Shard)
//		default:                       // r.Bad != "": exceptions log "invalid:"+r.Bad
//		}                              // else decode r.Data, c.Shard = r.Shard, c.Finish(r.ArrivalMs)
//		// checkpoint: src.Positions() covers exactly the records returned so far
//	}
//
// # Positions
//
// A position is "<sequence number>/<sub-sequence number>" of the last user
// record Next returned from a shard (the sub-sequence is the index inside a
// KPL aggregated record, 0 for a plain record), or "closed" for a shard read
// to its end whose every record was returned. A restored position resumes
// with AT_SEQUENCE_NUMBER and skips the user records of that Kinesis record
// up to and including the saved sub-sequence, so a restart inside an
// aggregated record loses and repeats nothing.
//
// # Resharding
//
// Shards are re-listed every Rediscover interval (and at once when a shard
// ends). A child shard (after SplitShard or MergeShards) is read only after
// every parent that is still listed (ParentShardId and
// AdjacentParentShardId) is closed: read to its end and every record handed
// out, so the records of one partition key stay in order across a reshard.
// Next reports a shard's lifecycle with events: EventShardAdded before its
// first record, EventShardClosed after its last.
//
// # Putting
//
// Put sends records with PutRecords within the service limits, retrying
// the entries that fail. A Putter is what adclick put and gen --to drive:
// it makes each click line a record (keyed by PartitionKey, sent to the
// open shard its "shard" value maps to), refuses a line that cannot be one
// record with a TooLargeError, batches the rest (KPL-aggregated if asked)
// and counts what was confirmed written.
//
// The package owns goroutines and does I/O; it is not part of the
// deterministic core. The kinesistest package holds an in-memory API for
// tests and for running a job without a server.
package kinesis
