// Package operator holds the job's subtasks as deterministic machines, in
// the style of etcd raft's RawNode: a machine takes one message at a time
// (Step), and everything it decided to do comes back as a Ready that the
// caller carries out before it tells the machine so (Advance). A machine
// starts no goroutine, owns no channel and does no I/O; processing time is
// an argument of every message. The same machines run in the runtime, where
// each is one goroutine between bounded channels with Pebble, the sinks and
// the lake behind it, and in the scenario harness (internal/story), which
// steps them one after another on one goroutine.
//
// There are three machines, one per stage of the graph:
//
//   - Source is the driver's part: per-shard watermarks and their emission
//     tick (every WatermarkIntervalMs, aligned to multiples of it), the
//     routing of valid clicks to the pre-aggregator owning their click id's
//     key group, in batches, and the exceptions-log record of an invalid
//     one. Its Ready holds the messages for the pre-aggregators, in order.
//   - Pre is a pre-aggregator subtask: verdicts (dedup, horizon, lateness),
//     partial sums by (ad, window), late clicks routed to the window subtask
//     owning their ad, the watermark floor at a barrier. Its Ready holds the
//     messages for the window subtasks, the lake records of the clicks it
//     judged, and its acknowledgement of a barrier.
//   - Win is a window subtask: the minimum watermark and processing time of
//     its inputs, barrier alignment, the minute windows and hour roll-up,
//     the 1 s early firing of running totals, late totals, the tagged row
//     writes and running totals they make, and the rewrite of every total
//     after the running-total store lost data or was unreachable. Its Ready
//     holds the row writes (by tagged writer), the totals, and at an aligned
//     barrier the snapshot of its state.
//
// The caller's loop, for every machine:
//
//	m.Step(msg)          // or, for Source: Click, Reject, Tick, Barrier, ...
//	rd := m.Ready()
//	// carry out rd: for Pre, at an Ack: commit the dedup state and flush
//	// the lake records of epoch rd.Ack.PrevEpoch first; write rd.Lake; send
//	// rd.Sends in order (each to its destination); deliver the Ack.
//	// For Win: when rd.Write, write rd.Puts (every writer) and, if
//	// rd.TotalsDue, rd.Totals — report a failed totals write with
//	// ReportTotalsFailed — then deliver rd.Ack.
//	m.Advance()
//
// A Win's Ready accumulates until rd.Write (or an Ack, or Done) says it must
// be carried out: the runtime then writes in batches, and the harness, which
// has no batches to save, may carry out and Advance after every Step. Every
// write carries the epoch it was decided in, so when it is written does not
// change what it says.
package operator
