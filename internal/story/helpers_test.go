package story

import (
	"cmp"
	"slices"

	"github.com/adclick/adclick/latepath"
)

func sortRows(rows []RowOut) {
	slices.SortFunc(rows, func(a, b RowOut) int {
		return cmp.Or(boolCmp(a.Hour, b.Hour), cmp.Compare(a.Ad, b.Ad), cmp.Compare(a.StartMs, b.StartMs))
	})
}

// newLateFrom decodes one key group of late state.
func newLateFrom(s *Story, d []byte) []RowOut {
	l := latepath.New(s.Options().HorizonMs)
	if err := l.Restore(d); err != nil {
		return nil
	}
	var out []RowOut
	l.Each(func(t latepath.Total) {
		out = append(out, RowOut{Ad: t.Ad, StartMs: t.HourMs, Hour: true, Late: true, Valid: t.Valid})
	})
	sortRows(out)
	return out
}

func sortKeys[T any](v []T, less func(a, b T) bool) {
	slices.SortFunc(v, func(a, b T) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
}
