// Package bench is the harness of adclick bench: it measures the pipeline
// against the physical limit of the machine, on one trace, in one run.
//
// Each variant runs as a process of its own (the adclick executable,
// Options.Self), so that its CPU time, peak RSS and state are measured
// cleanly:
//
//	limit                  adclick bench --run-limit: Limit decodes each click
//	                       and counts it in a map by (ad, minute), on every core
//	pipeline               adclick run --source file: (the full job, embedded
//	                       mode), which writes its runtime.Stats with WriteStats
//	pipeline-nodedup       the same with --no-dedup
//	pipeline-nocheckpoint  the same with --no-checkpoint
//
// Run generates the trace once (ingest.WriteTrace) unless it exists, runs
// the variants in order and returns a Result for each, with its ratio to
// limit; WriteTable and WriteJSON print them. The package owns the child
// processes it starts: each has ended when Run returns.
package bench
