package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Magic is the prefix of every aggregated record.
var Magic = [4]byte{0xF3, 0x89, 0x9A, 0xC2}

const (
	// MagicLen is the length of the magic prefix, DigestLen the length of the
	// MD5 trailer (bytes).
	MagicLen  = 4
	DigestLen = md5.Size

	// ReasonBadChecksum is the reason of an aggregated record whose MD5
	// trailer does not match its body.
	ReasonBadChecksum = "kpl_bad_checksum"
	// ReasonBadBody is the reason of an aggregated record whose body is not
	// a valid AggregatedRecord message (truncated, a required field missing,
	// a table index out of range).
	ReasonBadBody = "kpl_bad_body"
)

// Error is the error Deaggregate returns for a record it cannot split.
// Reason is ReasonBadChecksum or ReasonBadBody; errors.Is matches the
// sentinels ErrBadChecksum and ErrBadBody by reason.
type Error struct {
	Reason string
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "kpl: " + e.Reason
	}
	return "kpl: " + e.Reason + ": " + e.Detail
}

// Is reports whether target is an *Error with the same reason and no
// detail (one of the sentinels).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Detail == "" && t.Reason == e.Reason
}

// Sentinels for errors.Is.
var (
	ErrBadChecksum = &Error{Reason: ReasonBadChecksum}
	ErrBadBody     = &Error{Reason: ReasonBadBody}
)

// Reason returns the exceptions-log reason of err if it is (or wraps) an
// *Error, and "" otherwise.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func badBody(format string, args ...any) *Error {
	return &Error{Reason: ReasonBadBody, Detail: fmt.Sprintf(format, args...)}
}

// IsAggregated reports whether b looks like an aggregated record: it starts
// with Magic and is long enough to hold the digest. A record that is not
// aggregated is a plain user record. It does not check the digest.
func IsAggregated(b []byte) bool {
	return len(b) >= MagicLen+DigestLen && bytes.Equal(b[:MagicLen], Magic[:])
}

// Field numbers of the messages.
const (
	fAggPartitionKeys protowire.Number = 1
	fAggHashKeys      protowire.Number = 2
	fAggRecords       protowire.Number = 3

	fRecPartitionKeyIndex protowire.Number = 1
	fRecHashKeyIndex      protowire.Number = 2
	fRecData              protowire.Number = 3
	fRecTags              protowire.Number = 4

	fTagKey   protowire.Number = 1
	fTagValue protowire.Number = 2
)

// Deaggregate checks an aggregated record and calls fn for each of its user
// records in order: i is the user record's index (its sub-sequence number),
// partitionKey its partition key, data its payload. data aliases b: it must
// not be modified, and stays valid as long as b does.
//
// The digest and the whole body are checked before fn is first called, so a
// bad record calls fn never. n is the number of user records handed to fn.
// A bad record returns an *Error (ErrBadChecksum or ErrBadBody under
// errors.Is); an error from fn stops the walk and is returned as is. An
// aggregated record may hold zero user records (n = 0, err = nil).
// Deaggregate never panics and allocates only the partition keys it hands
// out (one string per distinct key used).
func Deaggregate(b []byte, fn func(i int, partitionKey string, data []byte) error) (n int, err error) {
	if !IsAggregated(b) {
		return 0, badBody("no magic prefix or shorter than %d bytes", MagicLen+DigestLen)
	}
	body := b[MagicLen : len(b)-DigestLen]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], b[len(b)-DigestLen:]) {
		return 0, &Error{Reason: ReasonBadChecksum, Detail: "md5 digest does not match the body"}
	}
	// Pass 1: validate everything and collect the partition key table.
	var spanBuf [16][]byte
	keys := spanBuf[:0]
	var nHash, maxKey, maxHash uint64
	var hasHash bool
	records := 0
	for rest := body; len(rest) > 0; {
		num, typ, m := consumeTag(rest)
		if m < 0 {
			return 0, badBody("aggregated record: tag: %v", protowire.ParseError(m))
		}
		rest = rest[m:]
		switch {
		case num == fAggPartitionKeys && typ == protowire.BytesType:
			var v []byte
			if v, m = protowire.ConsumeBytes(rest); m >= 0 {
				keys = append(keys, v)
			}
		case num == fAggHashKeys && typ == protowire.BytesType:
			_, m = protowire.ConsumeBytes(rest)
			nHash++
		case num == fAggRecords && typ == protowire.BytesType:
			var rec []byte
			if rec, m = protowire.ConsumeBytes(rest); m < 0 {
				break
			}
			r, err := parseRecord(rec, true)
			if err != nil {
				return 0, err
			}
			records++
			maxKey = max(maxKey, r.key)
			if r.hasHash {
				hasHash = true
				maxHash = max(maxHash, r.hash)
			}
		default:
			m = protowire.ConsumeFieldValue(num, typ, rest)
		}
		if m < 0 {
			return 0, badBody("aggregated record: field %d: %v", num, protowire.ParseError(m))
		}
		rest = rest[m:]
	}
	if records > 0 && maxKey >= uint64(len(keys)) {
		return 0, badBody("partition key index %d, table has %d", maxKey, len(keys))
	}
	if hasHash && maxHash >= nHash {
		return 0, badBody("explicit hash key index %d, table has %d", maxHash, nHash)
	}
	// Pass 2: hand out the records; the body is known to be well formed.
	// Each partition key becomes a string once, when first used.
	var strBuf [16]string
	var setBuf [16]bool
	strs, set := strBuf[:], setBuf[:]
	if len(keys) > len(strBuf) {
		strs, set = make([]string, len(keys)), make([]bool, len(keys))
	}
	i := 0
	for rest := body; len(rest) > 0; {
		num, typ, m := consumeTag(rest)
		rest = rest[m:]
		if num != fAggRecords || typ != protowire.BytesType {
			rest = rest[protowire.ConsumeFieldValue(num, typ, rest):]
			continue
		}
		rec, m := protowire.ConsumeBytes(rest)
		rest = rest[m:]
		r, _ := parseRecord(rec, false)
		if !set[r.key] {
			strs[r.key], set[r.key] = string(keys[r.key]), true
		}
		if err := fn(i, strs[r.key], r.data); err != nil {
			return i, err
		}
		i++
	}
	return i, nil
}

type record struct {
	key, hash uint64
	hasHash   bool
	data      []byte
}

// parseRecord reads one Record message. With check set it validates the
// message fully (required fields, nested tags); otherwise it assumes a
// message that has been checked before.
func parseRecord(b []byte, check bool) (record, error) {
	var r record
	var hasKey, hasData bool
	for len(b) > 0 {
		num, typ, m := consumeTag(b)
		if m < 0 {
			return r, badBody("record: tag: %v", protowire.ParseError(m))
		}
		b = b[m:]
		switch {
		case num == fRecPartitionKeyIndex && typ == protowire.VarintType:
			r.key, m = protowire.ConsumeVarint(b)
			hasKey = true
		case num == fRecHashKeyIndex && typ == protowire.VarintType:
			r.hash, m = protowire.ConsumeVarint(b)
			r.hasHash = true
		case num == fRecData && typ == protowire.BytesType:
			r.data, m = protowire.ConsumeBytes(b)
			hasData = true
		case num == fRecTags && typ == protowire.BytesType && check:
			var tag []byte
			tag, m = protowire.ConsumeBytes(b)
			if m >= 0 {
				if err := checkTag(tag); err != nil {
					return r, err
				}
			}
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return r, badBody("record: field %d: %v", num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	if check && !hasKey {
		return r, badBody("record: partition_key_index missing")
	}
	if check && !hasData {
		return r, badBody("record: data missing")
	}
	return r, nil
}

func checkTag(b []byte) error {
	var hasKey bool
	for len(b) > 0 {
		num, typ, m := consumeTag(b)
		if m < 0 {
			return badBody("tag: tag: %v", protowire.ParseError(m))
		}
		b = b[m:]
		if num == fTagKey && typ == protowire.BytesType {
			_, m = protowire.ConsumeBytes(b)
			hasKey = true
		} else {
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return badBody("tag: field %d: %v", num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	if !hasKey {
		return badBody("tag: key missing")
	}
	return nil
}

// consumeTag is protowire.ConsumeTag that also rejects field numbers above
// the protobuf maximum, as the protobuf decoder does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, m := protowire.ConsumeTag(b)
	if m >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -2 // protowire's code for an invalid field number
	}
	return num, typ, m
}
