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
// different keys is their partitions'. With a Go map under one mutex per
// shard, each decision also wrote its shard's lock: two cores admitting
// and settling over 10,000 keys took 1.26 to 1.37 times the wall time of
// x/time/rate limiters in a map under one mutex (BenchmarkAdmit and its
// peer in package admission with rate.Inf limiters, now its unlimited
// variant; medians of 25 to 30 runs on 2 cores),
// against 1.05 to 1.12 now; one core, 1.73 to 1.78 times against 1.60 to
// 1.62 (the map's own hash, which the table saves, cost what the table's
// probing does). The table costs 12 bytes more per partition (134.9
// against 123.0 with a million of them). A partition back to neutral
// (a full bucket, an expired window, nothing in flight) is evicted after
// the policy's IdleTimeout, or at once when the table is full, judged by
// its own limit (a tenant's plan, not the caller's). When the table is full
// of partitions that are not neutral, new keys share one overflow
// partition, are refused, or evict the partition of a sample that loses
// the least, as the policy says. Concurrency permits are leases that
// expire after MaxHold. The state does not survive a restart and is not
// shared between replicas.
package memstore
