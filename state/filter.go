package state

import "math/bits"

// filterBitsPerKey sizes the in-memory filters: 24 bits per id, half for
// the id alone and half for the id tagged with its bucket, give a false
// positive rate near 0.5% for each of the two questions.
const filterBitsPerKey = 24

// blockBloom is a split-block Bloom filter (the layout Parquet uses) whose
// 512-bit blocks (one cache line) hold two halves of eight 32-bit words: a
// key sets one bit in each word of the first half from its hash alone, and
// one bit in each word of the second half from its hash mixed with a tag
// (the key's bucket within its partition). So "is the id here?" and "is the
// id here with this tag?" both touch the single cache line the hash picks.
type blockBloom struct {
	blocks [][16]uint32
	n, cap int
}

var bloomSalt = [8]uint32{
	0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d,
	0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
}

func newBlockBloom(capacity int) *blockBloom {
	nb := (capacity*filterBitsPerKey + 511) / 512
	if nb < 1 {
		nb = 1
	}
	return &blockBloom{blocks: make([][16]uint32, nb), cap: capacity}
}

func (f *blockBloom) block(h uint64) *[16]uint32 {
	hi, _ := bits.Mul64(h, uint64(len(f.blocks)))
	return &f.blocks[hi]
}

// tagKey mixes hash h with tag into the 32 bits that choose the second
// half's bits. The whole of h is mixed in: its high bits also choose the
// block, so they alone would vary little between the keys of one block.
func tagKey(h uint64, tag uint32) uint32 {
	x := h + uint64(tag+1)*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return uint32(x >> 32)
}

// add records hash h with tag.
func (f *blockBloom) add(h uint64, tag uint32) {
	b := f.block(h)
	k, t := uint32(h), tagKey(h, tag)
	for i := range 8 {
		b[i] |= 1 << ((k * bloomSalt[i]) >> 27)
		b[8+i] |= 1 << ((t * bloomSalt[i]) >> 27)
	}
	f.n++
}

// mayContain reports whether h may have been added, with any tag.
func (f *blockBloom) mayContain(h uint64) bool { return blocksMayContain(f.blocks, h) }

// blocksMayContain is mayContain on a filter's blocks: the Dedup keeps the
// blocks of every filter it probes side by side, one load away.
func blocksMayContain(blocks [][16]uint32, h uint64) bool {
	hi, _ := bits.Mul64(h, uint64(len(blocks)))
	b := &blocks[hi]
	k := uint32(h)
	for i := range 8 {
		if b[i]&(1<<((k*bloomSalt[i])>>27)) == 0 {
			return false
		}
	}
	return true
}

// mayContainTag reports whether h may have been added with tag.
func (f *blockBloom) mayContainTag(h uint64, tag uint32) bool {
	b := f.block(h)
	t := tagKey(h, tag)
	for i := range 8 {
		if b[8+i]&(1<<((t*bloomSalt[i])>>27)) == 0 {
			return false
		}
	}
	return true
}

// full reports whether f holds as many keys as it was sized for.
func (f *blockBloom) full() bool { return f.n >= f.cap }

func (f *blockBloom) count() int { return f.n }

func (f *blockBloom) sizeBytes() int { return len(f.blocks) * 64 }
