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

// newBlockBloom returns a filter for at least capacity ids at
// filterBitsPerKey bits each. Its block count is rounded up to a number
// with at most four significant bits (m·2^s, m < 16: at most 1/8 more
// memory), so that it can be folded in half s times (fold); the capacity
// is what the rounded size holds.
func newBlockBloom(capacity int) *blockBloom {
	nb := foldableBlocks((capacity*filterBitsPerKey + 511) / 512)
	return &blockBloom{blocks: make([][16]uint32, nb), cap: nb * 512 / filterBitsPerKey}
}

// foldableBlocks rounds n (≥ 1) up to the nearest m·2^s with m < 16.
func foldableBlocks(n int) int {
	if n < 1 {
		return 1
	}
	s := max(0, bits.Len(uint(n))-4)
	m := (n + 1<<s - 1) >> s
	if m == 16 {
		m, s = 8, s+1
	}
	return m << s
}

// foldable reports whether fold can halve f.
func (f *blockBloom) foldable() bool { return len(f.blocks)%2 == 0 }

// fold halves f's memory by merging each pair of adjacent blocks (2i, 2i+1)
// into block i, keeping every id it holds: an id's block among n blocks is
// ⌊h·n/2⁶⁴⌋, so among n/2 it is ⌊⌊h·n/2⁶⁴⌋/2⌋, the merged pair. Bits within
// a block do not depend on the block count. The filter then holds twice as
// many ids per bit (more false positives) and its capacity halves. f must
// be foldable.
func (f *blockBloom) fold() {
	half := make([][16]uint32, len(f.blocks)/2)
	for i := range half {
		a, b := &f.blocks[2*i], &f.blocks[2*i+1]
		for w := range half[i] {
			half[i][w] = a[w] | b[w]
		}
	}
	f.blocks = half
	f.cap /= 2
}

// density returns the filter's bits per id it holds (room not yet used
// counts as density: it is what folding gives back for free).
func (f *blockBloom) density() float64 {
	return float64(len(f.blocks)*512) / float64(max(f.n, 1))
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
