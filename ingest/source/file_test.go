package source

import (
	"fmt"
	"testing"
)

// TestPositionsFormat: positions are 20 zero-padded digits, sort as their
// numbers do, and stay intact when the chunk they were cut from fills up.
func TestPositionsFormat(t *testing.T) {
	var p positions
	var got []string
	for i := int64(0); i < 10_000; i++ {
		got = append(got, p.format(i*97))
	}
	for i, s := range got {
		if want := fmt.Sprintf("%020d", int64(i)*97); s != want {
			t.Fatalf("position %d = %q, want %q", i, s, want)
		}
		if i > 0 && got[i-1] >= s {
			t.Fatalf("%q does not sort before %q", got[i-1], s)
		}
	}
	if s := p.format(1<<63 - 1); s != "09223372036854775807" {
		t.Fatalf("largest position = %q", s)
	}
}
