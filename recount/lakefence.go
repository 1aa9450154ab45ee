package recount

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fenced lake names (docs/scale-out.md §6.5.6).
//
// A range pipeline held under a lease tenure with fence f > 0 (a fleet's
// range claim) names its objects part-<scope>-f<f>-<part>[-cK]-e<epoch>
// (part-f<f>-… for the range of every key group, whose scope is ""), so
// two tenures of one range never write the same key, though a restored
// tenure's first epoch is the restored checkpoint id, the very epoch its
// predecessor was writing. A paused old holder's late PUT lands under its
// own name and replaces nothing of the new holder's.
//
// Which fence's objects the recount reads for an epoch: before it writes
// anything, a tenure records the checkpoint it restored, r, in
// _fences/<scope>/f<f>-e<r> (OpenFence). Epoch e of a scope belongs to the
// highest fence whose record has r ≤ e, or to fence 0 (objects named
// without a fence) when there is none, and the readers (ReadHour, Run) read
// only that fence's objects of each epoch. This is exact because a tenure
// restores the checkpoint committed in the lease item when it took the
// range, and commits are conditional on owner and fence: tenure f owns
// epochs [r_f, r_next), which the next tenure's restored checkpoint r_next
// committed (its epochs ≥ r_next are the ones the next tenure removes and
// writes again). Committed checkpoints never go down, so r rises with the
// fence: a record written late by an old holder (r_old ≤ r_new, f_old <
// f_new) can never claim an epoch from a newer tenure, and needs no fence
// of its own. An old holder's object at an epoch ≥ the next tenure's r is
// never read, whenever it lands; the fence sweep (§6.5.4) deletes it.
//
// Objects named without a fence (a single process, a pipeline without a
// fenced lease, and every lake written before fences were named) are fence
// 0: with no record in their scope, every one of them is read, as before.
// Records are never removed: one small object per take.

const fenceRoot = "_fences/"

// fenceDir returns the folder of scope's fence records.
func fenceDir(scope string) string {
	if scope == "" {
		return fenceRoot
	}
	return fenceRoot + scope + "/"
}

// fenceKey returns the key of the record of fence f of scope, which
// restored checkpoint from.
func fenceKey(scope string, f, from int64) string {
	return fenceDir(scope) + "f" + epochString(f) + "-e" + epochString(from)
}

// OpenFence records that the tenure with fence f (> 0) of scope's writers
// restored checkpoint from and writes epochs ≥ from from now on. The
// runtime calls it after a restore's RemoveEpochsIn and before any object
// of the tenure is written. It is idempotent.
func OpenFence(ctx context.Context, store Store, scope string, f, from int64) error {
	if f <= 0 || from < 0 {
		return fmt.Errorf("recount: open fence %d from epoch %d: want a fence > 0 and an epoch ≥ 0", f, from)
	}
	body := "fence " + strconv.FormatInt(f, 10) + " restored checkpoint " + strconv.FormatInt(from, 10) + "\n"
	if err := store.Put(ctx, fenceKey(scope, f, from), []byte(body)); err != nil {
		return fmt.Errorf("recount: open fence %d of scope %q: %w", f, scope, err)
	}
	return nil
}

// fenceRec is one fence record: the tenure f restored checkpoint from.
type fenceRec struct{ fence, from int64 }

// fences is what the readers know of each scope's tenures.
type fences struct {
	store  Store
	scopes map[string][]fenceRec // by scope, ascending fence
}

func newFences(store Store) *fences { return &fences{store: store, scopes: map[string][]fenceRec{}} }

// of returns scope's records, listing them once.
func (fs *fences) of(ctx context.Context, scope string) ([]fenceRec, error) {
	if recs, ok := fs.scopes[scope]; ok {
		return recs, nil
	}
	dir := fenceDir(scope)
	var recs []fenceRec
	err := fs.store.List(ctx, dir+"f", "", func(key string) error {
		f, from, ok := parseFenceKey(strings.TrimPrefix(key, dir))
		if ok {
			recs = append(recs, fenceRec{f, from})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recount: list the fences of scope %q: %w", scope, err)
	}
	// Ascending fence; a fence recorded twice keeps its lowest epoch.
	slices.SortFunc(recs, func(a, b fenceRec) int { return cmp.Or(cmp.Compare(a.fence, b.fence), cmp.Compare(a.from, b.from)) })
	recs = slices.CompactFunc(recs, func(a, b fenceRec) bool { return a.fence == b.fence })
	fs.scopes[scope] = recs
	return recs, nil
}

// owner returns the fence whose objects hold epoch e: the highest fence
// recorded from an epoch ≤ e, or 0.
func owner(recs []fenceRec, e int64) int64 {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].from <= e {
			return recs[i].fence
		}
	}
	return 0
}

// parseFenceKey parses "f<fence>-e<from>".
func parseFenceKey(name string) (f, from int64, ok bool) {
	a, b, ok := strings.Cut(strings.TrimPrefix(name, "f"), "-e")
	if !ok || !strings.HasPrefix(name, "f") {
		return 0, 0, false
	}
	f, err1 := strconv.ParseInt(a, 10, 64)
	from, err2 := strconv.ParseInt(b, 10, 64)
	return f, from, err1 == nil && err2 == nil && f > 0 && from >= 0
}

// objectName is what an object's name says of its writer.
type objectName struct {
	scope string
	fence int64
	epoch int64
}

// parseObjectName parses the last segment of an object key,
// part-[<scope>-][f<fence>-]<part>[-c<k>]-e<epoch>.parquet, where a scope
// is kg<from>-<to>. ok is false for a name the writers did not make.
func parseObjectName(key string) (objectName, bool) {
	name := key[strings.LastIndexByte(key, '/')+1:]
	rest, ok := strings.CutPrefix(name, "part-")
	if !ok {
		return objectName{}, false
	}
	if rest, ok = strings.CutSuffix(rest, ".parquet"); !ok {
		return objectName{}, false
	}
	i := strings.LastIndex(rest, "-e")
	if i < 0 {
		return objectName{}, false
	}
	e, ok := digits(rest[i+2:])
	if !ok {
		return objectName{}, false
	}
	var on objectName
	on.epoch = e
	rest = rest[:i]
	if sc, n := scopePrefix(rest); n > 0 {
		on.scope, rest = sc, rest[n:]
	}
	if f, n := fencePrefix(rest); n > 0 {
		on.fence = f
	}
	return on, true
}

// scopePrefix returns the scope "kg<from>-<to>" that s begins with,
// followed by '-', and the length of both (0 if s begins with none).
func scopePrefix(s string) (string, int) {
	if !strings.HasPrefix(s, "kg") {
		return "", 0
	}
	a := leadingDigits(s[2:])
	if a == 0 || len(s) <= 2+a || s[2+a] != '-' {
		return "", 0
	}
	b := leadingDigits(s[3+a:])
	n := 3 + a + b
	if b == 0 || len(s) <= n || s[n] != '-' {
		return "", 0
	}
	return s[:n], n + 1
}

// fencePrefix returns the fence of "f<fence>-…" and the length of
// "f<fence>-" (0 if s does not begin so).
func fencePrefix(s string) (int64, int) {
	if !strings.HasPrefix(s, "f") {
		return 0, 0
	}
	d := leadingDigits(s[1:])
	if d == 0 || len(s) <= 1+d || s[1+d] != '-' {
		return 0, 0
	}
	f, ok := digits(s[1 : 1+d])
	if !ok || f == 0 {
		return 0, 0
	}
	return f, d + 2
}

func leadingDigits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// digits parses s, all decimal digits.
func digits(s string) (int64, bool) {
	if s == "" || leadingDigits(s) != len(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// ambiguousPart reports whether part would read as a scope or a fence in
// an object name.
func ambiguousPart(part string) bool {
	if _, n := scopePrefix(part + "-"); n > 0 {
		return true
	}
	_, n := fencePrefix(part + "-")
	return n > 0
}

// hourKeys returns the keys of the objects the readers read of the hour
// starting at hourMs, in key order: for each object the writers named, only
// if its fence holds its epoch (see above); any other .parquet object too.
func hourKeys(ctx context.Context, store Store, fs *fences, hourMs int64) ([]string, error) {
	var keys []string
	err := store.List(ctx, HourPrefix(hourMs), "", func(key string) error {
		if strings.HasSuffix(key, ".parquet") {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recount: read hour %s: %w", FormatHour(hourMs), err)
	}
	out := keys[:0]
	for _, k := range keys {
		on, ok := parseObjectName(k)
		if ok {
			recs, err := fs.of(ctx, on.scope)
			if err != nil {
				return nil, err
			}
			if owner(recs, on.epoch) != on.fence {
				continue // a tenure's object at an epoch a later tenure holds
			}
		}
		out = append(out, k)
	}
	return out, nil
}
