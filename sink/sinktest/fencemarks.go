package sinktest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/windowing"
)

// MemFenceMarks is an in-memory store of fence marks (see
// sink.FenceAheadError), what sink/dynamo keeps in the rows table, for
// tests of workers without DynamoDB. It is safe for concurrent use; each
// call is atomic.
type MemFenceMarks struct {
	table string
	mu    sync.Mutex
	marks map[int64]map[int]int64 // by generation, by key group
}

// NewMemFenceMarks returns an empty store named table (Table).
func NewMemFenceMarks(table string) *MemFenceMarks {
	return &MemFenceMarks{table: table, marks: map[int64]map[int]int64{}}
}

// Table returns the name given to NewMemFenceMarks.
func (m *MemFenceMarks) Table() string { return m.table }

// RaiseFenceMark raises the marks of key groups [from, to) under gen to
// fence, or refuses with a *sink.FenceAheadError if one of them is above
// fence, as sink/dynamo's Store.RaiseFenceMark does.
func (m *MemFenceMarks) RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error {
	if err := sink.ValidFenceMark(gen, from, to, fence); err != nil {
		return fmt.Errorf("sinktest: raise fence mark: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sinktest: raise fence mark: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.marks[gen]
	if ahead := sink.FenceMarkAhead(g, gen, from, to, fence); ahead != nil {
		return fmt.Errorf("sinktest: raise fence mark in %s: %w", m.table, ahead)
	}
	if g == nil {
		g = map[int]int64{}
		m.marks[gen] = g
	}
	for kg := from; kg < to; kg++ {
		g[kg] = fence
	}
	return nil
}

// FenceMarks returns a copy of gen's marks by key group.
func (m *MemFenceMarks) FenceMarks(ctx context.Context, gen int64) (map[int]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sinktest: read fence marks: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := maps.Clone(m.marks[gen])
	if out == nil {
		out = map[int]int64{}
	}
	return out, nil
}

// FenceMarker is what the FenceMarks suite tests.
type FenceMarker interface {
	RaiseFenceMark(ctx context.Context, gen int64, from, to int, fence int64) error
	FenceMarks(ctx context.Context, gen int64) (map[int]int64, error)
}

// FenceMarks runs the conformance suite of fence marks against stores that
// open returns, empty, one per subtest.
func FenceMarks(t *testing.T, open func(t *testing.T) FenceMarker) {
	t.Run("raise", func(t *testing.T) { testMarkRaise(t, open(t)) })
	t.Run("generations", func(t *testing.T) { testMarkGenerations(t, open(t)) })
	t.Run("invalid", func(t *testing.T) { testMarkInvalid(t, open(t)) })
	t.Run("concurrent", func(t *testing.T) { testMarkConcurrent(t, open(t)) })
}

// marksOf returns want as a map: fence f for key groups [from, to) of
// each {from, to, f}.
func marksOf(spans ...[3]int64) map[int]int64 {
	out := map[int]int64{}
	for _, s := range spans {
		for kg := s[0]; kg < s[1]; kg++ {
			out[int(kg)] = s[2]
		}
	}
	return out
}

func wantMarks(t *testing.T, s FenceMarker, gen int64, want map[int]int64) {
	t.Helper()
	got, err := s.FenceMarks(context.Background(), gen)
	if err != nil {
		t.Fatalf("FenceMarks(%d): %v", gen, err)
	}
	if maps.Equal(got, want) {
		return
	}
	var diff []string
	for kg := range windowing.MaxParallelism {
		g, gok := got[kg]
		w, wok := want[kg]
		switch {
		case gok == wok && g == w:
		case !gok:
			diff = append(diff, fmt.Sprintf("key group %d: none, want %d", kg, w))
		case !wok:
			diff = append(diff, fmt.Sprintf("key group %d: %d, want none", kg, g))
		default:
			diff = append(diff, fmt.Sprintf("key group %d: %d, want %d", kg, g, w))
		}
	}
	for kg, g := range got {
		if kg < 0 || kg >= windowing.MaxParallelism {
			diff = append(diff, fmt.Sprintf("key group %d: %d, want none", kg, g))
		}
	}
	t.Fatalf("FenceMarks(%d): %s", gen, strings.Join(diff, "; "))
}

func testMarkRaise(t *testing.T, s FenceMarker) {
	ctx := context.Background()
	wantMarks(t, s, 1, map[int]int64{})
	// Each step raises [from, to) to fence under generation 1; ahead is
	// the refusal it must meet (nil: it passes), marks what every key
	// group holds after it.
	steps := []struct {
		name     string
		from, to int
		fence    int64
		ahead    *sink.FenceAheadError
		marks    map[int]int64
	}{
		{name: "first take", from: 0, to: 16, fence: 3, marks: marksOf([3]int64{0, 16, 3})},
		{name: "the same fence again", from: 0, to: 16, fence: 3, marks: marksOf([3]int64{0, 16, 3})},
		{name: "lower fence, overlapping", from: 8, to: 24, fence: 2,
			ahead: &sink.FenceAheadError{Gen: 1, KeyGroup: 8, Mark: 3, Fence: 2}, marks: marksOf([3]int64{0, 16, 3})},
		{name: "lower fence, inside", from: 4, to: 5, fence: 1,
			ahead: &sink.FenceAheadError{Gen: 1, KeyGroup: 4, Mark: 3, Fence: 1}, marks: marksOf([3]int64{0, 16, 3})},
		{name: "lower fence, disjoint", from: 16, to: 32, fence: 2, marks: marksOf([3]int64{0, 16, 3}, [3]int64{16, 32, 2})},
		{name: "higher fence over part of two", from: 12, to: 20, fence: 7,
			marks: marksOf([3]int64{0, 12, 3}, [3]int64{12, 20, 7}, [3]int64{20, 32, 2})},
		{name: "the refusal names the lowest key group ahead", from: 0, to: 128, fence: 5,
			ahead: &sink.FenceAheadError{Gen: 1, KeyGroup: 12, Mark: 7, Fence: 5},
			marks: marksOf([3]int64{0, 12, 3}, [3]int64{12, 20, 7}, [3]int64{20, 32, 2})},
		{name: "everything above every mark", from: 0, to: 128, fence: 8, marks: marksOf([3]int64{0, 128, 8})},
	}
	for _, st := range steps {
		err := s.RaiseFenceMark(ctx, 1, st.from, st.to, st.fence)
		var ahead *sink.FenceAheadError
		switch {
		case st.ahead == nil && err != nil:
			t.Fatalf("%s: RaiseFenceMark(1, %d, %d, %d) = %v, want nil", st.name, st.from, st.to, st.fence, err)
		case st.ahead != nil && !errors.As(err, &ahead):
			t.Fatalf("%s: RaiseFenceMark(1, %d, %d, %d) = %v, want a *sink.FenceAheadError", st.name, st.from, st.to, st.fence, err)
		case st.ahead != nil && *ahead != *st.ahead:
			t.Fatalf("%s: refusal %+v, want %+v", st.name, *ahead, *st.ahead)
		}
		wantMarks(t, s, 1, st.marks)
	}
}

func testMarkGenerations(t *testing.T, s FenceMarker) {
	ctx := context.Background()
	if err := s.RaiseFenceMark(ctx, 1, 0, 64, 9); err != nil {
		t.Fatal(err)
	}
	// Another generation's fences start again: they are never compared
	// with generation 1's.
	if err := s.RaiseFenceMark(ctx, 2, 0, 128, 1); err != nil {
		t.Fatalf("RaiseFenceMark(2, 0, 128, 1) over generation 1's marks = %v, want nil", err)
	}
	wantMarks(t, s, 1, marksOf([3]int64{0, 64, 9}))
	wantMarks(t, s, 2, marksOf([3]int64{0, 128, 1}))
	wantMarks(t, s, 3, map[int]int64{})
}

func testMarkInvalid(t *testing.T, s FenceMarker) {
	for _, c := range []struct {
		name     string
		gen      int64
		from, to int
		fence    int64
	}{
		{"negative generation", -1, 0, 16, 1},
		{"negative from", 1, -1, 16, 1},
		{"empty range", 1, 16, 16, 1},
		{"reversed range", 1, 16, 8, 1},
		{"past the last key group", 1, 120, 129, 1},
		{"fence 0", 1, 0, 16, 0},
		{"negative fence", 1, 0, 16, -2},
	} {
		err := s.RaiseFenceMark(context.Background(), c.gen, c.from, c.to, c.fence)
		var ahead *sink.FenceAheadError
		if err == nil || errors.As(err, &ahead) {
			t.Errorf("%s: RaiseFenceMark(%d, %d, %d, %d) = %v, want an argument error", c.name, c.gen, c.from, c.to, c.fence, err)
		}
	}
	wantMarks(t, s, 1, map[int]int64{})
}

// testMarkConcurrent raises the marks from many goroutines at once: ranges
// of their own at fences 10 to 25 and the whole key space at fences 4 to
// 32, so that a raise may be refused by a higher one that came first. At
// the end each key group holds the highest fence of the raises that
// passed over it, every refusal names a mark of its range above its
// fence, and the highest raise, above every other, passed.
func testMarkConcurrent(t *testing.T, s FenceMarker) {
	// Each round under a generation of its own: a lost raise shows only
	// when two raises interleave between read and write.
	for gen := int64(1); gen <= 5; gen++ {
		testMarkConcurrentRound(t, s, gen)
	}
}

func testMarkConcurrentRound(t *testing.T, s FenceMarker, gen int64) {
	ctx := context.Background()
	type raise struct {
		from, to int
		fence    int64
	}
	var raises []raise
	for i := range 16 {
		raises = append(raises, raise{i * 8, (i + 1) * 8, int64(10 + i)})
	}
	for f := int64(1); f <= 8; f++ {
		raises = append(raises, raise{0, 128, f * 4}) // 4 to 32
	}
	errs := make([]error, len(raises))
	var wg sync.WaitGroup
	for i, r := range raises {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.RaiseFenceMark(ctx, gen, r.from, r.to, r.fence)
		}()
	}
	wg.Wait()
	want := map[int]int64{}
	for i, r := range raises {
		var ahead *sink.FenceAheadError
		switch {
		case errs[i] == nil:
			for kg := r.from; kg < r.to; kg++ {
				want[kg] = max(want[kg], r.fence)
			}
		case !errors.As(errs[i], &ahead):
			t.Errorf("generation %d: raise %+v: %v, want nil or a *sink.FenceAheadError", gen, r, errs[i])
		case ahead.Gen != gen || ahead.Mark <= r.fence || ahead.KeyGroup < r.from || ahead.KeyGroup >= r.to:
			t.Errorf("generation %d: raise %+v refused by %+v: not a mark of its range above its fence", gen, r, *ahead)
		}
	}
	if err := errs[len(errs)-1]; err != nil {
		t.Errorf("generation %d: the highest raise was refused: %v", gen, err)
	}
	wantMarks(t, s, gen, want)
}
