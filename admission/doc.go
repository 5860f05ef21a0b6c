// Package admission decides whether a piece of metered work may start now,
// later, or not at all.
//
// A Controller holds a set of policies. Each Policy is one limit: which
// requests it matches, how it groups them into partitions (per tenant, per
// API key, per client address or /64, globally, or by a composite such as
// tenant and model), what it counts (requests, tokens, cost or any named
// unit), with which algorithm, whether excess work may wait in a queue, and
// whether it is enforced. Admit evaluates every matching policy for a
// Request and returns a Ticket, or a *Rejection that says which policy
// refused, why, and when to retry.
//
//	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
//		Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant},
//		Unit: limits.UnitTokens, Algorithm: limits.TokenBucket,
//		Limit: 100_000, Per: time.Minute,
//	}}})
//	...
//	t, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: estimate})
//	if err != nil {
//		// errors.Is(err, admission.ErrRateLimited), ... → 429 with the
//		// rejection's RetryAfter and Status.
//	}
//	defer t.Settle(admission.Usage{Tokens: actual})
//
// # Which package to open
//
//   - Service authors: this package (New, Admit or Begin, Ticket, Rejection)
//     and admission/limits, the vocabulary of policies and plans as plain
//     data (Policy, Mode, Algorithm, KeyPart, Unit, Plans). Config and Policy
//     here are aliases of limits' types.
//   - Backend authors: admission/backend, the contract a store implements
//     (Store, Limiter, Grant, optional Batcher, Renewer and Inspector), and
//     admission/backend/backendtest, the conformance suite it must pass.
//     admission/memstore (the default, in this process) and
//     admission/redisstore (shared by a fleet) are its two implementations.
//   - HTTP services: admission/httpadmit (net/http) and admission/echoadmit
//     (echo) decide, render 429s and settle; admission/config reads the
//     policy file.
//   - Gateway embedders: examples/llmproxy/gateway, the OpenAI-compatible
//     gateway llmproxy runs.
//   - Operators: package metrics and package shadow observe the controller;
//     cmd/admitctl checks policy files and replays request logs.
//
// # Weighted permits and reconciliation
//
// Every algorithm is weighted: a request of cost N takes N permits at once or
// none. For units other than requests the cost is an estimate made before
// the work starts (for an LLM call: prompt tokens plus the output
// reservation). Settling the ticket reconciles it with the actual usage: an
// over-estimate is refunded, an overrun is charged, which may put a token
// bucket into debt that later requests wait out. Long work can be charged as
// it goes with Ticket.Charge. A ticket that is never settled keeps its rate
// charge at the estimate and releases its concurrency permits after the
// policy's MaxHold.
//
// # Staged admission: refuse before reading the body
//
// Estimating a request's cost means reading and parsing its body, which is
// work a caller over its request rate should not get for free. Begin
// evaluates only the policies that need nothing from the body: those that
// count UnitRequests, match no model (Match.Models empty), have no
// KeyModel in their Key and no queue. Request rates, request quotas and
// caps on requests in flight are such policies, so a throttled or
// saturated tenant is refused before a byte of its body is read. Continue then evaluates
// every other policy for the full request (its model and estimates),
// waiting in queues if need be:
//
//	t, err := ctl.Begin(ctx, admission.Request{Tenant: tenant, Operation: route})
//	if err != nil {
//		// 429 with err's figures; the body is never read.
//	}
//	defer t.Done() // settles whatever the ticket holds
//	... read and parse the body, within a bound ...
//	err = t.Continue(ctx, admission.Request{Tenant: tenant, Operation: route, Model: model, Tokens: estimate})
//
// The two stages are one admission: a rejection by Continue gives back
// what Begin took (the ticket is then inert, as after a rejected Admit),
// and every policy reports its admitted decision once the request's fate
// is known, at Continue, or at Settle for a ticket never continued (a body
// found invalid, say), so metrics count each request once. Decisions made
// at Begin (a shadow policy's would-reject, a refusal) are reported at
// once, with the request Begin was given. Begin then Continue decides,
// charges and reports exactly what Admit would on the same traffic: Admit
// evaluates the same policies first.
//
// # Long-running work: renewing leases
//
// A concurrency permit is a lease that expires after the policy's MaxHold
// (limits.DefaultMaxHold, 30s, by default), so a crashed process cannot
// hold permits for ever. A permit is held exactly while its work is
// alive: the Controller's lease keeper renews the leases of every live
// ticket (admitted, not yet settled) every third of MaxHold, whatever the
// work or its client does, so work that outlives MaxHold (a long stream, a
// stream whose client stopped reading) keeps its permits until it is
// settled; a release the store failed is retried until it lands or the
// lease expires. The keeper holds tickets weakly: one dropped without
// being settled is renewed no more once the garbage collector finds it,
// and its permits return MaxHold later. Controller.Close stops the keeper
// (as a crash would). The keeper is in the controller rather than in each
// service (a gateway's stream loop, an HTTP middleware) so that every
// service gets it without code of its own, and so that a lease follows the
// life of the process doing the work, not the progress of its client; a
// ticket holding a lease costs its admission and settlement a lock and a
// map operation in one of 16 shards, and no allocation.
//
// Ticket.Renew renews a ticket's leases at once (a store call only once
// half of MaxHold has passed since the lease was taken or last renewed),
// for a controller whose keeper is closed; it returns ErrLeaseExpired
// when a lease was lost (found by Renew or by the keeper), so the caller
// can stop work that is no longer counted. A ticket that is renewed no
// more loses its permits MaxHold after its last renewal, and the expiry
// is reported to the observer. A Store whose limiters implement Renewer
// can renew (the in-memory and Redis stores do); with one that cannot,
// Renew returns an error wrapping errors.ErrUnsupported, and the keeper
// leaves its leases to expire.
//
// # Bounded amounts and bounded debt
//
// Every amount is an integer in [0, limits.MaxAmount] (2^50): Admit refuses a
// request with a negative or larger estimate with an error matching
// ErrInvalidCost (a caller's error, not a rejection: nothing is evaluated),
// Validate refuses limits, bursts and plan overrides above it, and Settle
// and Charge clamp usage figures into it (a negative actual refunds what
// was taken, no more; a settlement below what Charge charged refunds
// nothing, as usage so far never decreases). The bound keeps every sum exact, in memory and in
// the Redis store, whose scripts compute in doubles.
//
// Reconciliation never leaves a partition owing more than one horizon of
// its policy, whatever the usage reported: a token bucket's level never
// falls below -Burst, and a window's current count, a sliding log's total
// and a quota's use never exceed the limit; an overrun beyond the bound is
// forgiven. Hence no rejection advises a finite wait beyond the policy's
// horizon: 2·Burst/rate for a token bucket (from the deepest debt to a
// request of the whole burst), Per for a fixed window or sliding log, 2·Per
// for a sliding window counter, and the end of the period for a quota. One
// tenant's absurd usage can lock out its partition (or a global one) for
// that long at most, never for years.
//
// # Algorithms
//
// TokenBucket refills Limit permits every Per, continuously and
// fractionally, up to Burst: smooth rates with a bounded burst. Its
// retry-after for a cost N is exact: the time until N tokens are there. In
// any interval of length d it admits at most Burst + Limit·d/Per.
//
// FixedWindow admits Limit per window of length Per aligned to the Unix
// epoch. It is the cheapest and the easiest to explain ("600 per minute,
// resetting on the minute"), but admits up to twice the limit across a
// window boundary.
//
// SlidingWindow is the sliding window counter: it weighs the previous
// window's count by the part of it still inside the rolling window. It
// admits at most Limit per aligned window; in a rolling window it is exact
// when the previous window's traffic was evenly spread and, in the worst
// case (the whole previous window at its very end), admits up to twice
// Limit.
//
// SlidingLog keeps every admission of the last Per and is exact: at most
// Limit in every rolling window. It costs one entry per admission, so its
// memory per partition is bounded by Limit (Validate caps Limit at one
// million).
//
// Concurrency caps the cost in flight at Limit: permits are held from
// admission until the ticket is settled (or MaxHold passes). A cap shared by
// all tenants is a Concurrency policy keyed by limits.KeyGlobal.
//
// Quota admits Limit per long period: a fixed duration, a calendar day or a
// calendar month in the policy's Location. Its retry-after is the end of the
// period. In memory it is not durable: a restart starts every quota from
// zero; use a shared store for a durable record.
//
// # Waiting
//
// Without a queue every algorithm rejects at once. With Policy.Queue a
// request that does not fit waits, bounded by the queue's size and timeout
// and by the caller's context: a Concurrency policy admits waiters as
// permits are released; a rate policy admits them when its bucket or window
// has room (the queueing meaning of "leaky bucket": a shaper). A rate request
// whose wait would pass the queue timeout or its context's deadline is
// refused at once with its retry-after rather than queued to time out.
// Quotas never queue. Within a partition's queue, waiters are served by
// priority, then round robin across tenants, then oldest (or newest) first
// within a tenant: one tenant's backlog on a shared cap does not delay
// another tenant's single request behind all of it. TryAdmit never waits.
//
// A request waiting in a queue holds no concurrency permit of another
// policy. Before it waits, the concurrency permits the policies decided
// before the queued one gave it (Begin's included) are given back; when
// its turn comes they are taken again with the queued policy's, all or
// none, straight from their limiters (an earlier policy's own queue is
// not waited in again). A waiter whose policy has room while an earlier
// cap is full keeps its place and takes nothing, and tries again at the
// next release in its queue or poll (every 100ms). Its rate charges stay
// taken while it waits: they count work that will run, and are refunded
// if it never does. So one tenant's backlog on its own cap never fills a
// cap it shares with others: with a global cap of 4 and a tenant cap of 2
// with a queue, seven requests of one tenant run two and queue five, and
// another tenant's request is admitted. (A request holds an earlier
// permit from its evaluation to the moment it joins the queue, as one
// that another policy refuses holds it until the rollback: a request
// evaluated in that instant may find the cap full.)
//
// Strict priority lets a busy high class starve the others. Queue.Shares
// instead guarantees priority classes shares of a contended policy (for
// example interactive traffic at least 70%, everything else at least
// 30%): waiting classes are served in proportion to their shares of the
// cost admitted, on a concurrency policy of the permits held, and a class
// with nothing waiting lends its share to the others (see limits.Share).
// A request's class is its Priority, which the caller sets from a trusted
// source (the tenant's plan, the API key, the route), never from a raw
// client header.
//
// A request refused because a rate policy's queue (or the tenant's part
// of it, Queue.PerTenant) is full is told to retry when the policy's rate
// will have served the waiters ahead of it. Once a tenant marks its
// retries (Request.Retry, from an SDK's retry-count header), the queue
// holds a place for each such refusal's retry: the tenant's new requests
// count it as taken, and the retry takes it at its hint ahead of them,
// so a tenant sending more than its share gets later hints that hold
// rather than early ones its own new requests make false. Places take at
// most all but one of the tenant's part (its next new request still waits
// for its turn, so a tenant whose retries are on their way does not lose
// its turns), and a retry joins only within the part. A place is held for
// hints of at most a minute and given up two seconds after its time;
// places are held by tenant, so marking every request a retry only
// reorders the tenant's own. A queue holds places for at most Queue.Size
// tenants, each at most an equal share of them, and forgets a tenant a
// minute after its last place and marked retry.
//
// # Several policies
//
// All matching policies are evaluated: first those Begin would decide
// (request rates and quotas, then request concurrency), then the other
// rate checks, then the other concurrency limits, then the policies that
// may queue (rates, then concurrency). Policies, Stats and a rejection's
// Statuses list them in that order. If an enforcing policy rejects,
// everything already taken from the others is given back: a request is
// admitted by all its policies or charged by none.
//
// TryAdmitAll extends this to several requests decided as one (the
// descriptors of one Envoy rate limit call, each its own partition and
// tenant): each member gets its own answer, and the group is admitted
// whole or charged nothing. On a store that evaluates batches, a group
// whose policies have no queue and count in distinct partitions is one
// store call.
//
// # Shadow mode
//
// A policy in Shadow mode never blocks. It keeps exactly the state it would
// keep if it were enforcing (a request it would reject does not consume its
// permits) and reports a WouldReject decision with the reason and
// retry-after enforcement would give. Its prediction can therefore be
// trusted: flipping it to Enforce (SetConfig keeps the state of a policy
// whose algorithm, unit, key and store are unchanged) rejects exactly what
// it reported. SetAllShadow turns every enforcing policy into a shadow one at
// once, for emergencies. A shadow policy with a queue reports would-reject
// instead of waiting.
//
// # Partitions
//
// Each policy keeps its partitions in a sharded table bounded by
// MaxPartitions. A partition whose state is back to neutral (a full bucket,
// an expired window, nothing in flight) is dropped after IdleTimeout, or at
// once when the table is full. When the table is full of partitions that
// are not neutral, new keys go to one shared overflow partition
// (OverflowShared), are rejected with ReasonOverflow (OverflowReject), or
// take the place of the partition of a sample that loses the least
// (OverflowEvict): memory never grows without bound.
//
// # Plans
//
// Plans give tenants other limits than a policy's own (basic 60 requests a
// minute, premium 600). They can be replaced at run time with SetPlans, one
// tenant at a time with SetTenant; the partitions keep their state.
//
// # Policy sets
//
// What a controller enforces is a PolicySet: the policies with their
// partitions and every tenant's effective limits, compiled once
// (Compile), immutable, installed by one atomic swap (Install, SetConfig).
// A program that derives more than the policies from one configuration
// (the key table saying whose they are, prices, HTTP settings) compiles
// the set with the rest into one value of its own, swaps that value
// whole, and names the set in each Request (Request.Policies): every
// request is then decided, and its ticket settled, by the set of the
// configuration it read, never by the policies of one file and the
// identities of another. A change of one tenant (a tenant directory's
// update) derives a set sharing everything else (WithTenant: one of 64
// shards of the tenants copied), so 100,000 tenants do not make a copy of
// 100,000 per change.
//
// A request waiting in a queue when another set is installed is served
// under the installed set's limits (its policy's and the earlier
// concurrency caps it gave back to wait), when that set keeps the
// policy's partitions: a cap lowered holds for the waiters as for the
// requests arriving, and a cap raised lets them in at the queue's next
// attempt. (A request that named a set never installed keeps its set's.)
// Work already admitted keeps its permits: a cap lowered below what runs
// admits nothing until enough of it has ended.
//
// # Reading what is left
//
// Remaining answers "how much does this caller have left" without an
// admission, as x/time/rate's Tokens does: given a Request (the same
// fields that pick partitions; its amounts are not read), it returns the
// Status of every policy that would evaluate it, with the tenant's plan
// and overrides, as an admission's headers would show it. It only reads
// (backend.Peeker): nothing is taken, created, refilled or reclaimed, no
// idle timer is reset and no decision is observed, so a tenant never seen
// costs nothing and reads full. On Redis each read is one read-only
// script. A policy whose store cannot read without writing reads full,
// with an error matching errors.ErrUnsupported.
//
// # Observing
//
// An Observer receives every decision, settlement, lease expiry, eviction
// and store error; package metrics turns them into OpenTelemetry
// metrics, package shadow into a decision log and rollout reports. Calling
// an observer allocates nothing, and neither does the admitted path.
//
// # Stores
//
// State lives in memory by default (admission/memstore). A store
// registered with WithStore (such as the Redis store in
// admission/redisstore) holds it elsewhere so that several replicas share
// one limit; each policy names its store and what to do when the store
// fails (admit, reject with ReasonStoreUnavailable, or fall back to a local
// limiter sized for one replica). The controller treats every store alike,
// through the contract of admission/backend and its optional interfaces.
//
// # Time
//
// The controller reads its Clock once per decision; the algorithms take the
// instant as a parameter. Tests use admissiontest.Clock, a fake clock.
package admission
