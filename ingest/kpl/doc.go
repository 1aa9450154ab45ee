// Package kpl reads and writes the Kinesis Producer Library's aggregated
// record format, in which one Kinesis record carries many user records.
//
// An aggregated record is the 4-byte magic 0xF3 0x89 0x9A 0xC2, a protobuf
// AggregatedRecord message (proto2), and the 16-byte MD5 digest of that
// message:
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4;
//	}
//	message Tag {
//	  required string key   = 1;
//	  optional string value = 2;
//	}
//
// Deaggregate checks the digest and the whole message before it hands out
// the first user record, so a record is either split completely or
// rejected with an *Error whose Reason (ReasonBadChecksum, ReasonBadBody)
// goes to the exceptions log as "invalid:<reason>". The user record at
// index i has sub-sequence number i, which lets a reader resume inside an
// aggregated record. Aggregator builds aggregated records (for producers
// and test vectors).
//
// The package is pure: no I/O, no goroutines, no clock, no AWS imports.
// Decoding uses google.golang.org/protobuf/encoding/protowire and does not
// allocate per user record.
package kpl
