package state

import "math/bits"

// filterBitsPerKey sizes the in-memory filters: 12 bits per id give a false
// positive rate near 0.5% for a split-block Bloom filter.
const filterBitsPerKey = 12

// blockBloom is a split-block Bloom filter (the layout Parquet uses): 256-bit
// blocks of eight 32-bit words; a key sets one bit in each word of one
// block, so a lookup touches a single cache line.
type blockBloom struct {
	blocks [][8]uint32
	n, cap int
}

var bloomSalt = [8]uint32{
	0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d,
	0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
}

func newBlockBloom(capacity int) *blockBloom {
	nb := (capacity*filterBitsPerKey + 255) / 256
	if nb < 1 {
		nb = 1
	}
	return &blockBloom{blocks: make([][8]uint32, nb), cap: capacity}
}

func (f *blockBloom) block(h uint64) *[8]uint32 {
	hi, _ := bits.Mul64(h, uint64(len(f.blocks)))
	return &f.blocks[hi]
}

func (f *blockBloom) add(h uint64) {
	b := f.block(h)
	k := uint32(h)
	for i := range b {
		b[i] |= 1 << ((k * bloomSalt[i]) >> 27)
	}
	f.n++
}

func (f *blockBloom) mayContain(h uint64) bool {
	b := f.block(h)
	k := uint32(h)
	for i := range b {
		if b[i]&(1<<((k*bloomSalt[i])>>27)) == 0 {
			return false
		}
	}
	return true
}

// filter is a growable set of Bloom filters: when the newest is full, a new
// one four times larger is added. Lookups probe every stage; sizing new
// filters from the largest one seen keeps it to one stage in steady state.
type filter struct {
	stages []*blockBloom
	n      int
}

func newFilter(capacity int) *filter {
	return &filter{stages: []*blockBloom{newBlockBloom(capacity)}}
}

func (f *filter) add(h uint64) {
	last := f.stages[len(f.stages)-1]
	if last.n >= last.cap {
		last = newBlockBloom(last.cap * 4)
		f.stages = append(f.stages, last)
	}
	last.add(h)
	f.n++
}

func (f *filter) mayContain(h uint64) bool {
	for _, s := range f.stages {
		if s.mayContain(h) {
			return true
		}
	}
	return false
}

func (f *filter) count() int { return f.n }

func (f *filter) sizeBytes() int {
	n := 0
	for _, s := range f.stages {
		n += len(s.blocks) * 32
	}
	return n
}
