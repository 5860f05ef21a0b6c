// Package memstore is the in-memory limit store, the controller's default:
// one implementation of the contract in package backend, beside the Redis
// store (admission/redisstore).
//
// Each policy's partitions live in a table of 64 shards, bounded by the
// policy's MaxPartitions. A key is hashed once, with the table's own
// secret seed: the hash picks the shard and the key's slot in the shard's
// open-addressing table. An acquisition takes no shard lock, only its
// partition's own: a lookup reads the table atomically and confirms the
// partition under its lock, and only adding or dropping partitions locks
// a shard. So the only memory two cores write when they decide for
// different keys is their partitions': with the table's Go map under one
// mutex per shard, each decision also wrote its shard's lock, and two
// cores deciding in parallel took 1.3 times the wall time of one mutex
// and map of x/time/rate limiters, against 1.0 now (BenchmarkAdmit, 10,000
// keys, in the package admission). A partition back to neutral
// (a full bucket, an expired window, nothing in flight) is evicted after
// the policy's IdleTimeout, or at once when the table is full, judged by
// its own limit (a tenant's plan, not the caller's). When the table is full
// of partitions that are not neutral, new keys share one overflow
// partition, are refused, or evict the partition of a sample that loses
// the least, as the policy says. Concurrency permits are leases that
// expire after MaxHold. The state does not survive a restart and is not
// shared between replicas.
package memstore
