package state

import (
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"pgregory.net/rapid"
)

// base is a minute boundary (2023-11-14T22:13Z): expiries below are offsets
// from it.
const base = int64(1_699_999_980_000)

// TestDedupIdentityIsAdAndClickID: two copies of one click id with the
// same ad are one click, whatever expiry each carries (impressions 1 ms
// apart across a minute boundary, an hour apart, the later copy with the
// earlier impression or the later one), and a copy with another ad is
// another click, whether the first copy is pending, committed, in a
// restored checkpoint, or loaded by a fresh Dedup on the same DB.
func TestDedupIdentityIsAdAndClickID(t *testing.T) {
	const m = BucketMs
	type copies struct {
		name       string
		first, dup int64 // expiries of the two copies
	}
	cases := []copies{
		{"same expiry", base + 5*m, base + 5*m},
		{"1 ms later across a minute boundary", base + m - 1, base + m},
		{"1 ms earlier across a minute boundary", base + m, base + m - 1},
		{"an hour later", base, base + hourMs},
		{"an hour earlier", base + hourMs, base},
		{"17 minutes later", base + 3*m, base + 20*m},
		{"2 hours earlier", base + 2*hourMs, base},
		{"around zero", -1, 0},
		{"negative, an hour apart", -hourMs, -1},
	}
	type where struct {
		name string
		// between runs between the two copies and returns the Dedup the
		// second copy is inserted through.
		between func(t *testing.T, db *DB, d *Dedup) *Dedup
	}
	modes := []where{
		{"pending", func(t *testing.T, db *DB, d *Dedup) *Dedup { return d }},
		{"committed", func(t *testing.T, db *DB, d *Dedup) *Dedup {
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"fresh dedup", func(t *testing.T, db *DB, d *Dedup) *Dedup {
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
			return db.NewDedup()
		}},
		{"restored checkpoint", func(t *testing.T, db *DB, d *Dedup) *Dedup {
			if err := d.Commit(); err != nil {
				t.Fatal(err)
			}
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			if err := db.Checkpoint(ckpt); err != nil {
				t.Fatal(err)
			}
			r, err := OpenFromCheckpoint(ckpt, filepath.Join(t.TempDir(), "restored"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			return r.NewDedup()
		}},
	}
	for _, tc := range cases {
		for _, mode := range modes {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				db, _ := openTemp(t, Options{})
				d := db.NewDedup()
				mustInsert(t, d, 7, "click", tc.first, true)
				mustInsert(t, d, 7, "other", tc.dup, true)
				d = mode.between(t, db, d)
				mustInsert(t, d, 7, "click", tc.dup, false)
				mustInsert(t, d, 7, "click", tc.first, false)
				mustInsert(t, d, 7, "click", tc.dup+3*hourMs, false) // a third copy, later still
				mustInsert(t, d, 7, "other", tc.first, false)
				mustInsert(t, d, 8, "click", tc.dup, true)           // another key group is another click
				mustInsertAd(t, d, 7, "ad_2", "click", tc.dup, true) // so is another ad
				mustInsertAd(t, d, 7, "ad_2", "click", tc.first, false)
				mustInsert(t, d, 7, "new", tc.dup, true)
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
				d2 := db.NewDedup()
				if d.db != db { // restored: look in the restored DB
					d2 = d.db.NewDedup()
				}
				mustInsert(t, d2, 7, "click", tc.first-hourMs, false)
				mustInsert(t, d2, 7, "click", tc.dup, false)
				mustInsertAd(t, d2, 7, "ad_2", "click", tc.first, false)
				mustInsertAd(t, d2, 7, "ad_3", "click", tc.first, true)
			})
		}
	}
}

// TestDedupExpireKeepsLatestExpiry: an id whose later copy carries a later
// expiry E2 than the first copy's E1 is remembered until the watermark
// passes E2 (at whole-bucket granularity), not only until E1; then it is
// forgotten.
func TestDedupExpireKeepsLatestExpiry(t *testing.T) {
	const m = BucketMs
	bucketEnd := func(ms int64) int64 { return (bucketOf(ms) + 1) * m }
	for _, tc := range []struct {
		name   string
		e1, e2 int64
		commit bool // commit between the copies
	}{
		{"next minute, pending", base + m - 1, base + m, false},
		{"next minute, committed", base + m - 1, base + m, true},
		{"an hour later, pending", base + 10*m, base + 10*m + hourMs, false},
		{"an hour later, committed", base + 10*m, base + 10*m + hourMs, true},
		{"20 minutes later, committed", base + 30_000, base + 20*m + 30_000, true},
		{"negative to positive, committed", -5 * m, 5 * m, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucketStart2 := bucketOf(tc.e2) * m
			befores := []int64{tc.e1 + 1, bucketEnd(tc.e1), bucketStart2, tc.e2}
			db, _ := openTemp(t, Options{})
			d := db.NewDedup()
			mustInsert(t, d, 3, "click", tc.e1, true)
			if tc.commit {
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			mustInsert(t, d, 3, "click", tc.e2, false)
			mustInsert(t, d, 3, "short", tc.e1, true) // expires with E1
			for _, before := range befores {
				if before <= tc.e1 {
					continue
				}
				if err := d.Expire(0, KeyGroups, before); err != nil {
					t.Fatal(err)
				}
				if !present(t, db, 3, "click", tc.e1) {
					t.Fatalf("after Expire(%d) (E1 %d, E2 %d): click forgotten, want still present", before, tc.e1, tc.e2)
				}
				mustInsert(t, d, 3, "click", tc.e1, false)
			}
			if !present(t, db, 3, "click", tc.e1) || present(t, db, 3, "short", tc.e1) {
				t.Fatalf("before E2's bucket ends: click present=%v short present=%v, want true, false",
					present(t, db, 3, "click", tc.e1), present(t, db, 3, "short", tc.e1))
			}
			if err := d.Expire(0, KeyGroups, bucketEnd(tc.e2)); err != nil {
				t.Fatal(err)
			}
			if present(t, db, 3, "click", tc.e1) {
				t.Fatalf("after Expire(%d), the end of E2's bucket: click still present, want forgotten", bucketEnd(tc.e2))
			}
			mustInsert(t, d, 3, "click", tc.e2, true)
		})
	}
}

// refEntry is the reference model's knowledge of one (key group, ad, id),
// or of one legacy (key group, id).
type refEntry struct {
	maxExp int64 // the latest expiry of any copy since it was (re)inserted
	// must: no Expire since has had beforeMs > maxExp, so the id must be a
	// duplicate. Otherwise the Dedup may still hold it (until its bucket of
	// maxExp is expired) or not.
	must bool
}

// refKey is a click in the reference model: ad is "" for a legacy entry.
type refKey struct {
	kg     int
	ad, id string
}

// fataler is what testing.TB and rapid.T have in common that the helpers
// use.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// writeLegacy writes the dedup entry of id in key group kg with expiry exp
// as the previous version did: 'd', the key group, the bucket (the minute
// of the expiry, big-endian with the sign bit flipped), the id. It writes
// the bytes itself, not through the code that reads them.
func writeLegacy(t fataler, db *DB, kg int, id string, exp int64) {
	t.Helper()
	bucket := exp / 60_000
	if exp%60_000 < 0 {
		bucket--
	}
	k := []byte{'d', byte(kg)}
	k = binary.BigEndian.AppendUint64(k, uint64(bucket)^(1<<63))
	k = append(k, id...)
	if err := db.db.Set(k, nil, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

// TestDedupMatchesReference runs random sequences of Insert, Expire, Commit,
// Discard, fresh Dedups and checkpoint restores against a naive model (a map
// from (key group, ad, id) to its latest expiry, and one from (key group,
// id) for legacy entries, written as the previous version did before the
// run). A click the model holds, or whose id a legacy entry holds, and no
// Expire has passed must be a duplicate; one whose latest expiry's bucket
// has been expired, or never inserted, and no legacy entry of its id, must
// be new; in between (expired, but its bucket not yet) either answer is
// allowed and the model follows the Dedup's.
func TestDedupMatchesReference(t *testing.T) {
	const m = BucketMs
	root := t.TempDir()
	run := 0
	// Few ids, ads and expiries over a quarter of an hour (crossing a
	// filter partition boundary from each origin), so that copies, moves
	// and expiries meet often. With a separator byte and no length, the ad
	// "a\x00b" with the id "c" would be the ad "a" with the id "b\x00c".
	kgs := []int{0, KeyGroups - 1}
	ads := []string{"a", "a\x00b", "ad_7"}
	ids := []string{"b\x00c", "c", "d", "e"}
	rapid.Check(t, func(rt *rapid.T) {
		run++
		dir := filepath.Join(root, fmt.Sprint(run))
		// Large batches never commit by themselves, so Discard has a known
		// effect; small ones commit inside Insert.
		autoCommits := rapid.IntRange(0, 3).Draw(rt, "batches") == 0
		o := Options{DedupBatchBytes: 1 << 30, MemTableSize: 1 << 20, CacheSize: 1 << 20}
		if autoCommits {
			o.DedupBatchBytes = 64
		}
		db, err := Open(filepath.Join(dir, "work"), o)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		origin := rapid.SampledFrom([]int64{base, 0, -37 * m}).Draw(rt, "origin")
		expiry := rapid.OneOf(
			rapid.Int64Range(-2*m, 15*m),
			rapid.Custom(func(rt *rapid.T) int64 { // a minute boundary or 1 ms before
				return rapid.Int64Range(-2, 15).Draw(rt, "minute")*m - rapid.Int64Range(0, 1).Draw(rt, "back")
			}),
		)
		// Half of the runs start from a DB the previous version wrote.
		legacy := map[refKey]refEntry{}
		if rapid.Bool().Draw(rt, "legacy") {
			for _, kg := range kgs {
				for _, id := range ids {
					if rapid.Bool().Draw(rt, "legacy id") {
						exp := origin + expiry.Draw(rt, "legacy expiry")
						writeLegacy(rt, db, kg, id, exp)
						legacy[refKey{kg, "", id}] = refEntry{maxExp: exp, must: true}
					}
				}
			}
		}
		// A tiny budget folds every filter to its smallest: the Dedup must
		// stay exact on lookups alone.
		budget := rapid.SampledFrom([]int{0, 0, 1, 4 << 10}).Draw(rt, "budget")
		// Expired keys deleted at every Expire, or left in the DB for a few
		// buckets or for longer than the run: readers must not tell.
		perKeyGroup := rapid.SampledFrom([]int64{0, physicalPerKeyGroup}).Draw(rt, "per key group")
		lag := rapid.SampledFrom([]int64{1, 3, physicalLagBuckets}).Draw(rt, "lag")
		newDedup := func() *Dedup {
			d := db.NewDedup()
			d.SetFilterBudget(budget)
			d.perKeyGroup, d.lag = perKeyGroup, lag
			return d
		}
		d := newDedup()
		model := map[refKey]refEntry{}
		committed := maps.Clone(model) // the model as of the last commit
		var ckpt string                // the last checkpoint, if any
		var ckptModel, ckptLegacy map[refKey]refEntry
		commit := func() {
			if err := d.Commit(); err != nil {
				rt.Fatal(err)
			}
			committed = maps.Clone(model)
		}
		expire := func(model map[refKey]refEntry, from, to int, before int64) {
			for key, e := range model {
				if key.kg < from || key.kg >= to {
					continue
				}
				if bucketOf(e.maxExp) < bucketOf(before) {
					delete(model, key)
				} else if e.maxExp < before {
					model[key] = refEntry{maxExp: e.maxExp}
				}
			}
		}
		n := rapid.IntRange(1, 80).Draw(rt, "ops")
		for op := range n {
			switch k := rapid.IntRange(0, 20).Draw(rt, "kind"); {
			case k < 10: // Insert
				key := refKey{rapid.SampledFrom(kgs).Draw(rt, "kg"), rapid.SampledFrom(ads).Draw(rt, "ad"), rapid.SampledFrom(ids).Draw(rt, "id")}
				exp := origin + expiry.Draw(rt, "expiry")
				got, err := d.Insert(key.kg, key.ad, key.id, exp)
				if err != nil {
					rt.Fatal(err)
				}
				e, held := model[key]
				l, legacyHeld := legacy[refKey{key.kg, "", key.id}]
				if got && (held && e.must || legacyHeld && l.must) {
					rt.Fatalf("op %d: Insert(%d, %q, %q, %d) = true, want false (held with latest expiry %d: %v; legacy entry with expiry %d: %v)",
						op, key.kg, key.ad, key.id, exp, e.maxExp, held, l.maxExp, legacyHeld)
				}
				if !held && !legacyHeld && !got {
					rt.Fatalf("op %d: Insert(%d, %q, %q, %d) = false, want true (never inserted, or its bucket expired, and no legacy entry)",
						op, key.kg, key.ad, key.id, exp)
				}
				switch {
				case got, !held: // new, or a duplicate of the legacy entry
					model[key] = refEntry{maxExp: exp, must: true}
				default:
					model[key] = refEntry{maxExp: max(e.maxExp, exp), must: true}
				}
				if autoCommits {
					// An Insert may have committed by itself: Discard is
					// not drawn then, so nothing reads this.
					committed = nil
				}
			case k < 14: // Expire
				from := rapid.IntRange(0, KeyGroups).Draw(rt, "from")
				to := rapid.IntRange(from, KeyGroups).Draw(rt, "to")
				before := origin + expiry.Draw(rt, "before") + rapid.Int64Range(0, 1).Draw(rt, "after")
				if err := d.Expire(from, to, before); err != nil {
					rt.Fatal(err)
				}
				expire(model, from, to, before)
				expire(legacy, from, to, before)
				committed = maps.Clone(model)
			case k == 14:
				commit()
			case k == 15 || k == 16: // a fresh Dedup on the same DB: filters rebuilt by load
				commit()
				d = newDedup()
			case k == 17: // Discard
				if autoCommits {
					continue
				}
				d.Discard()
				model = maps.Clone(committed)
			case k == 18: // Checkpoint
				commit()
				ckpt = filepath.Join(dir, fmt.Sprintf("ckpt-%d", op))
				if err := db.Checkpoint(ckpt); err != nil {
					rt.Fatal(err)
				}
				ckptModel, ckptLegacy = maps.Clone(model), maps.Clone(legacy)
			case k == 20: // Bulk: 270 fresh ids fill a filter, which is rebuilt larger
				kg := rapid.SampledFrom(kgs).Draw(rt, "kg")
				for i := range 270 {
					ad, id, exp := ads[i%len(ads)], fmt.Sprintf("bulk-%d-%d", op, i), origin+int64(i%17-2)*m+int64(i)
					if got, err := d.Insert(kg, ad, id, exp); err != nil || !got {
						rt.Fatalf("op %d: Insert(%d, %q, %q, %d) = %v, %v, want true, nil (a fresh id)", op, kg, ad, id, exp, got, err)
					}
				}
			default: // Restore the last checkpoint (a crash)
				if ckpt == "" {
					continue
				}
				if err := db.Close(); err != nil {
					rt.Fatal(err)
				}
				db, err = OpenFromCheckpoint(ckpt, filepath.Join(dir, fmt.Sprintf("work-%d", op)), o)
				if err != nil {
					rt.Fatal(err)
				}
				d = newDedup()
				model, legacy = maps.Clone(ckptModel), maps.Clone(ckptLegacy)
				committed = maps.Clone(model)
			}
		}
	})
}
