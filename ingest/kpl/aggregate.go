package kpl

import (
	"crypto/md5"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

const (
	// DefaultMaxBytes is the default size limit of an aggregated record
	// (the KPL's default AggregationMaxSize), bytes.
	DefaultMaxBytes = 51_200
	// MaxRecordBytes is the largest aggregated record an Aggregator builds:
	// a Kinesis record's 1 MiB limit on data plus partition key, less room
	// for a 256-byte partition key.
	MaxRecordBytes = 1<<20 - 256
)

// Aggregated is one aggregated record built by an Aggregator.
type Aggregated struct {
	// PartitionKey and ExplicitHashKey are those of the first user record;
	// put the aggregated record with them so it lands on that record's
	// shard.
	PartitionKey    string
	ExplicitHashKey string
	// Data is the aggregated record: magic, body, MD5 digest.
	Data []byte
	// Records is the number of user records it holds.
	Records int
}

type pending struct {
	key, hash uint64
	hasHash   bool
	data      []byte
}

// Aggregator packs user records into aggregated records of at most a size
// limit. The caller is responsible for adding only records that belong to
// the same shard to one Aggregator (for example, records with the same
// explicit hash key). Not safe for concurrent use.
type Aggregator struct {
	max     int
	keys    map[string]uint64
	keyList []string
	hashes  map[string]uint64
	hList   []string
	recs    []pending
	body    int // encoded body size, bytes
}

// NewAggregator returns an Aggregator whose records are at most maxBytes
// long (magic and digest included). maxBytes ≤ 0 means DefaultMaxBytes;
// values above MaxRecordBytes are lowered to it.
func NewAggregator(maxBytes int) *Aggregator {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	maxBytes = min(maxBytes, MaxRecordBytes)
	return &Aggregator{max: maxBytes, keys: map[string]uint64{}, hashes: map[string]uint64{}}
}

// Len returns the number of user records waiting in the aggregator.
func (a *Aggregator) Len() int { return len(a.recs) }

// Size returns the length in bytes of the record Flush would return now
// (0 when empty).
func (a *Aggregator) Size() int {
	if len(a.recs) == 0 {
		return 0
	}
	return MagicLen + a.body + DigestLen
}

// grow returns the body growth from adding a record.
func (a *Aggregator) grow(partitionKey, explicitHashKey string, data []byte) int {
	n := 0
	ki, ok := a.keys[partitionKey]
	if !ok {
		ki = uint64(len(a.keyList))
		n += protowire.SizeTag(fAggPartitionKeys) + protowire.SizeBytes(len(partitionKey))
	}
	m := protowire.SizeTag(fRecPartitionKeyIndex) + protowire.SizeVarint(ki) +
		protowire.SizeTag(fRecData) + protowire.SizeBytes(len(data))
	if explicitHashKey != "" {
		hi, ok := a.hashes[explicitHashKey]
		if !ok {
			hi = uint64(len(a.hList))
			n += protowire.SizeTag(fAggHashKeys) + protowire.SizeBytes(len(explicitHashKey))
		}
		m += protowire.SizeTag(fRecHashKeyIndex) + protowire.SizeVarint(hi)
	}
	return n + protowire.SizeTag(fAggRecords) + protowire.SizeBytes(m)
}

// Add adds a user record (explicitHashKey may be empty). If the record does
// not fit into the current aggregated record, that record is completed and
// returned (full), and the new record starts the next one; otherwise full
// is nil. A record too big to fit even alone into MaxRecordBytes is an
// error. data is retained until the record that holds it is returned: do
// not modify it before then.
func (a *Aggregator) Add(partitionKey, explicitHashKey string, data []byte) (full *Aggregated, err error) {
	if partitionKey == "" {
		return nil, fmt.Errorf("kpl: aggregate: empty partition key")
	}
	g := a.grow(partitionKey, explicitHashKey, data)
	if len(a.recs) > 0 && MagicLen+a.body+g+DigestLen > a.max {
		full = a.Flush()
		g = a.grow(partitionKey, explicitHashKey, data)
	}
	if MagicLen+g+DigestLen > MaxRecordBytes {
		return full, fmt.Errorf("kpl: aggregate: user record of %d bytes does not fit into one Kinesis record", len(data))
	}
	ki, ok := a.keys[partitionKey]
	if !ok {
		ki = uint64(len(a.keyList))
		a.keys[partitionKey] = ki
		a.keyList = append(a.keyList, partitionKey)
	}
	p := pending{key: ki, data: data}
	if explicitHashKey != "" {
		hi, ok := a.hashes[explicitHashKey]
		if !ok {
			hi = uint64(len(a.hList))
			a.hashes[explicitHashKey] = hi
			a.hList = append(a.hList, explicitHashKey)
		}
		p.hash, p.hasHash = hi, true
	}
	a.recs = append(a.recs, p)
	a.body += g
	return full, nil
}

// Flush completes and returns the current aggregated record and empties
// the aggregator; nil when it is empty.
func (a *Aggregator) Flush() *Aggregated {
	if len(a.recs) == 0 {
		return nil
	}
	out := make([]byte, 0, MagicLen+a.body+DigestLen)
	out = append(out, Magic[:]...)
	for _, k := range a.keyList {
		out = protowire.AppendTag(out, fAggPartitionKeys, protowire.BytesType)
		out = protowire.AppendString(out, k)
	}
	for _, h := range a.hList {
		out = protowire.AppendTag(out, fAggHashKeys, protowire.BytesType)
		out = protowire.AppendString(out, h)
	}
	for _, r := range a.recs {
		m := protowire.SizeTag(fRecPartitionKeyIndex) + protowire.SizeVarint(r.key) +
			protowire.SizeTag(fRecData) + protowire.SizeBytes(len(r.data))
		if r.hasHash {
			m += protowire.SizeTag(fRecHashKeyIndex) + protowire.SizeVarint(r.hash)
		}
		out = protowire.AppendTag(out, fAggRecords, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(m))
		out = protowire.AppendTag(out, fRecPartitionKeyIndex, protowire.VarintType)
		out = protowire.AppendVarint(out, r.key)
		if r.hasHash {
			out = protowire.AppendTag(out, fRecHashKeyIndex, protowire.VarintType)
			out = protowire.AppendVarint(out, r.hash)
		}
		out = protowire.AppendTag(out, fRecData, protowire.BytesType)
		out = protowire.AppendBytes(out, r.data)
	}
	sum := md5.Sum(out[MagicLen:])
	out = append(out, sum[:]...)
	agg := &Aggregated{PartitionKey: a.keyList[a.recs[0].key], Data: out, Records: len(a.recs)}
	if a.recs[0].hasHash {
		agg.ExplicitHashKey = a.hList[a.recs[0].hash]
	}
	clear(a.keys)
	clear(a.hashes)
	a.keyList, a.hList = a.keyList[:0], a.hList[:0]
	clear(a.recs)
	a.recs = a.recs[:0]
	a.body = 0
	return agg
}
