// Package runtime runs the job: it runs the subtask machines of package
// operator (which hold every decision: watermarks, routing, verdicts,
// windows, what to write and when) in goroutines connected by bounded
// channels, with Pebble, the sinks and the lake behind them; it takes
// aligned checkpoints, restores them and runs the full flush on every
// start. The scenario harness internal/story steps the same machines on one
// goroutine.
//
// The graph on one machine:
//
//	source driver ──► P pre-aggregator subtasks ──► P window subtasks ──► sinks
//	(one goroutine:     (keyed by click id:           (keyed by ad: minute
//	 read, decode,       dedup, horizon, lateness      windows, hour roll-up,
//	 validate, clamp,    against max(floor, wm),       late totals, early
//	 per-shard wms,      500 ms partials)              firings)
//	 checkpoints)
//
// The driver is also the checkpoint coordinator. Because one goroutine reads
// every shard, computes the watermark and injects barriers, every subtask
// receives the same sequence of watermarks and barriers, and a file replay
// (processing time = arrival time, a virtual clock) gives the same output
// on every run.
//
// A checkpoint is aligned and briefly stops the graph: the driver saves the
// source positions and injects barrier n; each pre-aggregator forwards its
// buffered partials, commits its dedup state, forwards the barrier and waits;
// each window subtask, once barrier n has arrived from every input, writes
// its pending output (so nothing the state has decided is left unwritten),
// hands its state to the coordinator and waits. The coordinator then writes
// a Pebble checkpoint and the metadata, and lets everyone go on.
//
// On every start the job restores the latest checkpoint (or the empty state,
// id 0), runs the full flush of every epoch ≥ c up to the highest epoch any
// earlier run may have written, and only then reads.
package runtime
