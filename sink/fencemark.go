package sink

import (
	"errors"
	"fmt"

	"github.com/adclick/adclick/windowing"
)

// FenceAheadError is a refused raise of fence marks: key group KeyGroup
// already holds, under generation Gen, the mark Mark, above the fence
// Fence that was to be marked. It is the lowest such key group of the
// raise's range.
//
// Fence marks tie the lease fences of a row store's writers to the store.
// Every fenced write of a range pipeline carries the fence of its range's
// take (Token), and a store refuses a write under a lower fence of the
// same generation. Fences come from the counters of a lease table, so a
// recreated lease table, or a second job writing the same rows under the
// same generation, starts them again at 1, and every write to a row
// written under a higher fence would be refused, quietly.
//
// So the row store keeps, per generation, a mark for each key group: the
// highest fence any range covering the key group has taken under that
// generation. A range raises the marks of its key groups to its fence
// before it writes (RaiseFenceMark), and a raise below a mark is refused
// with a *FenceAheadError; a worker compares the marks with the counters
// of its lease table before it starts (package fleet). Marks only rise.
// Implementations: sink/dynamo (one item per generation in the rows
// table) and sinktest.MemFenceMarks.
type FenceAheadError struct {
	Gen      int64
	KeyGroup int
	Mark     int64 // the highest fence taken for KeyGroup under Gen
	Fence    int64 // the fence refused
}

func (e *FenceAheadError) Error() string {
	return fmt.Sprintf("sink: key group %d holds fence mark %d under job_gen %d, above fence %d", e.KeyGroup, e.Mark, e.Gen, e.Fence)
}

// ValidFenceMark returns an error unless gen ≥ 0,
// 0 ≤ from < to ≤ windowing.MaxParallelism and fence ≥ 1: the arguments of
// a raise of the marks of key groups [from, to) to fence under gen.
func ValidFenceMark(gen int64, from, to int, fence int64) error {
	var errs []error
	if gen < 0 {
		errs = append(errs, fmt.Errorf("generation %d must not be negative", gen))
	}
	if from < 0 || from >= to || to > windowing.MaxParallelism {
		errs = append(errs, fmt.Errorf("key groups [%d, %d) are not a range within [0, %d)", from, to, windowing.MaxParallelism))
	}
	if fence < 1 {
		errs = append(errs, fmt.Errorf("fence %d must be at least 1", fence))
	}
	if len(errs) > 0 {
		return fmt.Errorf("sink: fence mark: %w", errors.Join(errs...))
	}
	return nil
}

// FenceMarkAhead returns the refusal of a raise of the marks of key groups
// [from, to) to fence under gen, given the marks held (by key group), or
// nil if no mark of the range is above fence.
func FenceMarkAhead(marks map[int]int64, gen int64, from, to int, fence int64) *FenceAheadError {
	for kg := from; kg < to; kg++ {
		if m, ok := marks[kg]; ok && m > fence {
			return &FenceAheadError{Gen: gen, KeyGroup: kg, Mark: m, Fence: fence}
		}
	}
	return nil
}
