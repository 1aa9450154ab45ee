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
