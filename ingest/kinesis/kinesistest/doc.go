// Package kinesistest holds test doubles for package kinesis: Fake, an
// in-memory Kinesis that implements kinesis.API (streams, shards, sequence
// numbers, expiring iterators, SplitShard and MergeShards, and enhanced
// fan-out: registered consumers and SubscribeToShard event streams with
// their lifetime, ResourceInUse window, takeover and rate limit), and
// Faulty, a wrapper that injects errors into any kinesis.API (throttling,
// expired iterators, server errors, a subscription in use, failed
// PutRecords entries). Both are ordinary code: a job can run against Fake
// without a server.
package kinesistest
