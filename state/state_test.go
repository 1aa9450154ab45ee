package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openTemp(t testing.TB, o Options) (*DB, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	db, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return db, dir
}

// testAd is the ad of the clicks of tests about something else than ads.
const testAd = "ad_1"

func mustInsert(t testing.TB, d *Dedup, kg int, id string, exp int64, want bool) {
	t.Helper()
	mustInsertAd(t, d, kg, testAd, id, exp, want)
}

func mustInsertAd(t testing.TB, d *Dedup, kg int, ad, id string, exp int64, want bool) {
	t.Helper()
	got, err := d.Insert(kg, ad, id, exp)
	if err != nil {
		t.Fatalf("Insert(%d, %q, %q, %d): %v", kg, ad, id, exp, err)
	}
	if got != want {
		t.Fatalf("Insert(%d, %q, %q, %d) = %v, want %v", kg, ad, id, exp, got, want)
	}
}

const hourMs = 3_600_000

func TestDedupDetectsDuplicatesAcrossCommit(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	exp := int64(1_700_000_000_000) + 2*hourMs
	mustInsert(t, d, 5, "c1", exp, true)
	mustInsert(t, d, 5, "c1", exp, false) // pending in the batch
	mustInsert(t, d, 6, "c1", exp, true)  // another key group
	mustInsert(t, d, 5, "c2", exp, true)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	mustInsert(t, d, 5, "c1", exp, false) // committed
	mustInsert(t, d, 5, "c2", exp, false)
	// Another expiry bucket is the same click: identity is (kg, id).
	mustInsert(t, d, 5, "c1", exp+BucketMs, false)
	ins, dup := d.Count()
	if ins != 3 || dup != 4 {
		t.Fatalf("Count() = %d, %d, want 3, 4", ins, dup)
	}
	// A new handle (a subtask after a rescale) sees the committed ids.
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d2 := db.NewDedup()
	mustInsert(t, d2, 5, "c1", exp, false)
	mustInsert(t, d2, 6, "c1", exp, false)
	mustInsert(t, d2, 5, "c3", exp, true)
}

func TestDedupAutoCommit(t *testing.T) {
	db, _ := openTemp(t, Options{DedupBatchBytes: 4096})
	d := db.NewDedup()
	for i := range 1000 {
		mustInsert(t, d, 1, fmt.Sprintf("id-%d", i), 0, true)
	}
	// Without an explicit Commit, most of the inserts are already in the DB.
	d2 := db.NewDedup()
	if ok, err := d2.Insert(1, testAd, "id-0", 0); err != nil || ok {
		t.Fatalf("id-0 via second handle: inserted=%v err=%v, want false, nil", ok, err)
	}
	for i := range 1000 {
		mustInsert(t, d, 1, fmt.Sprintf("id-%d", i), 0, false)
	}
}

func TestDedupBadInput(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	for _, tc := range []struct {
		kg int
		id string
	}{{-1, "a"}, {KeyGroups, "a"}, {0, ""}} {
		if _, err := d.Insert(tc.kg, testAd, tc.id, 0); err == nil {
			t.Errorf("Insert(%d, %q) succeeded, want error", tc.kg, tc.id)
		}
	}
	for _, r := range [][2]int{{-1, 3}, {0, KeyGroups + 1}, {5, 4}} {
		if err := d.Expire(r[0], r[1], 0); err == nil {
			t.Errorf("Expire(%d, %d) succeeded, want error", r[0], r[1])
		}
	}
}

func TestBucketOf(t *testing.T) {
	for _, tc := range []struct{ ms, want int64 }{
		{0, 0}, {59_999, 0}, {60_000, 1}, {-1, -1}, {-60_000, -1}, {-60_001, -2},
	} {
		if got := bucketOf(tc.ms); got != tc.want {
			t.Errorf("bucketOf(%d) = %d, want %d", tc.ms, got, tc.want)
		}
	}
}

// present reports whether (kg, testAd, id, exp) is in the committed DB,
// without inserting it.
func present(t *testing.T, db *DB, kg int, id string, exp int64) bool {
	t.Helper()
	return presentAd(t, db, kg, testAd, id, exp)
}

// presentAd reports whether (kg, ad, id, exp) is a duplicate for the
// committed DB, without inserting it.
func presentAd(t *testing.T, db *DB, kg int, ad, id string, exp int64) bool {
	t.Helper()
	d := db.NewDedup()
	defer d.Discard()
	ok, err := d.Insert(kg, ad, id, exp)
	if err != nil {
		t.Fatal(err)
	}
	return !ok
}

func TestDedupExpire(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	const m = BucketMs
	// Expiries around minute boundaries, including negative times, in key
	// groups 3, 4 and 9.
	type entry struct {
		kg  int
		exp int64
	}
	var entries []entry
	for _, kg := range []int{3, 4, 9} {
		for _, exp := range []int64{-2*m - 1, -m, -1, 0, m - 1, m, 2*m - 1, 2 * m, 5*m + 30_000, 100 * m} {
			entries = append(entries, entry{kg, exp})
			mustInsert(t, d, kg, fmt.Sprintf("c%d", exp), exp, true)
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	// Expire key groups [3, 5) before 2m+1: buckets entirely before 2m+1
	// are those ending at or before 2m, i.e. expiries < 2m.
	before := int64(2*m + 1)
	if err := d.Expire(3, 5, before); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// Independent expectation: the bucket [floor(exp/m)*m, +m) ends at
		// or before beforeMs.
		bucketStart := e.exp - ((e.exp%m)+m)%m
		gone := e.kg >= 3 && e.kg < 5 && bucketStart+m <= before
		if got := present(t, db, e.kg, fmt.Sprintf("c%d", e.exp), e.exp); got == gone {
			t.Errorf("kg %d expiry %d: present=%v, want %v", e.kg, e.exp, got, !gone)
		}
	}
	// Expire again further on; then a late insert into an expired bucket is
	// still removed by the next Expire.
	if err := d.Expire(3, 5, 6*m); err != nil {
		t.Fatal(err)
	}
	if present(t, db, 3, fmt.Sprintf("c%d", 5*m+30_000), 5*m+30_000) {
		t.Errorf("expiry 5m+30s in kg 3 survived Expire before 6m")
	}
	if !present(t, db, 3, fmt.Sprintf("c%d", 100*m), 100*m) {
		t.Errorf("expiry 100m in kg 3 was removed by Expire before 6m")
	}
	mustInsert(t, d, 3, "late", m, true)
	if err := d.Expire(3, 4, 6*m); err != nil {
		t.Fatal(err)
	}
	if present(t, db, 3, "late", m) {
		t.Errorf("id inserted into an already expired bucket survived the next Expire")
	}
}

func TestCheckpointRestore(t *testing.T) {
	db, _ := openTemp(t, Options{})
	base := t.TempDir()
	d := db.NewDedup()
	exp := int64(10 * hourMs)
	for i := range 1000 {
		mustInsert(t, d, i%KeyGroups, fmt.Sprintf("a%d", i), exp, true)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	for kg := range 4 {
		if err := db.PutBlob("window", kg, []byte(fmt.Sprintf("state-%d", kg))); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutBlob("late", 7, []byte("late-7")); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(base, "ckpt-41")
	if err := db.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(ckpt); err == nil {
		t.Errorf("Checkpoint into an existing directory succeeded, want error")
	}
	// Writes after the checkpoint: new ids, changed and deleted blobs, an
	// expiry.
	for i := range 500 {
		mustInsert(t, d, i%KeyGroups, fmt.Sprintf("b%d", i), exp, true)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.PutBlob("window", 0, []byte("changed")); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteBlobs("late"); err != nil {
		t.Fatal(err)
	}
	if err := d.Expire(0, KeyGroups, exp+BucketMs); err != nil {
		t.Fatal(err)
	}
	if !(db.SizeBytes() > 0) {
		t.Errorf("SizeBytes() = %d, want > 0", db.SizeBytes())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	work := filepath.Join(base, "restored")
	if err := os.MkdirAll(work, 0o755); err != nil { // stale contents are replaced
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "junk"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := OpenFromCheckpoint(ckpt, work, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 1000 {
		if !present(t, r, i%KeyGroups, fmt.Sprintf("a%d", i), exp) {
			t.Fatalf("id a%d (before checkpoint) missing after restore", i)
		}
	}
	for i := range 500 {
		if present(t, r, i%KeyGroups, fmt.Sprintf("b%d", i), exp) {
			t.Fatalf("id b%d (after checkpoint) present after restore", i)
		}
	}
	got := map[string]string{}
	for _, op := range []string{"window", "late"} {
		err := r.Blobs(op, func(kg int, val []byte) error {
			got[fmt.Sprintf("%s/%d", op, kg)] = string(val)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"window/0": "state-0", "window/1": "state-1", "window/2": "state-2", "window/3": "state-3", "late/7": "late-7"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("blobs after restore = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(work, "junk")); !os.IsNotExist(err) {
		t.Errorf("stale file in work dir survived the restore: %v", err)
	}

	// The restored DB writes without touching the checkpoint: restore twice.
	d = r.NewDedup()
	mustInsert(t, d, 1, "after-restore", exp, true)
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := r.Checkpoint(filepath.Join(base, "ckpt-42")); err != nil {
		t.Fatal(err)
	}
	r2, err := OpenFromCheckpoint(ckpt, filepath.Join(base, "again"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if present(t, r2, 1, "after-restore", exp) {
		t.Errorf("a write to a restored DB leaked into its checkpoint")
	}
	if !present(t, r2, 0, "a0", exp) {
		t.Errorf("second restore lost id a0")
	}
}

func TestCheckpointIncrementalLinks(t *testing.T) {
	db, _ := openTemp(t, Options{})
	base := t.TempDir()
	d := db.NewDedup()
	for i := range 20000 {
		mustInsert(t, d, i%KeyGroups, fmt.Sprintf("id-%08d", i), 0, true)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(filepath.Join(base, "c1")); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(filepath.Join(base, "c2")); err != nil {
		t.Fatal(err)
	}
	// Every table of c1 is the same inode in c2 (hard links).
	ents, err := os.ReadDir(filepath.Join(base, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".sst" {
			continue
		}
		tables++
		a, err1 := os.Stat(filepath.Join(base, "c1", e.Name()))
		b, err2 := os.Stat(filepath.Join(base, "c2", e.Name()))
		if err1 != nil || err2 != nil {
			t.Fatalf("stat table %s: %v %v", e.Name(), err1, err2)
		}
		if !os.SameFile(a, b) {
			t.Errorf("table %s is not shared between checkpoints", e.Name())
		}
	}
	if tables == 0 {
		t.Fatalf("checkpoint has no tables")
	}
}

func TestBlobs(t *testing.T) {
	db, _ := openTemp(t, Options{})
	vals := map[int][]byte{0: []byte("zero"), 1: {}, 127: bytes.Repeat([]byte{0xab}, 10000), 300: []byte("x")}
	for kg, v := range vals {
		if err := db.PutBlob("win", kg, v); err != nil {
			t.Fatal(err)
		}
	}
	// A name that is a prefix of another must not see its blobs.
	if err := db.PutBlob("wi", 1, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := db.PutBlob("win", 0, []byte("zero2")); err != nil {
		t.Fatal(err)
	}
	vals[0] = []byte("zero2")
	var order []int
	err := db.Blobs("win", func(kg int, val []byte) error {
		order = append(order, kg)
		if !bytes.Equal(val, vals[kg]) {
			t.Errorf("blob %d = %q, want %q", kg, val, vals[kg])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[0 1 127 300]" {
		t.Errorf("blob order = %v, want [0 1 127 300]", order)
	}
	stop := errors.New("stop")
	if err := db.Blobs("win", func(int, []byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Blobs error = %v, want %v", err, stop)
	}
	if err := db.DeleteBlobs("win"); err != nil {
		t.Fatal(err)
	}
	n := 0
	_ = db.Blobs("win", func(int, []byte) error { n++; return nil })
	_ = db.Blobs("wi", func(int, []byte) error { n += 10; return nil })
	if n != 10 {
		t.Errorf("after DeleteBlobs(win): %d win blobs and %d wi blobs, want 0 and 1", n%10, n/10)
	}
	for _, tc := range []struct {
		op string
		kg int
	}{{"", 0}, {"a\x00b", 0}, {"ok", -1}, {"ok", MaxBlobKeyGroup + 1}} {
		if err := db.PutBlob(tc.op, tc.kg, nil); err == nil {
			t.Errorf("PutBlob(%q, %d) succeeded, want error", tc.op, tc.kg)
		}
	}
}

func TestClosed(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Insert(0, testAd, "a", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Insert after Close: %v, want ErrClosed", err)
	}
	if err := db.PutBlob("a", 0, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("PutBlob after Close: %v, want ErrClosed", err)
	}
	if db.SizeBytes() != 0 {
		t.Errorf("SizeBytes after Close = %d, want 0", db.SizeBytes())
	}
}

// randomID returns a 16-byte random click id, like a UUID without dashes.
func randomID(r *rand.Rand, buf []byte) string {
	binary.LittleEndian.PutUint64(buf[0:], r.Uint64())
	binary.LittleEndian.PutUint64(buf[8:], r.Uint64())
	const hex = "0123456789abcdef"
	out := make([]byte, 32)
	for i, b := range buf[:16] {
		out[2*i], out[2*i+1] = hex[b>>4], hex[b&15]
	}
	return string(out)
}

// TestFlushSoonThenCheckpoint flushes in the background between two sets of
// inserts: the checkpoint after them holds both.
func TestFlushSoonThenCheckpoint(t *testing.T) {
	db, _ := openTemp(t, Options{})
	d := db.NewDedup()
	exp := int64(10 * hourMs)
	insert := func(prefix string) {
		for i := range 2000 {
			mustInsert(t, d, i%KeyGroups, fmt.Sprintf("%s%d", prefix, i), exp, true)
		}
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	insert("a")
	if err := db.FlushSoon(); err != nil {
		t.Fatal(err)
	}
	insert("b")
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := db.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushSoon(); !errors.Is(err, ErrClosed) {
		t.Errorf("FlushSoon after Close: %v, want ErrClosed", err)
	}
	r, err := OpenFromCheckpoint(ckpt, filepath.Join(t.TempDir(), "work"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rd := r.NewDedup()
	for _, prefix := range []string{"a", "b"} {
		for i := range 2000 {
			mustInsert(t, rd, i%KeyGroups, fmt.Sprintf("%s%d", prefix, i), exp, false)
		}
	}
}
