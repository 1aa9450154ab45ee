package sink

import (
	"strings"
	"testing"
)

func TestValidateScope(t *testing.T) {
	for _, c := range []struct {
		scope string
		ok    bool
	}{
		{"", true},
		{"kg0-16", true},
		{"kg112-127", true},
		{"a", true},
		{"0", true},
		{"Range_1.v2", true},
		{strings.Repeat("k", MaxScopeLen), true},
		{strings.Repeat("k", MaxScopeLen+1), false},
		{"kg0#16", false},
		{"kg0/16", false},
		{"kg0:16", false},
		{"{kg0}", false},
		{"kg}", false},
		{"kg 0", false},
		{"kg\x00", false},
		{"kg*", false},
		{"é", false},
		{"-kg", false},
		{".kg", false},
		{"_kg", false},
	} {
		err := ValidateScope(c.scope)
		if (err == nil) != c.ok {
			t.Errorf("ValidateScope(%q) = %v, want ok %v", c.scope, err, c.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "sink: ") {
			t.Errorf("ValidateScope(%q) = %q, want a sink: error", c.scope, err)
		}
	}
}

func TestScopedIndexKey(t *testing.T) {
	k := Key{Entity: "ad_7", Bucket: "M2026-11-29T10:14Z"}
	ix := IndexKey(41, k)
	if got := IndexKeyIn("", 41, k); got != ix {
		t.Fatalf("IndexKeyIn(\"\", 41, k) = %q, want the unscoped %q", got, ix)
	}
	if got, want := IndexKeyIn("kg0-16", 41, k), "kg0-16/"+ix; got != want {
		t.Fatalf("IndexKeyIn(kg0-16, 41, k) = %q, want %q", got, want)
	}
	if got, want := ScopedIndexKey("kg0-16", "41#3"), "kg0-16/41#3"; got != want {
		t.Fatalf("ScopedIndexKey = %q, want %q", got, want)
	}
	for _, c := range []struct{ ix, scope, key string }{
		{"41#3", "", "41#3"},
		{"-2#0", "", "-2#0"},
		{"kg0-16/41#3", "kg0-16", "41#3"},
		{"7/41#3", "7", "41#3"},
	} {
		if s, k := SplitIndexKey(c.ix); s != c.scope || k != c.key {
			t.Errorf("SplitIndexKey(%q) = %q, %q; want %q, %q", c.ix, s, k, c.scope, c.key)
		}
	}
	// Keys of different scopes, or scoped and unscoped, never collide: every
	// scoped key holds a '/', no unscoped key does, and scopes hold none.
	seen := map[string]string{}
	for _, scope := range []string{"", "1", "kg0", "kg0-16", "kg0-1", "kg0-16.1"} {
		for _, e := range []int64{-1, 0, 1, 16, 41} {
			for n := range IndexShards {
				ix := ScopedIndexKey(scope, IndexKeyOf(e, n))
				who := scope + " " + IndexKeyOf(e, n)
				if prev, dup := seen[ix]; dup {
					t.Fatalf("%q is the key of both %s and %s", ix, prev, who)
				}
				seen[ix] = who
				if s, k := SplitIndexKey(ix); s != scope || k != IndexKeyOf(e, n) {
					t.Fatalf("SplitIndexKey(%q) = %q, %q; want %q, %q", ix, s, k, scope, IndexKeyOf(e, n))
				}
			}
		}
	}
}
