package ckpt

import "testing"

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		k           Kind
		id          int64
		name, str   string
		validErrNil bool
	}{
		{Checkpoint, 42, "ckpt-000000000042", "checkpoint", true},
		{Savepoint, 7, "sp-000000000007", "savepoint", true},
		{Checkpoint, 123456789012, "ckpt-123456789012", "checkpoint", true},
		{Kind(0), 1, "", "kind(0)", false},
		{Kind(9), 1, "", "kind(9)", false},
	} {
		if got := tc.k.String(); got != tc.str {
			t.Errorf("Kind(%d).String() = %q, want %q", tc.k, got, tc.str)
		}
		if err := tc.k.Valid(); (err == nil) != tc.validErrNil {
			t.Errorf("Kind(%d).Valid() = %v", tc.k, err)
		}
		if tc.validErrNil {
			if got := tc.k.Name(tc.id); got != tc.name {
				t.Errorf("%v.Name(%d) = %q, want %q", tc.k, tc.id, got, tc.name)
			}
		}
	}
}
