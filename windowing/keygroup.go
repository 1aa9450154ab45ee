package windowing

// MaxParallelism is the number of key groups: the unit in which keyed state
// moves between subtasks, and the ceiling for rescaling. It must never change
// for a deployment: checkpoints are laid out by key group.
const MaxParallelism = 128

// KeyGroup returns the key group (0..MaxParallelism-1) of a key: the murmur3
// 32-bit hash of its bytes (seed 0) modulo MaxParallelism. The value is part
// of the checkpoint format and must stay stable.
func KeyGroup(key string) int {
	return int(murmur3(key) % MaxParallelism)
}

// Owner returns the subtask (0..parallelism-1) that owns key group kg:
// kg × parallelism ÷ MaxParallelism, rounded down, so that each subtask owns
// one contiguous range of key groups.
func Owner(kg, parallelism int) int {
	return kg * parallelism / MaxParallelism
}

// Range returns the key groups [from, to) owned by subtask.
func Range(subtask, parallelism int) (from, to int) {
	return (subtask*MaxParallelism + parallelism - 1) / parallelism, ((subtask+1)*MaxParallelism + parallelism - 1) / parallelism
}

// murmur3 is MurmurHash3_x86_32 with seed 0.
func murmur3(s string) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(s)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
		h = h<<13 | h>>19
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n - i {
	case 3:
		k ^= uint32(s[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(s[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(s[i])
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
