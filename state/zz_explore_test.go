package state

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestZZExplore(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		return
	}
	dir := t.TempDir()
	db, err := Open(filepath.Join(dir, "db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := []*Dedup{db.NewDedup(), db.NewDedup()}
	r := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	start := time.Now()
	c0 := cpuTime()
	base := int64(1795946383313 + 26*3600_000)
	for i := range 10_000_000 {
		var b [5]byte
		for j := range b {
			b[j] = letters[r.IntN(len(letters))]
		}
		id := fmt.Sprintf("c%d-%s", i, b[:])
		kg := int(r.Uint32() % KeyGroups)
		if _, err := ds[kg/64].Insert(kg, id, base+int64(i)/100); err != nil {
			t.Fatal(err)
		}
		if i%3_000_000 == 2_999_999 {
			for _, d := range ds {
				if err := d.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Checkpoint(filepath.Join(dir, fmt.Sprint("ck", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("wall %v cpu %v", time.Since(start), time.Duration(cpuTime()-c0))
	t.Logf("\n%s", db.db.Metrics().String())
	db.Close()
}
