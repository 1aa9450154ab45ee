package sink

import "testing"

// Attrs gives each tagged writer its own attributes, and refuses any other
// writer instead of handing it fast_* (it used to map every writer but Late
// to Fast).
func TestAttrsOnlyTaggedWriters(t *testing.T) {
	var it Item
	for _, w := range TaggedWriters {
		it.Attrs(w).Valid = int64(w)
	}
	if it.Fast.Valid != int64(Fast) || it.Late.Valid != int64(Late) {
		t.Fatalf("Attrs wrote fast %d, late %d; want %d, %d", it.Fast.Valid, it.Late.Valid, Fast, Late)
	}
	for _, w := range []Writer{0, Final, Writer(9)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Attrs(%v) returned attributes; want a panic (not a tagged writer)", w)
				}
			}()
			it.Attrs(w)
		}()
	}
}
