package sinktest

import (
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMemFenceMarksConformance(t *testing.T) {
	defer goleak.VerifyNone(t)
	FenceMarks(t, func(t *testing.T) FenceMarker { return NewMemFenceMarks("rows") })
}

// brokenMarks breaks one rule of the fence marks, so that the suite can be
// shown to notice.
type brokenMarks struct {
	*MemFenceMarks
	raise func(m *MemFenceMarks, ctx context.Context, gen int64, from, to int, fence int64) error
}

func (b brokenMarks) RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error {
	return b.raise(b.MemFenceMarks, ctx, gen, from, to, fence)
}

// TestFenceMarksSuiteCatchesBrokenStores runs single subtests of the
// suite against wrong stores, each in a sub-testing.T whose failure is
// expected.
func TestFenceMarksSuiteCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		name  string
		raise func(m *MemFenceMarks, ctx context.Context, gen int64, from, to int, fence int64) error
		run   func(t *testing.T, s FenceMarker)
	}{
		{
			name: "refuses nothing",
			raise: func(m *MemFenceMarks, _ context.Context, gen int64, from, to int, fence int64) error {
				m.mu.Lock()
				defer m.mu.Unlock()
				if m.marks[gen] == nil {
					m.marks[gen] = map[int]int64{}
				}
				for kg := from; kg < to; kg++ {
					m.marks[gen][kg] = fence
				}
				return nil
			},
			run: testMarkRaise,
		},
		{
			name: "one mark for every generation",
			raise: func(m *MemFenceMarks, ctx context.Context, _ int64, from, to int, fence int64) error {
				return m.RaiseFenceMark(ctx, 1, from, to, fence)
			},
			run: testMarkGenerations,
		},
		{
			name: "takes a fence of 0",
			raise: func(m *MemFenceMarks, ctx context.Context, gen int64, from, to int, fence int64) error {
				if fence == 0 {
					return nil
				}
				return m.RaiseFenceMark(ctx, gen, from, to, fence)
			},
			run: testMarkInvalid,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !suiteFails(func(inner *testing.T) {
				c.run(inner, brokenMarks{MemFenceMarks: NewMemFenceMarks("rows"), raise: c.raise})
			}) {
				t.Fatalf("the suite passed a store that %s; want a failure", c.name)
			}
		})
	}
}
