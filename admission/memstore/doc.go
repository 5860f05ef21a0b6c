// Package memstore is the in-memory limit store, the controller's default:
// one implementation of the contract in package backend, beside the Redis
// store (admission/redisstore).
//
// Each policy's partitions live in a table of 64 shards, each under its own
// mutex, bounded by the policy's MaxPartitions: a partition back to neutral
// (a full bucket, an expired window, nothing in flight) is evicted after
// the policy's IdleTimeout, or at once when the table is full, judged by
// its own limit (a tenant's plan, not the caller's). When the table is full
// of partitions that are not neutral, new keys share one overflow
// partition, are refused, or evict the partition of a sample that loses
// the least, as the policy says. Concurrency permits are leases that
// expire after MaxHold. The state does not survive a restart and is not
// shared between replicas.
package memstore
