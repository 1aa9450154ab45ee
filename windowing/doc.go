// Package windowing owns the per-ad minute windows with their early
// firings, the hour roll-up built only from closed minutes, and key groups.
// Sliding and session windows and the per-device burst rule are not part of
// the pipeline: every window it needs is a tumbling minute, and no verdict
// depends on a device's click rate, so they are not implemented here.
//
// Minutes is the window operator of one subtask. Like the rest of the
// deterministic core it never reads a clock, starts a goroutine or does I/O:
// the runtime calls
//
//	Add(partial)            a partial sum from a pre-aggregator
//	Advance(wm, emit)       the subtask's input watermark moved: fire every
//	                        minute whose last millisecond it reached
//	Early(emit)             the 1 s processing-time trigger: running totals
//	Snapshot / Restore      at a barrier / on restore, per key group
//
// An hour's fast total is the sum of its closed minutes only, never a
// separate hour window, so it always equals the sum of its minute rows.
package windowing
