package embedded

import (
	"testing"

	"github.com/adclick/adclick/sink"
	"github.com/adclick/adclick/sink/sinktest"
)

func TestRowsConformance(t *testing.T) {
	sinktest.Rows(t, func(t *testing.T) sink.Rows { return openTemp(t, Options{}) })
}

func TestTotalsConformance(t *testing.T) {
	sinktest.Totals(t, func(t *testing.T) sink.Totals { return openTemp(t, Options{}) })
}

func TestScopedRowsConformance(t *testing.T) {
	sinktest.ScopedRows(t, func(t *testing.T) (sink.Rows, func(string) (sink.Rows, error)) {
		s := openTemp(t, Options{})
		return s, func(scope string) (sink.Rows, error) { return s.Scoped(scope) }
	})
}

func TestScopedTotalsConformance(t *testing.T) {
	sinktest.ScopedTotals(t, func(t *testing.T) (sink.Totals, func(string) (sink.Totals, error)) {
		s := openTemp(t, Options{})
		return s, func(scope string) (sink.Totals, error) { return s.Scoped(scope) }
	})
}
