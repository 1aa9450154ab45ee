package windowing

import (
	"fmt"
	"strconv"
	"strings"
)

// KeyGroups is a contiguous range of key groups [From, To): the part of the
// job a range pipeline owns when several workers share one stream
// (docs/scale-out.md §3.1). The zero value means every key group.
type KeyGroups struct {
	From, To int
}

// AllKeyGroups is the range of a job that owns everything.
var AllKeyGroups = KeyGroups{0, MaxParallelism}

// Norm returns r, with the zero value made AllKeyGroups.
func (r KeyGroups) Norm() KeyGroups {
	if r == (KeyGroups{}) {
		return AllKeyGroups
	}
	return r
}

// All reports whether r (normalised) covers every key group.
func (r KeyGroups) All() bool { return r.Norm() == AllKeyGroups }

// Valid reports whether r (normalised) is a non-empty range within
// 0..MaxParallelism.
func (r KeyGroups) Valid() bool {
	r = r.Norm()
	return r.From >= 0 && r.From < r.To && r.To <= MaxParallelism
}

// Contains reports whether key group kg lies in r (normalised).
func (r KeyGroups) Contains(kg int) bool {
	r = r.Norm()
	return r.From <= kg && kg < r.To
}

// Owns reports whether the ad id's key group lies in r.
func (r KeyGroups) Owns(ad string) bool { return r.All() || r.Contains(KeyGroup(ad)) }

// Len returns the number of key groups in r (normalised).
func (r KeyGroups) Len() int {
	r = r.Norm()
	return r.To - r.From
}

// String returns "kg<from>-<to>", the range's name in lease keys, scopes and
// prefixes.
func (r KeyGroups) String() string {
	r = r.Norm()
	return "kg" + strconv.Itoa(r.From) + "-" + strconv.Itoa(r.To)
}

// Scope returns the name under which the range's writes are kept apart from
// other ranges' (tag index, epoch sets, lake manifests): "" for every key
// group, so a job that owns everything keeps the single process's layout,
// else String().
func (r KeyGroups) Scope() string {
	if r.All() {
		return ""
	}
	return r.String()
}

// ParseKeyGroups parses "kg<from>-<to>" or "<from>-<to>".
func ParseKeyGroups(s string) (KeyGroups, error) {
	t := strings.TrimPrefix(s, "kg")
	a, b, ok := strings.Cut(t, "-")
	if !ok {
		return KeyGroups{}, fmt.Errorf("windowing: key-group range %q: want like kg0-16", s)
	}
	from, err1 := strconv.Atoi(a)
	to, err2 := strconv.Atoi(b)
	r := KeyGroups{from, to}
	if err1 != nil || err2 != nil || !r.Valid() || r == (KeyGroups{}) {
		return KeyGroups{}, fmt.Errorf("windowing: key-group range %q: want from < to within 0..%d", s, MaxParallelism)
	}
	return r, nil
}
