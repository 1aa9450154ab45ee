package sink

import (
	"errors"
	"testing"
)

// plainRows is a Rows that takes no fence token.
type plainRows struct{ Rows }

func TestFencedNeedsFencedRows(t *testing.T) {
	if _, err := Fenced(plainRows{}, Token{Gen: 1, Fence: 2}); !errors.Is(err, ErrNoFence) {
		t.Fatalf("Fenced of a store without tokens: err = %v, want ErrNoFence", err)
	}
	if err := ValidFence(-1); err == nil {
		t.Fatalf("ValidFence(-1) = nil")
	}
	if err := ValidFence(0); err != nil {
		t.Fatalf("ValidFence(0) = %v", err)
	}
}

func TestAppendJSONFence(t *testing.T) {
	it := Item{Key: Key{Entity: "a", Bucket: "b"}, JobGen: 7, HasJobGen: true}
	if got, want := string(it.AppendJSON(nil)), `{"entity":"a","bucket":"b","job_gen":7}`; got != want {
		t.Errorf("without a fence: %s, want %s", got, want)
	}
	it.Fence = 3
	if got, want := string(it.AppendJSON(nil)), `{"entity":"a","bucket":"b","job_gen":7,"wf":3}`; got != want {
		t.Errorf("with fence 3: %s, want %s", got, want)
	}
}
