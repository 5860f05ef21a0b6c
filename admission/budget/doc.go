// Package budget warns before a quota runs out: a Watcher, an
// admission.Observer installed beside the metrics one, watches the
// decisions of the quotas that declare warning thresholds (the policy
// file's warn: [50%, 80%, 95%]) and, the first time in a period a tenant's
// usage reaches a threshold, emits a Warning: a metric
// (admission_budget_warnings_total), a log event, and optionally a signed
// webhook POST (Webhook).
//
// # What counts as crossing
//
// Usage is what the controller reports after each decision: the quota's
// limit minus what remains of it (Decision.Status). A threshold t is
// crossed when usage × 100 ≥ t × limit, and a threshold of 100% also
// when the quota refuses a request (or, shadow or soft, would refuse it):
// the budget cannot hold the next request (a request larger than the
// whole limit does not count). The limit is the tenant's own, its plan's
// when it has one. Tenants that a full partition table sends to a
// quota's shared overflow partition are told that partition's figures. A decision that crosses
// several thresholds at once emits one warning for each. A settlement
// whose actual cost exceeds its estimate adds the difference to a tenant
// already past a threshold and can cross the next one at once; for a
// tenant below every threshold the crossing is seen at its next request
// (the controller's Settlement carries no figures).
//
// Each threshold warns at most once per tenant per period: the set of
// thresholds a tenant crossed lives until the quota's period ends
// (computed as the controller does, from the policy's period kind,
// location and window), and nothing lowers it in between, so a refund
// that takes usage back under a threshold does not let it warn again. A
// reload that changes a fixed quota's per moves each tenant to the new
// period at its next decision.
// With several replicas each keeps its own set: each warns once; the
// webhook's event id is the same on all of them, so a receiver can
// de-duplicate. A store that keeps time itself (Redis: the server's
// clock) ends its periods by its clock and the Watcher by its own, so a
// crossing within the clocks' skew of a period's end may be told as the
// neighbouring period's.
//
// A stream charged as it goes (Ticket.Charge) reports no decision: its
// usage is seen when it settles, or at the tenant's next request.
//
// # Memory and cost
//
// A tenant takes memory only once it crossed a threshold in the current
// period, and at most Policy.MaxTenants tenants per policy are kept
// (default limits.DefaultMaxPartitions, the bound of the quota's own
// partitions); entries of ended periods are reused first. A crossing
// that finds the table full of current entries is not warned (it could
// not be remembered, and warning twice is worse) and is counted in
// admission_budget_untracked_total. A decision of any other policy, or
// below the lowest threshold of every quota, costs a few comparisons and
// never allocates; a tenant past a threshold costs a lock of one of 16
// shards, a map lookup and a clock read; only a crossing allocates.
//
// # Soft quotas
//
// A soft quota (the file's soft: true) only warns: the policy file runs
// it in shadow mode, so it keeps its figures exactly as an enforced one
// but never refuses, and adds a 100% threshold. It is a quota option, not
// a new limits.Mode: a mode applies to every algorithm and is what an
// operator flips during a rollout (and the all-shadow switch flips in an
// emergency), while "warn and never refuse" means something only for a
// quota with thresholds, and is shadow in every other respect. Its
// decisions are counted with mode="shadow"; the admission_budget_soft
// gauge names the soft policies, so the shadow rollout alert leaves them
// out.
//
// # The webhook
//
// A Webhook delivers each warning as a POST of a JSON body (see Warning)
// from a bounded queue, by background workers, never on the request
// path: a warning that finds the queue full is dropped and counted. Each
// attempt has a deadline; failed attempts (network errors, 408, 429, 5xx)
// are retried up to Attempts times in all, after exponential backoff with
// full jitter; other statuses, redirects included, are not retried.
//
// Every attempt is signed with HMAC-SHA256 under the secret from the
// environment variable the file names:
//
//	Sluice-Signature: t=1767225600,v1=<64 lower-case hex digits>
//
// where v1 is the lower-case hex HMAC-SHA256 of the decimal t, a dot, and
// the exact body bytes. A receiver recomputes it over the raw body (before
// parsing it), compares in constant time, and refuses a t more than a few
// minutes from its own clock, which defeats replays; Verify does all of
// it. Sluice-Event-Id carries the warning's id (also in the body), the
// same on every retry and every replica, for de-duplication.
//
// The policy file's warn, soft and budgets.webhook keys, the webhook's
// body and how to verify it in other languages are in docs/budgets.md in
// the repository.
package budget
