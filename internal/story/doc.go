// Package story is a single-goroutine test harness that drives the real
// event-time core (ingest.Watermarks → preagg.PreAgg subtasks → windowing.Minutes
// and latepath.Late subtasks) the way the runtime's driver and operators do,
// from a script of events: clicks, processing-time advances, checkpoint
// barriers, crashes and restores.
//
// It exists so that scenarios (the seeds' worked examples) and property
// tests can run the core deterministically, without goroutines, channels,
// Pebble or sinks. Processing time is always an argument. Instead of real
// sinks it keeps a small model of the row store (minute and hour rows with
// per-writer tags, the closed-row condition and the full flush after a
// restore) and of the running totals, so that tests can check what a reader
// would finally see.
//
// Everything the core does is reported as Events, in the order it happens.
// A Story is not safe for concurrent use.
package story
