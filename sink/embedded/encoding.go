package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/adclick/adclick/sink"
)

// Key prefixes; see the package documentation.
const (
	prefixItem    = 'i'
	prefixIndex   = 'x'
	prefixTotal   = 't'
	prefixEpoch   = 'e'
	prefixReverse = 'r'
	prefixBucket  = 'b'
	prefixExpiry  = 'y'
	prefixMeta    = 'm'
	// The epoch records of a view with an index scope.
	prefixScopedEpoch   = 'E'
	prefixScopedReverse = 'R'
)

// metaBucketIndex marks a store whose bucket index is complete (written by
// Open once it has indexed the items of a store that predates the index).
var metaBucketIndex = []byte{prefixMeta, 'b', 'u', 'c', 'k', 'e', 't', '_', 'i', 'x', 0, 1}

const formatV1 = 1

var errCorrupt = errors.New("embedded: corrupt record")

// appendEsc appends s escaped so that byte order equals string order and the
// encoding is self-delimiting: 0x00 becomes 0x00 0xFF, the end is 0x00 0x01.
func appendEsc(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			dst = append(dst, 0, 0xff)
		} else {
			dst = append(dst, s[i])
		}
	}
	return append(dst, 0, 1)
}

// readEsc decodes one string written by appendEsc and returns the rest.
func readEsc(b []byte) (string, []byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", nil, errCorrupt
		}
		switch b[i+1] {
		case 0xff:
			out = append(out, 0)
			i++
		case 1:
			return string(out), b[i+2:], nil
		default:
			return "", nil, errCorrupt
		}
	}
	return "", nil, errCorrupt
}

// appendInt64 appends v as 8 big-endian bytes with the sign bit flipped, so
// that byte order equals numeric order.
func appendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func readInt64(b []byte) (int64, []byte, error) {
	if len(b) < 8 {
		return 0, nil, errCorrupt
	}
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)), b[8:], nil
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil if there is none (p is all 0xFF).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func itemKey(k sink.Key) []byte {
	b := make([]byte, 0, 1+len(k.Entity)+len(k.Bucket)+4)
	b = append(b, prefixItem)
	b = appendEsc(b, k.Entity)
	return appendEsc(b, k.Bucket)
}

func decodeItemKey(b []byte) (sink.Key, error) {
	if len(b) == 0 || b[0] != prefixItem {
		return sink.Key{}, errCorrupt
	}
	return decodeKeySuffix(b[1:])
}

func decodeKeySuffix(b []byte) (sink.Key, error) {
	e, rest, err := readEsc(b)
	if err != nil {
		return sink.Key{}, err
	}
	bk, rest, err := readEsc(rest)
	if err != nil || len(rest) != 0 {
		return sink.Key{}, errCorrupt
	}
	return sink.Key{Entity: e, Bucket: bk}, nil
}

// indexPrefix is the prefix of every index entry of writer w with tag ix.
func indexPrefix(w sink.Writer, ix string) []byte {
	b := make([]byte, 0, 2+len(ix)+2)
	b = append(b, prefixIndex, byte(w))
	return appendEsc(b, ix)
}

func indexKey(w sink.Writer, ix string, k sink.Key) []byte {
	b := indexPrefix(w, ix)
	b = appendEsc(b, k.Entity)
	return appendEsc(b, k.Bucket)
}

// bucketPrefix is the prefix of the bucket index entries of bucket.
func bucketPrefix(bucket string) []byte {
	b := make([]byte, 0, 1+len(bucket)+2)
	b = append(b, prefixBucket)
	return appendEsc(b, bucket)
}

// bucketIndexKey is k's entry in the bucket index: 'b' esc(bucket)
// esc(entity), so that a bucket's entries iterate in entity order.
func bucketIndexKey(k sink.Key) []byte {
	return appendEsc(bucketPrefix(k.Bucket), k.Entity)
}

// expiryKey is k's entry in the expiry queue: 'y' int64(sec) esc(entity)
// esc(bucket), in order of expiry.
func expiryKey(sec int64, k sink.Key) []byte {
	b := appendInt64([]byte{prefixExpiry}, sec)
	b = appendEsc(b, k.Entity)
	return appendEsc(b, k.Bucket)
}

// decodeExpiryKey returns the expiry and the item key of an expiry entry.
func decodeExpiryKey(b []byte) (int64, sink.Key, error) {
	if len(b) == 0 || b[0] != prefixExpiry {
		return 0, sink.Key{}, errCorrupt
	}
	sec, rest, err := readInt64(b[1:])
	if err != nil {
		return 0, sink.Key{}, err
	}
	k, err := decodeKeySuffix(rest)
	return sec, k, err
}

// appendTotalKey appends the encoding of a total key shared by the 't', 'e'
// and 'r' keys: esc(ad) hour int64(startMs).
func appendTotalKey(dst []byte, k sink.TotalKey) []byte {
	dst = appendEsc(dst, k.Ad)
	h := byte(0)
	if k.Hour {
		h = 1
	}
	dst = append(dst, h)
	return appendInt64(dst, k.StartMs)
}

func readTotalKey(b []byte) (sink.TotalKey, []byte, error) {
	ad, rest, err := readEsc(b)
	if err != nil {
		return sink.TotalKey{}, nil, err
	}
	if len(rest) < 1 || rest[0] > 1 {
		return sink.TotalKey{}, nil, errCorrupt
	}
	hour := rest[0] == 1
	start, rest, err := readInt64(rest[1:])
	if err != nil {
		return sink.TotalKey{}, nil, err
	}
	return sink.TotalKey{Ad: ad, StartMs: start, Hour: hour}, rest, nil
}

func totalKey(k sink.TotalKey) []byte {
	return appendTotalKey([]byte{prefixTotal}, k)
}

// epochSpace is the prefix of the epoch records of scope: 'e', or 'E'
// esc(scope) for a scope other than "".
func epochSpace(scope string) []byte {
	if scope == "" {
		return []byte{prefixEpoch}
	}
	return appendEsc([]byte{prefixScopedEpoch}, scope)
}

// reverseSpace is epochSpace for the reverse records: 'r', or 'R'
// esc(scope).
func reverseSpace(scope string) []byte {
	if scope == "" {
		return []byte{prefixReverse}
	}
	return appendEsc([]byte{prefixScopedReverse}, scope)
}

func epochPrefix(scope string, epoch int64) []byte {
	return appendInt64(epochSpace(scope), epoch)
}

func epochKey(scope string, epoch int64, k sink.TotalKey) []byte {
	return appendTotalKey(epochPrefix(scope, epoch), k)
}

func reversePrefix(scope string, k sink.TotalKey) []byte {
	return appendTotalKey(reverseSpace(scope), k)
}

func reverseKey(scope string, k sink.TotalKey, epoch int64) []byte {
	return appendInt64(reversePrefix(scope, k), epoch)
}

const (
	flagJobGen = 1 << iota
	flagFast
	flagLate
	flagFinal
	flagExpires
	flagFence
)

// expiry is an item's expires_at (Unix seconds), if it has one. It is kept
// beside the item, not in sink.Item: like DynamoDB's TTL attribute, it is
// the store's business, and no reader of rows sees it.
type expiry struct {
	sec int64
	set bool
}

// encodeItem encodes the attributes of it (not its key), without expiry.
func encodeItem(it *sink.Item) []byte { return encodeRecord(it, expiry{}) }

// encodeRecord encodes the attributes of it and its expiry.
func encodeRecord(it *sink.Item, exp expiry) []byte {
	b := make([]byte, 2, 64)
	b[0] = formatV1
	var flags byte
	if it.HasJobGen {
		flags |= flagJobGen
		b = binary.AppendVarint(b, it.JobGen)
	}
	for i, t := range []*sink.Tagged{&it.Fast, &it.Late} {
		if !t.Present {
			continue
		}
		flags |= flagFast << i
		b = binary.AppendVarint(b, t.Valid)
		b = binary.AppendVarint(b, t.SpendMicros)
		b = binary.AppendVarint(b, t.Ckpt)
		b = binary.AppendVarint(b, t.Gen)
		b = binary.AppendUvarint(b, uint64(len(t.Ix)))
		b = append(b, t.Ix...)
	}
	if it.Final.Present {
		flags |= flagFinal
		b = binary.AppendVarint(b, it.Final.Valid)
		b = binary.AppendVarint(b, it.Final.SpendMicros)
		b = binary.AppendVarint(b, it.Final.Gen)
		b = binary.AppendVarint(b, it.Final.AtMs)
	}
	if exp.set {
		flags |= flagExpires
		b = binary.AppendVarint(b, exp.sec)
	}
	// wf 0 is not written: an item without a fence reads as fence 0.
	if it.Fence != 0 {
		flags |= flagFence
		b = binary.AppendVarint(b, it.Fence)
	}
	b[1] = flags
	return b
}

// varintReader reads consecutive varints and remembers the first error.
type varintReader struct {
	b   []byte
	err error
}

func (r *varintReader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *varintReader) str() string {
	if r.err != nil {
		return ""
	}
	l, n := binary.Uvarint(r.b)
	if n <= 0 || uint64(len(r.b)-n) < l {
		r.err = errCorrupt
		return ""
	}
	s := string(r.b[n : n+int(l)])
	r.b = r.b[n+int(l):]
	return s
}

// decodeItem decodes the attributes written by encodeRecord into an item
// with key k, leaving the expiry out.
func decodeItem(k sink.Key, v []byte) (sink.Item, error) {
	it, _, err := decodeRecord(k, v)
	return it, err
}

// decodeRecord decodes the attributes and the expiry written by
// encodeRecord into an item with key k.
func decodeRecord(k sink.Key, v []byte) (sink.Item, expiry, error) {
	it := sink.Item{Key: k}
	var exp expiry
	if len(v) < 2 || v[0] != formatV1 || v[1]&^(flagFence<<1-1) != 0 {
		return it, exp, fmt.Errorf("embedded: item %q/%q: %w", k.Entity, k.Bucket, errCorrupt)
	}
	flags := v[1]
	r := varintReader{b: v[2:]}
	if flags&flagJobGen != 0 {
		it.HasJobGen = true
		it.JobGen = r.int()
	}
	for i, t := range []*sink.Tagged{&it.Fast, &it.Late} {
		if flags&(flagFast<<i) == 0 {
			continue
		}
		t.Present = true
		t.Valid = r.int()
		t.SpendMicros = r.int()
		t.Ckpt = r.int()
		t.Gen = r.int()
		t.Ix = r.str()
	}
	if flags&flagFinal != 0 {
		it.Final.Present = true
		it.Final.Valid = r.int()
		it.Final.SpendMicros = r.int()
		it.Final.Gen = r.int()
		it.Final.AtMs = r.int()
	}
	if flags&flagExpires != 0 {
		exp = expiry{sec: r.int(), set: true}
	}
	if flags&flagFence != 0 {
		it.Fence = r.int()
	}
	if r.err != nil || len(r.b) != 0 {
		return it, exp, fmt.Errorf("embedded: item %q/%q: %w", k.Entity, k.Bucket, errCorrupt)
	}
	return it, exp, nil
}

func encodeTotal(t sink.Total) []byte {
	b := make([]byte, 1, 24)
	b[0] = formatV1
	b = binary.AppendVarint(b, t.Valid)
	b = binary.AppendVarint(b, t.SpendMicros)
	return binary.AppendVarint(b, t.Epoch)
}

func decodeTotal(k sink.TotalKey, v []byte) (sink.Total, error) {
	t := sink.Total{Ad: k.Ad, StartMs: k.StartMs, Hour: k.Hour}
	if len(v) < 1 || v[0] != formatV1 {
		return t, fmt.Errorf("embedded: total %q: %w", k.Ad, errCorrupt)
	}
	r := varintReader{b: v[1:]}
	t.Valid = r.int()
	t.SpendMicros = r.int()
	t.Epoch = r.int()
	if r.err != nil || len(r.b) != 0 {
		return t, fmt.Errorf("embedded: total %q: %w", k.Ad, errCorrupt)
	}
	return t, nil
}
