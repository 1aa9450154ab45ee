// Package kinesistest holds test doubles for package kinesis: Fake, an
// in-memory Kinesis that implements kinesis.API (streams, shards, sequence
// numbers, expiring iterators, SplitShard and MergeShards), and Faulty, a
// wrapper that injects errors into any kinesis.API (throttling, expired
// iterators, server errors, failed PutRecords entries). Both are ordinary
// code: a job can run against Fake without a server.
package kinesistest
