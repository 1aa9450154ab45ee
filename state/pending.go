package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// pendingSet holds a Dedup's inserts not yet written to the DB: the keys
// back to back in one arena, an entry per key, and an open-addressing hash
// table over the entries for the rare "seen?" question the Bloom filter
// cannot answer. Memory is reused across commits, so an Insert allocates
// nothing in steady state.
type pendingSet struct {
	arena []byte
	ents  []pendingEnt
	// table holds entry index + 1 (0 = empty slot); its length is a power of
	// two kept at least twice the number of entries.
	table []uint32
	order []sortEnt // reused by sorted
}

// pendingEnt is one pending key: arena[off:off+n], in key group kg and
// expiry bucket.
type pendingEnt struct {
	bucket int64
	hash   uint64
	off, n uint32
	kg     uint8
}

// sortEnt orders entry i by k: key group, bucket relative to the batch's
// smallest, the id's first six bytes (or, for a bucket 511 or more after
// the smallest, key group alone); ties are broken by the whole key. Sorting these 16-byte values moves far less memory than
// sorting the entries.
type sortEnt struct {
	k uint64
	i uint32
}

func (p *pendingSet) len() int { return len(p.ents) }

// sizeBytes approximates the size of a Pebble batch holding the pending
// keys (key bytes plus a few bytes of framing per key).
func (p *pendingSet) sizeBytes() int { return len(p.arena) + 4*len(p.ents) }

func (p *pendingSet) key(e *pendingEnt) []byte { return p.arena[e.off : e.off+e.n] }

// pendingHash mixes the filter hash of an id with its key group and bucket.
func pendingHash(h uint64, kg int, bucket int64) uint64 {
	x := h ^ (uint64(bucket)*0x9e3779b97f4a7c15 + uint64(kg))
	x ^= x >> 32
	x *= 0xd6e8feb86659fd93
	x ^= x >> 32
	return x
}

// contains reports whether key (with hash ph) is pending.
func (p *pendingSet) contains(key []byte, ph uint64) bool {
	if len(p.table) == 0 {
		return false
	}
	mask := uint64(len(p.table) - 1)
	for i := ph & mask; ; i = (i + 1) & mask {
		s := p.table[i]
		if s == 0 {
			return false
		}
		e := &p.ents[s-1]
		if e.hash == ph && bytes.Equal(p.key(e), key) {
			return true
		}
	}
}

// add records the key arena[off:] (just appended by the caller, not
// pending yet) for key group kg and bucket, with hash ph.
func (p *pendingSet) add(off int, kg int, bucket int64, id string, ph uint64) {
	if 2*(len(p.ents)+1) > len(p.table) {
		p.grow()
	}
	p.ents = append(p.ents, pendingEnt{
		bucket: bucket,
		hash:   ph,
		off:    uint32(off),
		n:      uint32(len(p.arena) - off),
		kg:     uint8(kg),
	})
	p.place(uint32(len(p.ents)))
}

func (p *pendingSet) place(slot uint32) {
	mask := uint64(len(p.table) - 1)
	for i := p.ents[slot-1].hash & mask; ; i = (i + 1) & mask {
		if p.table[i] == 0 {
			p.table[i] = slot
			return
		}
	}
}

func (p *pendingSet) grow() {
	n := max(1024, 2*len(p.table))
	p.table = make([]uint32, n)
	for i := range p.ents {
		p.place(uint32(i + 1))
	}
}

// sorted returns the entries' indexes in key order (valid until the next
// add or reset). The keys are distinct.
func (p *pendingSet) sorted() []sortEnt {
	if len(p.ents) == 0 {
		return nil
	}
	minB := p.ents[0].bucket
	for i := range p.ents {
		minB = min(minB, p.ents[i].bucket)
	}
	const idOff = 2 + 8 // prefix, key group, bucket
	o := p.order[:0]
	for i := range p.ents {
		e := &p.ents[i]
		k := uint64(e.kg)<<57 | 511<<48 // a far bucket: ties, ordered by the whole key
		if d := e.bucket - minB; d >= 0 && d < 511 {
			var pfx [8]byte
			copy(pfx[2:], p.arena[e.off+idOff:e.off+e.n])
			k = uint64(e.kg)<<57 | uint64(d)<<48 | binary.BigEndian.Uint64(pfx[:])
		}
		o = append(o, sortEnt{k: k, i: uint32(i)})
	}
	slices.SortFunc(o, func(a, b sortEnt) int {
		if a.k != b.k {
			return cmp.Compare(a.k, b.k)
		}
		return bytes.Compare(p.key(&p.ents[a.i]), p.key(&p.ents[b.i]))
	})
	p.order = o
	return o
}

// reset empties the set, keeping its memory.
func (p *pendingSet) reset() {
	p.arena = p.arena[:0]
	p.ents = p.ents[:0]
	clear(p.table)
}
