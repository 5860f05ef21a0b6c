// Package redisstore keeps admission limits in Redis, so that every replica
// of a service enforces one fleet-wide limit: with four replicas a
// "100 per minute" policy stays 100 per minute, not 400.
//
// A Store implements backend.Store and backend.Batcher for every
// algorithm of package admission (token bucket, fixed window, sliding
// window counter, sliding log, concurrency leases and long-period quotas),
// on github.com/redis/go-redis/v9: a single node or Sentinel failover
// (*redis.Client), a *redis.ClusterClient or a *redis.Ring. Register it
// with admission.WithStore and name it in the policies' Store field:
//
//	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	store, err := redisstore.New(client, redisstore.Config{})
//	ctl, err := admission.New(cfg, admission.WithStore("redis", store))
//
// The client must honour context deadlines (ContextTimeoutEnabled): the
// store's per-call Timeout is a deadline, and New refuses a client that
// would ignore it.
//
// # Decisions
//
// Every decision is one script call, alone or in a pipeline with the
// concurrent ones (see below): one Lua script reads the partition's
// state, decides and writes it back atomically. The figures
// of a Grant (OK, Taken, Limit, Remaining, Reset, RetryAfter, Expired) mean
// exactly what the in-memory limiter's mean, computed with the same
// formulas in the same floating-point order (the tests replay random
// traffic on both and require equal figures, hostile amounts included).
// The one difference: time has the resolution of Redis TIME
// (microseconds).
//
// Lua numbers are doubles, exact for integers below 2^53. The controller
// passes amounts in [0, limits.MaxAmount] (2^50) and the scripts keep
// the debt bound as memory does (a bucket at most its capacity in debt, a
// count at most at its limit), so every level, count and sum of a level
// and an amount is exact, and key expiries are capped (about 35,000 years)
// so that a huge burst refilling slowly still gets one Redis accepts.
//
// When a request matches several policies on the store, the controller
// calls AcquireBatch and one script evaluates them all, all or nothing: if
// an enforcing policy refuses, nothing is taken anywhere and no rollback
// round trip is needed. Shadow policies in the batch take permits when they
// fit and never fail it, as in memory. The grants of a refused batch hold
// nothing, and the Remaining of those that fit is their partition's as
// the script left it, their permits not taken (what a rollback in memory
// reports). A group of requests decided as one
// (admission.Controller.TryAdmitAll: the descriptors of one Envoy rate
// limit call) is one such batch, provided no two of its requests count in
// one partition (a script reads each partition once, before it takes from
// any): a call of three descriptors is one script call instead of three,
// about half the server's CPU per call at one call in flight
// (envoyrls.BenchmarkDescriptors).
//
// Settling a ticket (refund or charge of a weighted cost, release of a
// concurrency lease) is one script call for all its policies. A settlement
// at the estimate with nothing to release makes no call at all. Releasing
// is idempotent, and an adjustment applies once even when the client
// retries the call after losing its reply: when the settlement also
// releases a lease taken in the same batch, and the lease cannot expire
// before a retry runs, the lease's release marks it applied; otherwise the
// call carries an idempotency key (kept for max(1s, 4×Timeout)). A
// settlement found applied already changes nothing and reports the current
// figures. The keys a settlement of several policies empties (a bucket
// refilled to full, a partition's last lease released) go in one DEL at
// its end rather than one each: the same keys are gone when the script
// returns, and no other call sees the moment between (a script is atomic),
// one Redis command fewer for a request that ends a tenant's activity
// (TestSettleEmptiesKeysInOneCommand).
//
// Renewing a lease (the controller's lease keeper, or
// admission.Ticket.Renew, for work that outlives the policy's MaxHold) is
// one script call on the partition's hash: it
// reclaims the leases that have expired by the server's clock (the one
// renewed among them, if it had: an expired lease is never taken again),
// moves the lease's expiry to the server's time plus MaxHold, and moves
// the key's expiry with it. Renewals use the lease layout described under
// Keys unchanged, so replicas that renew and replicas that do not share
// partitions. The controller renews a live ticket's lease every third to
// half of MaxHold. A replica that crashes stops renewing: its leases
// expire MaxHold after their last renewal. A release that fails (a
// timeout, a paused Redis) is retried by the controller until it lands or
// the lease expires.
//
// Reading what a partition has left (backend.Peeker, for
// admission.Controller.Remaining) is one call of a read-only script per
// algorithm, generated from the same Lua as the acquisitions: it reads the
// partition's keys (hash-tagged as theirs) and TIME, and calls no write
// command, so a key that does not exist reads as a new partition and stays
// absent. Its latency is not reported to the observer, whose operations
// are those of decisions.
//
// The store's limiters implement backend.Inspector from what this replica
// knows, without a call to Redis: the in-flight figure
// (admission_inflight) is the cost of the leases this replica took and
// has not released yet (a release being retried included). The fleet's
// in-flight work is the sum over the replicas.
//
// Concurrent calls bound for the same Redis node (a Cluster master, a Ring
// shard; on a single node, every call) share round trips (group commit):
// decisions, settlements and renewals alike. A node has at most three calls
// or pipelines on their way at once; a call that arrives while three are
// waits for the first to return, and then every call that queued
// meanwhile goes out in one pipeline, sent by a goroutine that lives while
// calls keep queueing. A call arriving when fewer are on their way is
// sent at once, as a single command, on its caller's goroutine: batching
// adds no wait at low concurrency, and a call waits for company at most
// one round trip. Each call stays its own script call inside the
// pipeline, atomic and exact, with its own outcome: a script error fails
// that call only, and each has its own deadlines (Timeout to be sent,
// then Timeout from its sending for its answer, or its context's deadline
// if earlier), at which it returns whether it is still queued or in a
// pipeline on its way: the time a burst spends queued behind a round trip
// is not the server's, and does not eat its answer's time (a pipeline
// runs until the latest deadline of its calls and is not cancelled when
// one caller gives up,
// so a decision that timed out in a pipeline may still have been applied,
// as a single call whose reply is lost may). A queued call whose caller
// gives up leaves the queue and is never sent. Under load this saves most
// of each call's client and server cost: at 64 concurrent callers the
// Redis server spends about half the CPU per decision it spends on one
// call per decision.
//
// Scripts: every call runs one Lua script, generated by the store for
// the exact sequence of the call's algorithms (a token bucket, then a
// concurrency limit, then a quota, say), created once per process and
// sent by its hash (EVALSHA). Each algorithm's Lua is written once, as
// parts (its take and its write-back for decisions, its adjustment or
// release for settlements) that the generator strings together as
// straight-line code: one binary argument and a binary reply, no loops
// over ops, no function tables, no number formatting (but a fixed
// window's increment and key name), and one MGET for every partition kept
// in a single string (buckets, sliding windows, quotas).
// Decisions, batches, settlements and the Envoy rate-limit service's
// calls (which reach the store through the controller) all run scripts of
// this one family; lease renewals run one more script of the same kind. A
// call of more than eight ops is cut into functions of eight within its
// script (Lua allows 200 locals per function), still one atomic call. A
// server that does not have a script (its first call, a
// restart, SCRIPT FLUSH, a Cluster node that never ran it) answers
// NOSCRIPT without running anything, and the store sends the call again
// with the script's source (EVAL), which loads it (the calls of a
// pipeline that met NOSCRIPT go again together, in one more pipeline). The store uses no Redis
// Functions: Redis before 7, and users whose ACL denies FUNCTION and
// FCALL, run the same scripts.
//
// The in-memory store (admission/memstore) and these scripts are two
// implementations of each algorithm, kept equal by tests rather than
// generated from one description. What they share is a few lines of
// arithmetic per algorithm (a refill, a window's weight, a retry); the
// rest of each is its own state layout: Go structs, a ring of log entries
// and a lease map under a shard's lock, allocation-free, against packed
// doubles, sorted sets scored relative to a base second, key expiries and
// batched reads and deletes. A description able to express both would be
// a small language of its own, interpreted (the cost the generated scripts
// remove) or generated into Go (a generator on the in-memory hot path).
// Instead the differential tests replay random and hostile traffic on
// both and require every figure equal (TestSameFiguresAsMemory,
// TestSameFiguresExtreme, TestBatchSameFiguresAsMemory,
// TestControllerSameAsMemory), beside the conformance suite
// (backend/backendtest) and the model-based test (TestModel) that both
// stores run.
//
// # Time
//
// Decisions use the Redis server's clock (TIME inside the script), never
// the replicas': replicas with skewed clocks still share one window. The
// caller's instant is only a hint: fixed and sliding windows are placed by
// the script in the window holding the server's time (a replica whose clock
// is more than 13 days off gets the server's time back and computes the
// window again: one extra round trip). Calendar quotas (day, month) are computed in Go, in the
// Limit's Location, from the caller's clock; the script checks the server's
// time falls in that period, and when it does not (a replica's clock on the
// other side of midnight) it answers with its time and the store computes
// the period again from it: one extra round trip, only near a boundary.
//
// Config.CallerTime makes the scripts use the caller's instant instead of
// TIME. It is for tests that replay fixed instants (the conformance suite
// runs that way); never set it in production.
//
// # Keys
//
// Keys are
//
//	<prefix>{<tag>}:<policy>:<alg>:<partition key>          token bucket, sliding window, quota, concurrency
//	<prefix>{<tag>}:<policy>:fc:<partition key>@<window>    fixed window: one window's count
//	<prefix>{<tag>}:<policy>:<alg>:h:<partition key>        sliding log: a hash
//	<prefix>{<tag>}:<policy>:<alg>:z:<partition key>        ... and a sorted set
//	<prefix>{<tag>}:settle:<random id>                      idempotency of a settlement
//
// where prefix is Config.Prefix ("sluice:" by default), alg is tb, fc, sw,
// sl, cl or q (a policy that changes algorithm starts from fresh state),
// tag is the partition key's first field (see Tag) and window is the
// start of a fixed window, in Unix seconds (followed by a dot and nine
// digits of nanoseconds when it does not start on a whole second).
//
// A fixed window keeps one integer per window, in a key named after the
// window: a decision is one INCRBY of it (and its PEXPIRE, to the
// window's end plus the grace, on the window's first count), where a
// partition kept in one key of the count and its window would be read and
// written again whole. A batch that does not fit gives its increments back
// (DECRBY, and DEL of a count brought to zero); a shadow policy's take that
// does not fit is given back alike; a peek reads the count with GET. The
// caller names the key after the window holding its own instant; the
// script counts there when the server's time is in that window, and
// otherwise names the server's window's key itself from the one given, so
// no replica's clock chooses the window: the name keeps the partition's
// hash tag, so the key is in the slot of the script's declared keys
// (which Redis Cluster allows a script). An acquisition that fits, the common case, costs one
// command instead of a read and a write, and no argument or reply to
// pack. One that does not fit costs an INCRBY and its DECRBY, two writes
// that an append-only file and replicas would receive for every refused
// request of a flood: so a replica remembers the partitions whose last
// take did not fit in the current window (a table of 1,024 fingerprints
// per fixed-window policy, 8 KiB whatever the number of tenants), and
// their next take reads the count first and increments it only when the
// take fits. A flood of refusals then costs one GET each and writes
// nothing (TestFixedWindowRefusalsWriteNothing); a take that fits again
// (another replica refunded) clears the mark. The table only chooses
// between the two ways of taking: the script decides from the count
// either way, so a collision or a stale mark never changes an answer.
// BenchmarkDescriptors and the governed benchmark measure the decisions
// (docs/benchmarks.md). Fixed windows were named fw while a
// partition was one key of packed doubles: replicas of that version and of
// this one keep separate counts during a rolling upgrade.
//
// Token buckets, sliding windows and quotas are one string of packed
// doubles; a sliding log is a
// sorted set of entries, at most one per admitted permit (so at most the
// limit in the window), with a small hash of its sum; concurrency is one
// hash of packed doubles: its sums and one field per lease (expiry and
// cost), scanned only when a lease may have expired. (Concurrency keys were
// named cc while they held decimal text: replicas of that version and of
// this one keep separate partitions during a rolling upgrade.)
//
// The partition figures of a policy on this store (Controller.Stats, so
// admission_partitions and admission_partitions_near_limit) are counted
// in Redis by a read-only SCAN of the policy's keys, at most once per
// Config.StatsEvery and at most Config.StatsKeys keys per count (a lower
// bound when the policy has more): see Stats on the limiter. Every
// replica reports the same fleet-wide figures.
//
// Partitions live in Redis, not in the process: a policy's MaxPartitions,
// Overflow and IdleTimeout do not apply to them. Instead every key expires
// when its state becomes neutral (a full bucket, a window that has passed,
// the last log entry or lease expired, the end of the quota period) plus
// Config.IdleGrace (1s by default), so idle tenants cost nothing. Measured
// with MEMORY USAGE after a flood of 100,000 distinct tenants
// (TestTenantFlood): a token-bucket partition is one key of about 120
// bytes (180 bytes of used_memory), a fixed window's count 104, a
// sliding window 136, a concurrency
// partition with one lease 184, a sliding log with one entry 240 over its
// two keys.
//
// # Cluster
//
// Keys are hash-tagged so that one partition's keys share a slot. The tag
// is the partition key's first field: for policies keyed by tenant (or by
// tenant then model, user, ...) it is the tenant, so all of a request's
// per-tenant policies land in one slot and run in one script. Policies
// whose key starts with another field (a global limit, a per-model limit)
// hash elsewhere; a batch mixing tags is evaluated as one script per tag,
// and when an enforcing policy refuses, what the other scripts took is
// given back in one settle call per tag. A global partition is one key in
// one slot, a hot key by construction: keep global limits coarse. On a
// single node (or Sentinel) every batch is one script whatever the tags.
//
// # When Redis is slow or down
//
// Each call has a deadline for Redis's answer (Config.Timeout, 500ms by
// default, sized so that a healthy Redis under the heaviest burst the
// tests make never misses it: a policy fails open or closed only when
// its store is really failing) and goes through a circuit breaker that
// counts round trips, a pipeline of a burst's calls being one: when
// Config.BreakerFailures (5) of the last twice as many round trips
// failed, the breaker opens and calls fail at once, without touching
// the network, for Config.BreakerCooldown (1s, on the clock WithClock
// sets, the system's by default); then one probe call goes
// through and its success closes the breaker. One slow answer, however
// many calls it carried, does not open it. A decision the open breaker
// refuses allocates nothing: while Redis is down every request comes
// through there at the rate it arrives, and garbage made at that rate
// would bring the collector's pauses onto the decisions still on their
// way. Decisions return to Redis by themselves within the cooldown once
// it answers again.
//
// A failed call is an error from the Limiter; the controller then applies
// the policy's OnStoreError: FailOpenMode admits, FailClosedMode rejects
// with ReasonStoreUnavailable (503 at the HTTP edge), FailLocalMode decides
// with an in-memory limiter whose limit is divided by Policy.Replicas. The
// controller reports each such event, and each failed settlement, to its
// observer (StoreError). The store reports to the observer given with
// WithObserver every call's latency and outcome when the observer
// implements backend.CallObserver (the metrics observer exports it
// as admission_store_duration_seconds), and the breaker's changes when it
// implements BreakerObserver. Leases of a crashed replica
// return when they expire (the policy's MaxHold after they were taken or
// last renewed).
//
// # Durable quotas: Redis persistence
//
// The store is the durable record of long-period quotas (a month of token
// usage). Redis keeps it only if it is configured to:
//
//   - appendonly yes with appendfsync everysec: a crash loses at most about
//     a second of usage (always: none, at a throughput cost). RDB snapshots
//     alone (save 60 1000) lose everything since the last snapshot.
//   - maxmemory-policy noeviction (or volatile-ttl): an LRU or LFU policy may
//     evict a quota key, which forgets the tenant's usage; with noeviction a
//     full Redis fails writes, which the policies' fail modes handle.
//   - Replication is asynchronous: a failover can lose the last writes
//     acknowledged by the old master.
//
// Rate limits (buckets, windows, leases) need none of this: losing them
// briefly lets a little more traffic through. A test-style server started
// with persistence off (no save points, no append-only file) forgets every
// quota on restart.
//
// # Performance
//
// One run of
//
//	go test -run '^$' -bench . -benchmem ./admission/redisstore/
//
// starts a redis-server and compares the store with go-redis/redis_rate
// (GCRA, one EVALSHA per decision) on 10,000 keys. See docs/benchmarks.md
// in the repository for the figures measured.
//
// Where a request's cost goes (the benchmarks' cmds/op, script-µs/op,
// srv-cpu-ns/op and cpu-ns/op, from INFO commandstats, INFO cpu and
// getrusage; redis-server 7.0): a single token bucket is one script of 3
// Redis commands (TIME, GET, SET with its expiry), a fixed window one of
// 2 (TIME, INCRBY) once its window has counted. A request of a tenant's
// requests and tokens buckets and a concurrency limit (BenchmarkRedisAdmit's
// policies=3) is an admission of 7 (TIME, one MGET of both buckets, HGET of
// the partition's sums, SET of each bucket with its expiry, HSET of the
// lease and the sums, PEXPIRE of the partition) and a settlement of 4
// (TIME, HMGET of the sums and the lease, GET of the tokens bucket, one
// DEL of both emptied keys): each is a read the decision needs or a write
// of state that changed, with its expiry. The commands themselves are
// about a quarter of the scripts' time on the server (8.5 of 31µs for the
// three-policy request); the rest is each script's invocation, each
// redis.call's conversion of its arguments and reply, and the Lua between.
// On the client, two thirds to three quarters of the CPU is the round trips'
// system calls and the waking of the goroutines that wait for them, so a
// request making two calls costs the client about twice what one making
// one call does, however the round trips are shared: the three-policy
// request costs 2.3 to 2.6 times a single decision, client and server
// alike, and stays above twice as long as its settlement is a call of its
// own. It is, because a settlement is applied before Ticket.Settle
// returns: the caller's next decision sees it (the figures the tests
// require equal to memory's rely on it, and so does a tenant whose next
// request waits for the lease the last one released).
//
// Two changes that cut commands were weighed and not made. Running the
// calls of a batch in one script invocation (a generated script calling
// each call's code in a protected call, with its own keys, arguments and
// reply) was measured: it saved about 5% of the server's CPU on batches of
// 16 and nothing measurable in the benchmarks, whose batches are smaller,
// the Lua tables and pcall of each call costing about what the saved
// invocations did. A tenant's buckets and leases in one hash would make
// the three-policy request 7 commands instead of 11 (one read and one
// write for all of them, one expiry, and no key created per request when
// another policy's state keeps the hash): scripts running only the two
// layouts' commands (redis-benchmark, 10,000 tenants) put the saving at 5
// to 8µs of the request's 40µs of server CPU, with the client's part
// unchanged, so the request would still cost more than twice a single
// decision; and a single-policy decision would pay a fourth command (its
// expiry no longer rides on its SET), all of a tenant's state would share
// one expiry, and replicas would use different partitions during a
// rolling upgrade.
//
// Operating it (persistence for durable quotas, what each policy does when
// Redis fails, two gateways on one server) is in docs/redis.md in the
// repository.
package redisstore
