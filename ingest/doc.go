// Package ingest turns source records into clicks with event times, and
// generates each shard's watermark.
//
// It owns the sources (Kinesis shard readers, the JSON Lines file source,
// the generator), record decoding and validation, KPL de-aggregation, the
// device-time clamp, and per-shard watermarks with idleness (DESIGN.md §2,
// §5; seed 001 Part 2).
//
// # Decoding and validation
//
// Decode is a single-pass scanner for the flat click object; it agrees with
// encoding/json on every input (a fuzz test holds it to that) but allocates
// once per click. A record is judged in two steps:
//
//	var c ingest.Click
//	if r := ingest.Decode(payload, &c); r != "" { /* exceptions log: invalid:r */ }
//	c.Shard = shardID                         // Kinesis: the reader knows the shard
//	if r := c.Finish(arrivalMs); r != "" { /* exceptions log: invalid:r */ }
//	// c.EventMs is now the clamped event time; c.DeviceMs keeps the raw one.
//
// A file line carries its own shard and arrival time: Decode, then
// FinishLine. A click built in code (the generator) is checked with Validate,
// then Finish. Reason lists every reason a click can be rejected for; an
// invalid click is logged and counted, never stops the job.
//
// # Event time
//
// Event time is the device's time clamped into [impression, arrival]
// (Clamp), so a phone whose clock is years ahead cannot lift its shard's
// watermark, and the raw device time stays on the click for fraud analysis.
//
// The decoding, validation and watermark code is part of the deterministic
// core: it never reads a clock, starts no goroutines and does no I/O;
// arrival and processing times are parameters.
package ingest
