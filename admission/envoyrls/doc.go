// Package envoyrls serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) with a
// Sluice admission controller, so that every proxy built on Envoy (Envoy
// Gateway, Istio, Contour, Gloo, kgateway, Envoy AI Gateway) can delegate
// its global limits to Sluice without code on its side. The binary
// cmd/sluice-rls wraps it; a team can also register a Server on its own
// grpc.Server.
//
// # Configuration: envoyproxy/ratelimit's files, as they are
//
// rlsconfig.Load reads envoyproxy/ratelimit's YAML (a file, or a directory of
// *.yaml files as that service's runtime directory): domain, nested
// descriptors with key and optional value (a trailing * matches a value
// prefix), rate_limit {unit, requests_per_unit, unlimited, name,
// replaces}, shadow_mode and detailed_metric. They behave as that service
// documents: a fixed window per unit (second, minute, hour, day, week)
// aligned to the Unix epoch; the most specific match at each level
// (key and value, then the longest value prefix, then the key alone); a
// request descriptor matches the rule at the level of its last entry
// only; each distinct value of an entry configured without a value (or
// with a prefix) has its own limit; requests_per_unit 0 refuses
// everything; unlimited answers OK with limit_remaining 4294967295; a
// limit replaced by another matched limit is neither evaluated nor
// charged; shadow_mode answers OK. detailed_metric is accepted and has no
// effect: Sluice's metrics are bounded (per policy, with a top-K of
// tenants), never per descriptor value.
//
// Decoding is strict: an unknown key, a duplicate key or descriptor, a
// missing unit, a replaces naming no limit are errors naming the file,
// the domain and the path, all reported at once.
//
// Sluice's extensions, all optional, so that a file written for
// envoyproxy/ratelimit needs none:
//
//	domain: llm
//	unknown: ok              # answer for descriptors no rule matches: ok (default) or over_limit
//	algorithm: token_bucket  # fixed_window (default), sliding_window, sliding_log or token_bucket
//	store: redis             # the store every limit of the domain lives in (default: memory,
//	                         # or the server's WithDefaultStore: sluice-rls -redis makes it redis)
//	on_store_error: closed   # open (default), closed or local
//	replicas: 3              # local: each replica's in-memory limit is the limit / replicas
//	max_partitions: 100000   # partitions each limit keeps in memory (default 100,000)
//	descriptors:
//	  - key: tenant
//	    tenant: true         # this entry's value is the tenant: fair queueing, metrics
//	                         # (fill it from a validated identity, never a raw client header)
//	    shared: true         # ...and stays out of the partition: one limit for all tenants
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100000
//	      counts: tokens     # hits (default), tokens or cost: the unit hits_addend is in
//	      algorithm: sliding_log
//	      burst: 200000      # token_bucket only
//	      queue: {size: 100, timeout: 2s, order: oldest_first}
//	      on_store_error: local
//
// # Mapping descriptors to policies
//
// Each rule with a finite, non-zero limit becomes one admission.Policy
// (rlsconfig.Config.Policies), named after its domain and path ("llm/tenant",
// "messaging/message_type=marketing/to_number"), which the headers, the
// metrics and the decision log use. A descriptor that matches the rule is
// one admission of that policy: its partition key is the values of the
// descriptor's entries that the rule does not fix (no value or a prefix),
// those marked shared excepted, joined; its tenant is the value of the
// entry marked tenant. The generated policies count rlsconfig.UnitHits unless
// counts says tokens or cost.
//
// A descriptor no rule matches is answered by its domain's unknown
// setting; a call for a domain no file declares, by WithUnknownDomain
// (OK by default, as envoyproxy/ratelimit applies no limit there). A
// descriptor matching a rule without a rate_limit is let through.
//
// One call is one admission for all its descriptors: if any descriptor is
// refused, the call is OVER_LIMIT and no descriptor is charged (an
// envoyproxy/ratelimit call charges the descriptors that were under their
// limits). The descriptors whose limit has no queue are decided together
// (admission.Controller.TryAdmitAll): when their limits live in one store
// that evaluates batches (Redis), in one store call, one script whatever
// their number, which takes nothing at all when one of them is refused;
// two descriptors counting in one partition are decided one after the
// other, so that each sees what the other takes. Descriptors whose limit
// has a queue are evaluated last, and wait only if no other descriptor
// refused.
//
// # Weights and costs reported after the response
//
// The cost of a descriptor is its own hits_addend if set, else the
// call's hits_addend, else 1. A descriptor hits_addend of 0 is a check:
// OVER_LIMIT if not one more unit fits, and nothing is charged.
//
// A descriptor carrying the entry sluice.phase=response (from a
// rate_limits entry with apply_on_stream_done, as Envoy AI Gateway reports
// token usage) is the actual cost of a finished request: it is charged
// (admission.Controller.Charge), an overrun included and a token bucket
// already in debt too (within the policy's debt bound), so that the next
// request sees it, and it is answered OK. It is work done, not a
// decision: the observer sees its settlement, never an admitted request.
// Two ways to pair it with the request phase:
//
//   - check, then charge: the request phase sends hits_addend 0 (refused
//     when the budget is spent), the response phase the actual. Nothing
//     is estimated, nothing is charged twice, and it works on every
//     replica of a fleet.
//   - estimate, then reconcile: both phases carry sluice.request_id (from
//     x-request-id). The request phase charges its estimate and the
//     replica holds it; the response phase's actual replaces it (an
//     over-estimate is refunded, an overrun charged). If the actual comes
//     first, it is charged and the later estimate charges nothing. Either
//     way the request costs its actual once. Estimates are held in a
//     bounded table (WithPending): one that is never reconciled stays
//     charged. The table is per replica: both phases must reach the same
//     replica, or the actual is charged on top of the estimate.
//
// The sluice.* entries are stripped before matching.
//
// # Answers
//
// Each descriptor's status carries its code, current_limit (the rule's
// requests_per_unit and unit, named by rate_limit.name or the policy),
// limit_remaining and duration_until_reset. response_headers_to_add
// carries the enforcing limits' RateLimit-Policy and RateLimit fields in
// the syntax of draft-ietf-httpapi-ratelimit-headers-10, X-RateLimit-Limit,
// -Remaining and -Reset of the tightest, and Retry-After (whole seconds)
// on OVER_LIMIT when waiting can help (not for a descriptor no rule
// matches, nor a cost above its limit). Shadow limits answer OK, keep the state enforcement would
// and report their would-reject decisions to the controller's observer,
// exactly as at the HTTP edge; they never appear in headers. A shadow
// limit of requests_per_unit 0, which no policy decides, is reported by
// the server itself (Controller.Observer): one would-reject per
// request-phase descriptor, under its generated policy name, in shadow
// mode, as a fixed window of 0. A limit whose
// store fails answers as its on_store_error says: OK (open), OVER_LIMIT
// (closed, with Retry-After the policy's retry hint) or by an in-memory
// limit (local, with that limit's figures). Open and closed answers carry
// no figures of the limit (no limit_remaining nor duration_until_reset,
// and it is left out of the headers), as at the HTTP edge: without its
// store they would read "nothing left, retry now".
//
// # Waiting
//
// A limit with a queue holds the call until it is admitted, its queue
// timeout passes, or the call's deadline (the timeout Envoy's rate limit
// filter sends, 20ms by default) is near: a wait that cannot end before
// the deadline is refused at once. Raise the filter's timeout to the
// longest queue timeout you want honoured, and keep Envoy's
// failure_mode_deny in mind for calls that time out. A limit without a
// queue is decided within its store's own timeout even when the call's
// deadline passes first: a shared store answering a burst later than
// Envoy waits still decides (and charges) the request, as Envoy lets it
// through, instead of failing open.
//
// # Bounds
//
// A call has at most MaxDescriptors descriptors of at most
// rlsconfig.MaxDepth entries; domains, keys and values are at most
// rlsconfig.MaxName bytes, request
// ids 128. Calls outside them are refused with InvalidArgument before
// anything is evaluated. A hits_addend above limits.MaxAmount (2^50) is
// clamped to it, never refused: in the response phase it is usage that
// happened, charged (up to the policy's debt bound); in the request phase
// it is over any limit.
//
// Each limit keeps at most max_partitions partitions (distinct values) in
// memory. Values come from clients, so when the table is full a new value
// evicts the partition of a sample that loses the least (the one neutral
// soonest, then the one that counted least, then the least recently
// used: limits.OverflowEvict) instead of sharing one overflow partition:
// a flood of distinct values evicts its own partitions, each charged
// once, while newcomers get a whole limit and active callers keep their
// counts. A partition evicted and seen again starts from nothing, which
// under a flood forgets at most what its value had counted.
// The reconciliation table holds at most WithPending's count of
// estimates, about 700 bytes each (the controller's ticket and the
// table's entry, whose key is a 128-bit keyed hash).
//
// Running it behind Envoy (the filter configuration, the differences from
// envoyproxy/ratelimit, the mapping rules and the figures measured) is in
// cmd/sluice-rls/README.md in the repository.
package envoyrls
