package backend

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// A Store holds the state of limiters: in this process (the default) or in a
// shared backend such as Redis so that several replicas enforce one limit.
type Store interface {
	// Limiter returns the limiter that evaluates policy p. It is called when
	// a policy is installed; the store may keep state per policy name.
	Limiter(p *limits.Policy) (Limiter, error)
}

// A Limiter evaluates one policy's algorithm over many partitions, each
// named by a key. Every method receives the partition's Limit, so plans can
// give tenants different limits, and the controller's current instant: an
// in-memory limiter uses it, a shared store may use its own clock instead.
//
// The key and the Limit are only valid during the call (the Limit must not
// be modified): an implementation that keeps either must copy it.
type Limiter interface {
	// Acquire takes n permits from the partition if they fit, and writes
	// its answer into g (the whole Grant: the controller reuses it, and an
	// answer written in place costs no copy on the request path). It never
	// takes part of n. The controller passes n in [0, limits.MaxAmount]. The error
	// is non-nil only when the store failed.
	Acquire(ctx context.Context, key string, l *limits.Limit, n int64, now time.Time, g *Grant) error
	// Adjust changes what a grant holds by delta: a positive delta charges
	// an overrun, a negative one refunds an over-estimate. It updates
	// g.Taken. The controller passes delta in [-limits.MaxAmount, limits.MaxAmount], and
	// the result respects the debt bound whatever delta is: a token
	// bucket's level stays within [-capacity, capacity] (a bucket may go
	// into debt, by its capacity at most), and the count of a fixed or
	// sliding window's current window, a sliding log's total and a quota's
	// use within [0, Amount]. The part of a charge beyond the bound is
	// forgiven; a refund never takes a count below zero. A count is
	// changed by delta only, never clamped down to l: l is the limit the
	// grant was taken under, and a count above it (let through by a limit
	// a reload raised since) counts admissions that happened. So no
	// retry-after exceeds the policy's horizon (see the package
	// documentation).
	Adjust(ctx context.Context, key string, l *limits.Limit, g *Grant, delta int64, now time.Time) error
	// Release gives back what a concurrency grant holds. It is a no-op for
	// rate algorithms, and for a grant already released or expired.
	Release(ctx context.Context, key string, l *limits.Limit, g *Grant, now time.Time) error
}

// A Renewer is a Limiter that can extend concurrency leases, an optional
// interface (as driver.Pinger is to a database/sql driver's Conn): a
// store's limiters implement it when the store can renew, and
// Ticket.Renew uses it to keep a long-running request's permits.
type Renewer interface {
	// Renew extends the lease of the concurrency grant g to now plus
	// l.MaxHold (a shared store reads its own clock), if the lease is still
	// held. A lease whose expiry has passed is not renewed, but reclaimed:
	// Renew then clears g.Stamp. It sets g.Expired to the number of the
	// partition's leases reclaimed during the call (g's included) and
	// g.Remaining to what the partition has left. It never shortens a
	// lease, and is a no-op for rate algorithms and a grant without a
	// lease. The error is non-nil only when the store failed.
	Renew(ctx context.Context, key string, l *limits.Limit, g *Grant, now time.Time) error
}

// A Peeker is a Limiter that can read what a partition has left without
// changing anything, an optional interface (as Renewer is): the
// controller's Remaining uses it to answer "how much does this caller have
// left" with no admission. A store whose limiters do not implement it
// cannot be read without writing; Remaining then reports the partition as
// full, with an error matching errors.ErrUnsupported.
type Peeker interface {
	// Peek writes into g the Limit, Remaining and Reset an Acquire of
	// zero permits at now would report for the partition of key under l,
	// and its Stamp (the window or period the figures are of), the other
	// fields zero. It only reads: it creates no partition (one that does
	// not exist reads as new, so full), and refills, rolls, reclaims,
	// extends and touches nothing, not even what an idle sweep or an
	// expiry goes by. A shared store reads its own clock, as Acquire
	// does. The error is non-nil only when the store failed.
	Peek(ctx context.Context, key string, l *limits.Limit, now time.Time, g *Grant) error
}

// A Forgetter is a Limiter that counts the leases its process holds
// without asking its store (a shared store's in-flight figure), an
// optional interface: Forget tells it that the process holds the lease
// of the concurrency grant g no more although it was not released (its
// ticket was dropped unsettled, or its lease expired unrenewed), so that
// the figure stops counting it. It makes no call, changes nothing in the
// store, and is a no-op for a grant without a lease. The controller never
// releases a grant it has forgotten.
type Forgetter interface {
	Forget(g *Grant)
}

// A Grant is a limiter's answer to Acquire.
type Grant struct {
	// OK reports whether the permits were taken.
	OK bool
	// Overflow reports that the grant came from the policy's shared
	// overflow partition because its partition table was full.
	Overflow bool
	// Full reports a refusal because the partition table was full and the
	// policy rejects overflow (ReasonOverflow).
	Full bool
	// Expired counts concurrency leases that had passed their MaxHold and
	// were reclaimed during this call.
	Expired int32
	// Taken is how many permits the grant holds.
	Taken int64
	// Limit, Remaining and Reset are the partition's figures after the call.
	Limit     int64
	Remaining int64
	Reset     time.Duration
	// RetryAfter is how long until the request would fit, when !OK; Never
	// when it never can (limits.Never).
	RetryAfter time.Duration
	// Stamp identifies what was taken (the window, instant or lease), so
	// Adjust and Release act on the right state. Its meaning is the store's.
	Stamp int64
}

// An Op is one policy's part of a batched call.
type Op struct {
	Limiter Limiter
	Key     string
	Limit   limits.Limit
	// N is the cost to acquire (AcquireBatch) or the delta to adjust
	// (SettleBatch).
	N int64
	// Shadow ops never fail a batch: they take permits when they fit and
	// report !OK when not.
	Shadow bool
	// Release asks SettleBatch to release a concurrency grant.
	Release bool
	// Grant is the result of AcquireBatch, and what SettleBatch acts on.
	Grant Grant
	// Err is set by SettleBatch when this op failed.
	Err error
}

// A Batcher is a Store that can evaluate several of its limiters in one
// round trip. The controller uses it when a request matches two or more
// policies on the same store.
type Batcher interface {
	// AcquireBatch acquires every op atomically: if any enforcing op does
	// not fit, nothing is taken for any op and each op's Grant reports its
	// own answer. The error is non-nil only when the store failed. (A
	// store that takes a batch in parts and could not give a part's
	// concurrency lease back leaves it in its op's Grant, Stamp and
	// Taken set, for the caller's rollback to release.)
	AcquireBatch(ctx context.Context, ops []Op, now time.Time) error
	// SettleBatch adjusts (by N) and releases the grants of ops.
	SettleBatch(ctx context.Context, ops []Op, now time.Time) error
}

// A RenewBatcher is a Store that can renew the concurrency leases of many
// grants, of any of its limiters, in one round trip, an optional
// interface: the controller's lease keeper uses it to renew every lease
// due on the store at once rather than one call per lease.
type RenewBatcher interface {
	// RenewBatch renews the lease of each op's Grant as Renewer.Renew
	// does (Key, Limit and Grant are read, Grant updated), in one round
	// trip per bounded batch of ops. An op that failed gets its Err set;
	// the error is non-nil when any did.
	RenewBatch(ctx context.Context, ops []Op, now time.Time) error
}

// A Call reports one call a shared store made to its backend (a Redis
// script, say), for latency metrics.
type Call struct {
	// Store is the store's name.
	Store string
	// Op names the call: "acquire", "batch", "settle", "renew" or
	// "ratio" (the provider's learned accounting) for the Redis store.
	Op string
	// Policies is the number of policies the call evaluated.
	Policies int
	// Duration is the call's latency; zero when the call was refused
	// without reaching the backend (an open circuit breaker).
	Duration time.Duration
	// Err is the call's error, nil on success. Never shown to clients.
	Err error
	// Context is the context the call was made with (the request's, for
	// the calls of an admission), so that an observer gives a latency
	// histogram's exemplar the request's trace; nil when the store has
	// none. It is valid only during the observer's call: an observer
	// must not keep it.
	Context context.Context
}

// A CallObserver is an observer that also wants the latency of every call a
// store makes: stores that talk to a backend report to the observer they
// are given when it implements this interface. It is called on the request
// path and must be cheap.
type CallObserver interface {
	StoreCall(Call)
}

// KeySeparator separates the fields of a composite partition key (such as
// tenant and model) in the keys a Limiter receives. Stores that derive
// something from the first field, as a Cluster hash tag, split on it.
const KeySeparator = 0x1f

// An Inspector is a Limiter that can describe its partitions, an optional
// interface: a store whose state is in this process implements it, and the
// controller's Stats and eviction reports use it. A shared store, whose
// partitions live elsewhere, may implement it from what this process
// knows, without a call (the Redis store reports the leases this replica
// holds); reading must never write.
type Inspector interface {
	// Stats walks the partitions evaluated with l at now: how many there
	// are, how many are near their limit and the cost in flight
	// (concurrency). It only reads: it changes no partition (it refills,
	// rolls and reclaims nothing), so that a walk at any moment, with the
	// policy's own limit whatever the partitions' plans, changes no
	// decision. A lease past its expiry counts as not held.
	Stats(l *limits.Limit, now time.Time) Stats
	// OnEvict registers f, called after each sweep of the table that
	// evicts idle partitions with their number and the number of expired
	// concurrency leases they still held (reclaimed with them).
	OnEvict(f func(partitions, leases int))
}

// A Waker is a Limiter whose partitions may gain room from outside the
// controller's sight (a provider's report that its budget refilled): it
// tells the controller, which then serves the partition's queue at once
// rather than at the retry-after of the waiter at its head.
type Waker interface {
	// OnWake registers f, called with a partition's key after it may
	// have gained room; f must be called with no lock of the limiter
	// held, as it may evaluate the partition again.
	OnWake(f func(key string))
}

// Stats describes a limiter's partitions (see Inspector).
type Stats struct {
	// Partitions is the number of partitions in the table.
	Partitions int
	// NearLimit counts partitions that have used 80% of their limit.
	NearLimit int
	// InFlight is the cost held by concurrency leases not yet expired.
	InFlight int64
	// Evicted counts the partitions evicted since the limiter was created.
	Evicted uint64
}

// BucketFigures sets the Remaining and Reset of a token-bucket grant whose
// partition holds available permits after the call, and its RetryAfter
// when !g.OK (n permits did not fit), as the in-memory limiter computes
// them. Stores that keep token buckets elsewhere use it so that their
// figures are the in-memory limiter's.
func BucketFigures(l *limits.Limit, n int64, available float64, g *Grant) {
	perNs, nsPer := l.Rates()
	capacity := l.Capacity()
	switch {
	case g.OK:
	case n > capacity:
		g.RetryAfter = limits.Never
	default:
		// Division, not multiplication by nsPer, keeps the retry exact.
		g.RetryAfter = limits.CeilDuration((float64(n) - available) / perNs)
	}
	g.Remaining = 0
	if available > 0 {
		g.Remaining = int64(available)
	}
	g.Reset = limits.CeilDuration((float64(capacity) - available) * nsPer)
}
