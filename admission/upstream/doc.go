// Package upstream keeps what a gateway sends a provider inside what the
// provider will accept. A provider's own limits (requests and tokens per
// minute, per model or deployment) are shared by every tenant of the
// gateway: once they run out the provider answers 429, and the refusal
// lands on whichever tenant comes next.
//
// Parse reads the limit figures of a provider response (OpenAI, Azure
// OpenAI and Anthropic headers, and retry-after on a 429 or 503) into a
// Report. Store is a limit store whose policies carry the provider's
// published budget as their static limit, so a gateway is protected
// before the first response; Observe feeds it each Report, and what it
// learns only tightens that budget: a group the provider refused is
// paused until its retry-after, and a request the provider's remaining
// budget cannot hold waits until it can. With a queue on the policy such
// requests wait in the controller's queue (round robin by tenant, with
// the priority classes' shares, bounded in size and wait, refused at once
// when the wait would pass the caller's deadline) instead of failing.
//
// A group is what a provider limits together: the whole upstream (a
// policy keyed globally, group ""), or a model (keyed by model, group the
// model name). Register one Store per upstream account, or per Azure
// deployment, and one policy per limited dimension:
//
//	store, _ := upstream.New(upstream.Config{})
//	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
//		Name: "openai-tpm", Store: "openai", Key: []limits.KeyPart{limits.KeyModel},
//		Unit: limits.UnitTokens, Algorithm: limits.TokenBucket,
//		Limit: 2_000_000, Per: time.Minute,
//		Queue: limits.Queue{Size: 1000, Timeout: 30 * time.Second},
//	}}}, admission.WithStore("openai", store))
//
// and on every provider response, streamed or not, once its headers
// arrive (also on a 429 or 503):
//
//	store.Observe(model, upstream.Parse(resp.Header.Get, resp.StatusCode, time.Now()))
//
// A 429 observed pauses the group, so the gateway can absorb it: refund
// the ticket (Ticket.Refund: the provider served nothing, and the
// tenant's one call must not count twice against its own request,
// session-step or loop policies), Admit the same request again (it waits
// for the pause to end, within the caller's deadline) and retry it once,
// rather than pass the provider's refusal on to the tenant.
//
// A provider's limiter is not an exact tokenizer: it estimates a request
// (OpenAI's from its characters and max_tokens) and charges more or less
// than the gateway's count. Set Report.Sent to the request's token
// estimate before Observe and each group learns the ratio between the
// two (see Accounting); the store's token policies then reserve in the
// provider's units, while the policies on other stores (the tenants')
// still count the estimate. Several gateways in front of one account
// learn it together when their static store is a Ledger (the Redis
// store is: one ratio per Config.Account and group, learned from every
// replica's answers); each learning alone would count its neighbours'
// requests in the provider's drops and overestimate it.
//
// With Config.Adaptive, the store's concurrency policies get a cap that
// follows the provider's time to first byte, per group (a gradient limit,
// as Netflix's concurrency-limits and Envoy's adaptive concurrency filter
// keep): it falls, never below Adaptive.Min, while the provider answers
// slower than usual, and grows back to the policy's limit when it is
// fast again. Feed it each response's time to first byte:
//
//	store.ObserveLatency(model, time.Since(sent), time.Now())
//
// Optional collaborators are options: WithStaticStore; see
// docs/concepts.md#constructors.
package upstream
