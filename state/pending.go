package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
)

// pendingSet holds a Dedup's writes not yet applied to the DB: the keys
// back to back in one arena, an entry per key, and an open-addressing hash
// table over the entries that set a key, indexed by (key group, ad, id),
// for the rare "seen?" question the Bloom filters cannot answer. An entry
// either sets a key (a new entry, or one moved to a later bucket) or
// deletes one (the bucket an entry moved from). Legacy entries are never
// pending. Memory is reused across commits, so an
// Insert allocates nothing in steady state.
type pendingSet struct {
	arena []byte
	ents  []pendingEnt
	// table holds entry index + 1 (0 = empty slot) of every entry that sets
	// a key; its length is a power of two kept at least twice the number of
	// entries.
	table []uint32
	order []sortEnt // reused by sorted
}

// pendingEnt is one pending key: arena[off:off+n], in key group kg (of the
// click id) and expiry bucket, to set or (del) to delete.
type pendingEnt struct {
	bucket int64
	hash   uint64
	off, n uint32
	kg     uint8
	del    bool
}

// sortEnt orders entry i by k: key group, bucket relative to the batch's
// smallest, then the first six bytes of what follows the bucket in the key
// (the ad's length and the ad's first bytes; or, for a bucket 511 or more
// after the smallest, the key group alone); ties are broken by the whole
// key. Sorting these 16-byte values moves far less memory than sorting the
// entries.
type sortEnt struct {
	k uint64
	i uint32
}

func (p *pendingSet) len() int { return len(p.ents) }

// sizeBytes approximates the size of a Pebble batch holding the pending
// keys (key bytes plus a few bytes of framing per key).
func (p *pendingSet) sizeBytes() int { return len(p.arena) + 4*len(p.ents) }

func (p *pendingSet) key(e *pendingEnt) []byte { return p.arena[e.off : e.off+e.n] }

// pendingHash mixes the filter hash of an entry (pairHash) with its key
// group. The bucket is not part of it: an entry is pending at most once,
// whatever its bucket.
func pendingHash(h uint64, kg int) uint64 {
	x := h ^ (uint64(kg) * 0x9e3779b97f4a7c15)
	x ^= x >> 32
	x *= 0xd6e8feb86659fd93
	x ^= x >> 32
	return x
}

// find returns the index of the entry that sets (ad, id) in key group kg
// (with hash ph), or -1.
func (p *pendingSet) find(kg int, ad, id string, ph uint64) int {
	if len(p.table) == 0 {
		return -1
	}
	mask := uint64(len(p.table) - 1)
	for i := ph & mask; ; i = (i + 1) & mask {
		s := p.table[i]
		if s == 0 {
			return -1
		}
		e := &p.ents[s-1]
		if e.hash == ph && int(e.kg) == kg && e.holds(p.arena, ad, id) {
			return int(s - 1)
		}
	}
}

// holds reports whether e's key, in arena, is of (ad, id).
func (e *pendingEnt) holds(arena []byte, ad, id string) bool {
	k := arena[e.off+keyAdOff : e.off+e.n]
	n, w := binary.Uvarint(k)
	return w > 0 && n == uint64(len(ad)) && len(k) == w+len(ad)+len(id) &&
		string(k[w:w+len(ad)]) == ad && string(k[w+len(ad):]) == id
}

// add appends the key (kg, bucket, ad, id) to set, or (del) to delete,
// with hash ph. The caller has made sure that no entry sets (ad, id) in kg
// yet (for a set) and that the key is not pending (for a delete): the keys
// stay distinct.
func (p *pendingSet) add(kg int, bucket int64, ad, id string, ph uint64, del bool) {
	off := len(p.arena)
	p.arena = appendDedupKey(p.arena, kg, bucket, ad, id)
	if 2*(len(p.ents)+1) > len(p.table) {
		p.grow()
	}
	p.ents = append(p.ents, pendingEnt{
		bucket: bucket,
		hash:   ph,
		off:    uint32(off),
		n:      uint32(len(p.arena) - off),
		kg:     uint8(kg),
		del:    del,
	})
	if !del {
		p.place(uint32(len(p.ents)))
	}
}

// setBucket moves entry i (one that sets a key) to bucket.
func (p *pendingSet) setBucket(i int, bucket int64) {
	e := &p.ents[i]
	e.bucket = bucket
	binary.BigEndian.PutUint64(p.arena[e.off+keyBucketOff:], uint64(bucket)^(1<<63))
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
		if !p.ents[i].del {
			p.place(uint32(i + 1))
		}
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
	o := p.order[:0]
	for i := range p.ents {
		e := &p.ents[i]
		k := uint64(e.kg)<<57 | 511<<48 // a far bucket: ties, ordered by the whole key
		if d := e.bucket - minB; d >= 0 && d < 511 {
			var pfx [8]byte
			copy(pfx[2:], p.arena[e.off+keyAdOff:e.off+e.n])
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
