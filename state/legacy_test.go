package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestDedupOneClickIDTwoAds: a click id sent with two ads is two clicks,
// one per ad, and a third copy with the first ad is a duplicate, whether
// the earlier copies are pending, committed, loaded by a fresh Dedup or in
// a restored checkpoint.
func TestDedupOneClickIDTwoAds(t *testing.T) {
	exp := base + 30*BucketMs
	for _, mode := range []string{"pending", "committed", "fresh dedup", "restored"} {
		t.Run(mode, func(t *testing.T) {
			db, _ := openTemp(t, Options{})
			d := db.NewDedup()
			next := func() {
				switch mode {
				case "pending":
					return
				case "restored":
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
					db = r
				}
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
				if mode != "committed" {
					d = db.NewDedup()
				}
			}
			mustInsertAd(t, d, 9, "ad_7", "c1", exp, true)
			next()
			mustInsertAd(t, d, 9, "ad_9", "c1", exp, true) // another ad: counted for it
			next()
			mustInsertAd(t, d, 9, "ad_7", "c1", exp, false) // the first ad again: a duplicate
			mustInsertAd(t, d, 9, "ad_9", "c1", exp+hourMs, false)
			mustInsertAd(t, d, 9, "ad_1", "c1", exp, true) // a third ad
			next()
			for _, ad := range []string{"ad_7", "ad_9", "ad_1"} {
				mustInsertAd(t, d, 9, ad, "c1", exp-hourMs, false)
			}
		})
	}
}

// TestDedupAdEncoding: ads and ids may hold any byte, 0x00 included, and
// no two (ad, id) share a key: ("a", "b\x00c") is not ("a\x00b", "c"), nor
// ("ab", "c") ("a", "bc"). The key is the layout the package documents.
func TestDedupAdEncoding(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	exp := base + 5*BucketMs
	pairs := [][2]string{{"a", "b\x00c"}, {"a\x00b", "c"}, {"a\x00", "b\x00c"}, {"ab", "c"}, {"a", "bc"}, {"", "abc"}, {"\x00", "\x00"}}
	for _, p := range pairs {
		mustInsertAd(t, d, 4, p[0], p[1], exp, true)
	}
	for _, p := range pairs {
		mustInsertAd(t, d, 4, p[0], p[1], exp, false)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d = db.NewDedup()
	for _, p := range pairs {
		mustInsertAd(t, d, 4, p[0], p[1], exp, false)
	}
	mustInsertAd(t, d, 4, "a", "b", exp, true)
	mustInsertAd(t, d, 4, "a\x00b\x00", "c", exp, true)

	// The key of ("ad_7", "c1") in key group 4, spelt out.
	d = db.NewDedup()
	mustInsertAd(t, d, 4, "ad_7", "c1", exp, true)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	want := []byte{'g', 4}
	want = binary.BigEndian.AppendUint64(want, uint64(bucketOfTest(exp))^(1<<63))
	want = append(append(want, 4), "ad_7c1"...)
	if keys := rawKeys(t, db, 'g'); !bytes.Contains(bytes.Join(keys, []byte("|")), want) {
		t.Fatalf("no key %q among %q", want, keys)
	}
}

// bucketOfTest is the minute of ms, computed apart from bucketOf.
func bucketOfTest(ms int64) int64 {
	if ms < 0 {
		return -((-ms + BucketMs - 1) / BucketMs)
	}
	return ms / BucketMs
}

// rawKeys returns the keys of the DB with prefix, read from Pebble directly.
func rawKeys(t *testing.T, db *DB, prefix byte) [][]byte {
	t.Helper()
	iter, err := db.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for valid := iter.SeekGE([]byte{prefix}); valid && iter.Key()[0] == prefix; valid = iter.Next() {
		out = append(out, bytes.Clone(iter.Key()))
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDedupLegacyEntries: entries the previous version wrote (by click id
// alone, written here byte by byte) still de-duplicate their id, whatever
// the ad, until the watermark passes their expiry; Expire removes them,
// in key groups the Dedup never inserted into too, and then their filters
// are gone, so an Insert tests nothing more than before the upgrade.
func TestDedupLegacyEntries(t *testing.T) {
	const m = BucketMs
	db, _ := openTemp(t, Options{})
	e1, e2 := base+10*m, base+10*m+hourMs // minute boundaries
	writeLegacy(t, db, 5, "old", e1)
	writeLegacy(t, db, 5, "old2", e2)
	writeLegacy(t, db, 6, "kg6", e1)
	writeLegacy(t, db, 9, "untouched", e1) // a key group no Insert uses
	d := db.NewDedup()
	mustInsertAd(t, d, 5, "ad_7", "old", e1, false) // the previous version counted it
	mustInsertAd(t, d, 5, "ad_9", "old", e1-hourMs, false)
	mustInsertAd(t, d, 6, "ad_7", "old", e1, true) // another key group: another id
	mustInsertAd(t, d, 5, "ad_7", "new", e1, true)
	// A copy with a later expiry than the legacy entry keeps (ad, id) until
	// then; the legacy entry stays as it was.
	mustInsertAd(t, d, 5, "ad_7", "old2", e2+20*m, false)
	mustInsertAd(t, d, 6, "ad_1", "kg6", e1, false)
	if st := d.Stats(); st.LegacyDuplicates != 4 || st.Duplicates != 4 {
		t.Fatalf("Stats() = %+v, want 4 duplicates, all legacy", st)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	legacyKey := func(kg int, id string, exp int64) []byte {
		k := []byte{'d', byte(kg)}
		k = binary.BigEndian.AppendUint64(k, uint64(bucketOfTest(exp))^(1<<63))
		return append(k, id...)
	}
	has := func(want []byte) bool {
		for _, k := range rawKeys(t, db, 'd') {
			if bytes.Equal(k, want) {
				return true
			}
		}
		return false
	}
	if !has(legacyKey(5, "old2", e2)) || len(rawKeys(t, db, 'd')) != 4 {
		t.Fatalf("legacy keys %q, want the four written, unchanged", rawKeys(t, db, 'd'))
	}

	// The watermark passes e1's minute: "old" is forgotten for every ad, in
	// the DB too; "old2" is not.
	if err := d.Expire(0, KeyGroups, e1+m); err != nil {
		t.Fatal(err)
	}
	if has(legacyKey(5, "old", e1)) || has(legacyKey(9, "untouched", e1)) || !has(legacyKey(5, "old2", e2)) {
		t.Fatalf("after Expire(e1 + 1 min): legacy keys %q, want only old2's", rawKeys(t, db, 'd'))
	}
	mustInsertAd(t, d, 5, "ad_9", "old", e1, true)
	mustInsertAd(t, d, 5, "ad_7", "old", e1+m, true)
	mustInsertAd(t, d, 5, "ad_1", "old2", e2, false)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if !presentAd(t, db, 5, "ad_3", "old2", e2) || presentAd(t, db, 5, "ad_3", "old", e1) {
		t.Fatalf("a fresh Dedup: old2 (legacy, live) new, or old (expired) a duplicate")
	}

	// Past e2's minute: every legacy entry is gone, from the DB and from
	// memory; the copy that carried a later expiry is still held for its ad.
	if err := d.Expire(0, KeyGroups, e2+m); err != nil {
		t.Fatal(err)
	}
	if keys := rawKeys(t, db, 'd'); len(keys) != 0 {
		t.Fatalf("after Expire(e2 + 1 min): legacy keys %q remain", keys)
	}
	for kg := range d.kgs {
		if n := len(d.kgs[kg].legacy.parts) + len(d.kgs[kg].legacy.probes); n != 0 {
			t.Fatalf("key group %d keeps %d legacy filters after every legacy entry expired", kg, n)
		}
	}
	mustInsertAd(t, d, 5, "ad_9", "old2", e2, true)
	mustInsertAd(t, d, 5, "ad_7", "old2", e2, false)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if !presentAd(t, db, 5, "ad_7", "old2", e2) || presentAd(t, db, 5, "ad_2", "old2", e2) {
		t.Fatalf("a fresh Dedup: (ad_7, old2) not held, or (ad_2, old2) held")
	}
}

// TestDedupLoadBothKinds: a restored checkpoint holding entries of both
// kinds (legacy ones by click id, new ones by ad and click id, many enough
// to fill several filter partitions) is loaded by fresh Dedups: every
// legacy id is a duplicate whatever its ad, every entry for its own ad
// only, and fresh ids rarely reach Pebble. Expire on the restored DB also
// removes both kinds in key groups no Insert has loaded.
func TestDedupLoadBothKinds(t *testing.T) {
	const m = BucketMs
	const n = 3000
	db, _ := openTemp(t, Options{})
	kg := func(i int) int { return i % 7 }
	exp := func(i int) int64 { return base + int64(i%100)*m }
	ad := func(i int) string { return fmt.Sprintf("ad_%d", i%13) }
	for i := range n {
		writeLegacy(t, db, kg(i), fmt.Sprintf("legacy-%d", i), exp(i))
	}
	d := db.NewDedup()
	for i := range n {
		mustInsertAd(t, d, kg(i), ad(i), fmt.Sprintf("new-%d", i), exp(i), true)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := db.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	// Batches that never commit by themselves: what rd does is discarded.
	r, err := OpenFromCheckpoint(ckpt, filepath.Join(t.TempDir(), "restored"), Options{DedupBatchBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rd := r.NewDedup()
	for i := range n {
		mustInsertAd(t, rd, kg(i), "any_ad", fmt.Sprintf("legacy-%d", i), exp(i), false)
		mustInsertAd(t, rd, kg(i), ad(i), fmt.Sprintf("new-%d", i), exp(i)+hourMs, false)
		mustInsertAd(t, rd, kg(i), ad(i+1), fmt.Sprintf("new-%d", i), exp(i), true)
	}
	s0 := rd.Stats()
	for i := range n {
		mustInsertAd(t, rd, kg(i), ad(i), fmt.Sprintf("fresh-%d", i), exp(i), true)
	}
	if s := rd.Stats(); s.Gets-s0.Gets > n/10 {
		t.Errorf("%d Gets for %d fresh ids after the load, want the filters to answer nearly all", s.Gets-s0.Gets, n)
	}
	if s := rd.Stats(); s.LegacyDuplicates != n {
		t.Errorf("LegacyDuplicates = %d, want %d", s.LegacyDuplicates, n)
	}
	rd.Discard()

	// A Dedup that never inserted expires what the checkpoint held, both
	// kinds, in the key groups it is given.
	if err := r.NewDedup().Expire(0, 4, base+50*m); err != nil {
		t.Fatal(err)
	}
	chk := r.NewDedup() // each click is asked once: what it leaves pending is not asked again
	defer chk.Discard()
	for i := range n {
		gone := kg(i) < 4 && exp(i) < base+50*m
		for _, c := range [][2]string{{"any_ad", fmt.Sprintf("legacy-%d", i)}, {ad(i), fmt.Sprintf("new-%d", i)}} {
			got, err := chk.Insert(kg(i), c[0], c[1], exp(i))
			if err != nil {
				t.Fatal(err)
			}
			if got != gone {
				t.Fatalf("%s (key group %d, expiry +%d min): present %v after Expire(0, 4, +50 min)", c[1], kg(i), (exp(i)-base)/m, !got)
			}
		}
	}
}

// TestDedupExpiredKeysStayHidden: Expire moves the expiry bound at once but
// deletes the keys below it in batches. Until they are deleted, no reader
// sees them: not the Dedup, not a fresh one, not a restored checkpoint, not
// after an insert into an expired bucket lowered the bound again. Then a
// later Expire deletes them.
func TestDedupExpiredKeysStayHidden(t *testing.T) {
	const m = BucketMs
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	writeLegacy(t, db, 3, "legacy", base+5*m)
	mustInsertAd(t, d, 3, "ad_7", "c1", base+5*m, true)
	mustInsertAd(t, d, 3, "ad_7", "c2", base+6*m, true)
	mustInsertAd(t, d, 3, "ad_7", "c3", base+50*m, true)
	if err := d.Expire(0, KeyGroups, base); err != nil { // the first Expire deletes: nothing yet
		t.Fatal(err)
	}
	if err := d.Expire(0, KeyGroups, base+7*m); err != nil { // only moves the bound
		t.Fatal(err)
	}
	if n := len(rawKeys(t, db, 'g')); n != 3 {
		t.Fatalf("%d entry keys in the DB, want the 3 inserted (deletion batched)", n)
	}
	if n := len(rawKeys(t, db, 'd')); n != 1 {
		t.Fatalf("%d legacy keys in the DB, want 1 (deletion batched)", n)
	}
	hidden := func(db *DB) {
		t.Helper()
		if presentAd(t, db, 3, "ad_7", "c1", base+5*m) || presentAd(t, db, 3, "ad_7", "c2", base+6*m) ||
			presentAd(t, db, 3, "ad_1", "legacy", base+5*m) || !presentAd(t, db, 3, "ad_7", "c3", base+50*m) {
			t.Fatalf("an expired key is seen, or a live one is not")
		}
	}
	hidden(db)
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := db.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	r, err := OpenFromCheckpoint(ckpt, filepath.Join(t.TempDir(), "restored"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hidden(r)

	// An insert below the bound (preagg never makes one) lowers it, and
	// deletes first what lies between, so that c1, c2 and the legacy entry
	// do not come back.
	mustInsertAd(t, d, 3, "ad_9", "late", base+m, true)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	hidden(db)
	if !presentAd(t, db, 3, "ad_9", "late", base+m) {
		t.Fatalf("the late insert is not seen by a fresh Dedup")
	}
	mustInsertAd(t, d, 3, "ad_7", "c2", base+6*m, true)
	d.Discard()

	// Far enough on, the keys below the bound are deleted.
	if err := d.Expire(0, KeyGroups, base+40*m); err != nil {
		t.Fatal(err)
	}
	if keys := rawKeys(t, db, 'g'); len(keys) != 1 || len(rawKeys(t, db, 'd')) != 0 {
		t.Fatalf("entry keys %q and legacy keys %q after Expire 33 buckets on, want c3's alone", keys, rawKeys(t, db, 'd'))
	}
}

// A DB holding dedup entries of the interim layout that no release wrote
// ('e' kg(ad) kg(click id) bucket len(ad) ad id) is refused at the first
// use of its entries, not misread: its key groups' bytes would be taken
// for another key group and bucket, and its ids would no longer
// de-duplicate.
func TestDedupRefusesInterimEntries(t *testing.T) {
	db, _ := openTemp(t, Options{})
	k := []byte{'e', 7, 3}
	k = binary.BigEndian.AppendUint64(k, uint64(base/BucketMs)^(1<<63))
	k = binary.AppendUvarint(k, 4)
	k = append(k, "ad_1c1"...)
	if err := db.db.Set(k, nil, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	d := db.NewDedup()
	_, err := d.Insert(3, "ad_1", "c1", base+hourMs)
	if err == nil || !strings.Contains(err.Error(), "development layout") {
		t.Fatalf("Insert on a DB with interim entries: %v; want a refusal", err)
	}
	if err := d.Expire(0, KeyGroups, base); err == nil {
		t.Error("Expire on a DB with interim entries succeeded; want a refusal")
	}
}
