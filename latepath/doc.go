// Package latepath is the side output: late totals per (ad, hour) for clicks
// whose minute had closed when they were judged, and the exceptions-log
// record that carries every click with its verdict.
//
// Late is deterministic state driven by the runtime: Add for each late
// click, Flush to collect the totals that changed (written as tagged late_*
// attributes on the hour row), Expire when the watermark has passed the
// point after which no click can be late for an hour any more, and
// Snapshot/Restore per key group.
package latepath
