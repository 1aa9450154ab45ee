// Package preagg is the operator that decides, per click, what a click is:
// counted, late, a duplicate or beyond the acceptance horizon — and that adds
// the counted clicks into partial sums per (ad, minute) before the shuffle by
// ad (seed 001 Part 3, PRE-AGGREGATE; Part 7, WATERMARK FLOOR).
//
// It is a deterministic state machine. The runtime drives it with four
// inputs, in the order they arrive on its input channel:
//
//	Add(click)      judge one click against max(floor, watermark)
//	Tick(procMs)    processing time moved; maybe forward the 500 ms buffer
//	Watermark(wm)   forward every buffered partial FIRST, then the watermark
//	Barrier()       forward every buffered partial, save the floor candidate
//
// and forwards what each returns. No method reads a clock, starts a
// goroutine or does I/O other than through the Dedup store it was given.
//
// The order of the checks in Add is fixed and documented there; it is what
// makes "no click is ever counted both on time and late" hold.
package preagg
