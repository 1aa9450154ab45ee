// Package story is a single-goroutine test harness that drives the job's
// subtasks — the operator package's Source, Pre and Win machines, the same
// ones the runtime runs — from a script of events: clicks, processing-time
// advances, checkpoint barriers, crashes and restores.
//
// It holds no decision of its own: it steps each machine with the messages
// the previous one sent, at once and in order, and carries out their Ready
// as the runtime would, except that instead of real sinks it keeps a small
// model of the row store (minute and hour rows with per-writer tags, the
// closed-row condition and the full flush after a restore) and of the
// running totals, so that tests can check what a reader would finally see.
// A checkpoint is what the machines acknowledge at a barrier, kept in
// memory; a restore builds new machines from it as the runtime's Open does.
//
// Everything the machines do is reported as Events, in the order it
// happens. A Story is not safe for concurrent use.
package story
