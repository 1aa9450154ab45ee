package operator

// Schedule decides when periodic checkpoints begin, in processing time: an
// interval after the last one began, and no sooner than a minimum pause
// after the last one completed (Flink's minimum pause between checkpoints),
// so that checkpoints slower than their interval leave the graph time to
// process. A tenth of the interval before a checkpoint is due it asks once
// for an early state flush, which the checkpoint then need not do while the
// graph waits.
type Schedule struct {
	IntervalMs, PauseMs int64
	began, ended        int64
	preflushed          bool
}

// Start sets the processing time the schedule counts from (the job's start).
func (s *Schedule) Start(procMs int64) { s.began = procMs }

// Due reports whether a checkpoint should begin at t.
func (s *Schedule) Due(t int64) bool {
	return t-s.began >= s.IntervalMs && t-s.ended >= s.PauseMs
}

// PreflushDue reports, once per interval, whether t is within the last
// tenth of the interval before the next checkpoint.
func (s *Schedule) PreflushDue(t int64) bool {
	if s.preflushed || t-s.began < s.IntervalMs-s.IntervalMs/10 {
		return false
	}
	s.preflushed = true
	return true
}

// Completed records a checkpoint that began at procMs and completed at
// endMs (processing time; endMs ≥ procMs).
func (s *Schedule) Completed(procMs, endMs int64) {
	s.began, s.ended = procMs, max(procMs, endMs)
	s.preflushed = false
}
