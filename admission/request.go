package admission

import (
	"fmt"
	"net/netip"

	"github.com/sluicehq/sluice/admission/limits"
)

// UnitAmount is an amount of a named unit.
type UnitAmount struct {
	Unit   limits.Unit
	Amount int64
}

// A Request describes one piece of work asking to be admitted. The identity
// fields must already be validated by the caller (an API key looked up in a
// table, claims checked by an auth middleware): the controller trusts them.
type Request struct {
	// Tenant is the account the work is billed to.
	Tenant string
	// KeyID identifies the credential used, never the credential itself
	// (for example a short hash-derived id).
	KeyID string
	// User is an end user inside the tenant, when known.
	User string
	// Session is the agent session the work belongs to, when known: an
	// id the caller has checked (bounded in length, printable), which
	// policies keyed by limits.KeySession count under the tenant. Empty
	// means no session: those policies do not apply.
	Session string
	// Fingerprint identifies the step the request makes in its session
	// (for a model call, the conversation's tail: the last tool calls
	// and what they returned; for a tool call, the tool and its
	// arguments), computed by the caller from normalised content, so
	// that repeating a step repeats its fingerprint. Loop policies
	// (limits.KeyFingerprint) count it under the tenant and session; the
	// zero value means none: those policies do not apply.
	Fingerprint limits.Fingerprint
	// Addr is the client address, already resolved through trusted proxies.
	Addr netip.Addr
	// Operation is the route or operation name policies match on.
	Operation string
	// Model is the model asked for, for LLM work.
	Model string
	// Priority orders waiters in a queue: a higher value is served first.
	// Requests of equal priority are served fairly across tenants.
	Priority int
	// Retry says the request repeats one refused before (the client says
	// so: an SDK's retry-count header, read by httpadmit). A place a full
	// queue held for the refused request's retry is its to take; a
	// tenant that marks every request only reorders its own (see the
	// package doc, Waiting).
	Retry bool
	// Tokens is the estimated token cost (prompt plus output reservation).
	// Zero, with token units in Units, means their sum.
	Tokens int64
	// Cost is the estimated cost in micro-dollars or operation cost units.
	Cost int64
	// Units holds estimates for other named units, among them the token
	// units limits.UnitInputTokens, UnitOutputTokens and
	// UnitCachedInputTokens, which split Tokens the way providers limit
	// it. They travel here rather than in fields of their own: a policy
	// reads only the unit it counts, a request carries a handful of units
	// at most (so the lookup is a short scan, allocation-free), and the
	// core needs no new names for each way a provider counts.
	Units []UnitAmount
	// Policies is the policy set the request is decided by, one the
	// controller compiled (Controller.Compile) with the rest of what a
	// program derives from one configuration; nil means the set the
	// controller has installed. Continue decides by the set Begin did.
	Policies *PolicySet
}

// checkAmounts returns an error matching ErrInvalidCost when an amount of r
// is negative or above MaxAmount.
func (r *Request) checkAmounts() error {
	bad := func(what string, v int64) error {
		return fmt.Errorf("admission: %w: %s %d is outside [0, %d]", ErrInvalidCost, what, v, limits.MaxAmount)
	}
	switch {
	case r.Tokens < 0 || r.Tokens > limits.MaxAmount:
		return bad("tokens", r.Tokens)
	case r.Cost < 0 || r.Cost > limits.MaxAmount:
		return bad("cost", r.Cost)
	}
	for _, c := range r.Units {
		if c.Amount < 0 || c.Amount > limits.MaxAmount {
			return bad(fmt.Sprintf("unit %.64q", c.Unit), c.Amount)
		}
	}
	return nil
}

// Amount returns the request's cost in unit u: 1 for requests, the estimate
// for every other unit, 0 when the request does not name it. A request
// with no Tokens but token units costs their sum in tokens.
func (r *Request) Amount(u limits.Unit) int64 {
	switch u {
	case limits.UnitRequests, "":
		return 1
	case limits.UnitTokens:
		if r.Tokens == 0 {
			n, _ := tokenSum(r.Units)
			return n
		}
		return r.Tokens
	case limits.UnitCost:
		return r.Cost
	}
	n, _ := unitAmount(r.Units, u)
	return n
}

// unitAmount returns the amount of the first entry of units for u, clamped
// to [0, MaxAmount], and whether there is one.
func unitAmount(units []UnitAmount, u limits.Unit) (int64, bool) {
	for _, c := range units {
		if c.Unit == u {
			return clampAmount(c.Amount), true
		}
	}
	return 0, false
}

// tokenSum returns input_tokens + output_tokens + cached_input_tokens
// among units, at most MaxAmount, and whether units holds any of them.
func tokenSum(units []UnitAmount) (int64, bool) {
	var sum int64
	found := false
	for _, u := range [...]limits.Unit{limits.UnitInputTokens, limits.UnitOutputTokens, limits.UnitCachedInputTokens} {
		n, ok := unitAmount(units, u)
		sum += n // three amounts of at most 2^50 each
		found = found || ok
	}
	return min(sum, limits.MaxAmount), found
}

// Usage is the actual cost of admitted work, known once it has finished (or
// so far, while it runs). A zero field means "as estimated" unless the
// matching Known flag says the actual amount really is zero. Amounts are
// clamped to [0, MaxAmount]: a negative figure counts as zero (it refunds
// at most what was taken), a larger one as MaxAmount.
type Usage struct {
	Tokens      int64
	TokensKnown bool
	Cost        int64
	CostKnown   bool
	// Units holds actual amounts for other named units; an entry present
	// is known. The token units (limits.UnitInputTokens, UnitOutputTokens,
	// UnitCachedInputTokens) settle here: a policy on input_tokens is
	// refunded the prompt tokens the provider read from its cache. A
	// usage with neither Tokens nor TokensKnown but token units settles
	// tokens at their sum.
	Units []UnitAmount

	refund bool // Ticket.Refund: every unit, requests included, is known to be zero
}

// amount returns the actual amount of unit u, clamped to [0, MaxAmount],
// and whether it is known.
func (u *Usage) amount(unit limits.Unit) (int64, bool) {
	if u.refund {
		return 0, true
	}
	switch unit {
	case limits.UnitRequests, "":
		return 0, false
	case limits.UnitTokens:
		if u.Tokens == 0 && !u.TokensKnown {
			return tokenSum(u.Units)
		}
		return clampAmount(u.Tokens), true
	case limits.UnitCost:
		return clampAmount(u.Cost), u.CostKnown || u.Cost != 0
	}
	return unitAmount(u.Units, unit)
}

// knowsAny reports whether u knows the actual amount of any unit; amount
// reports every unit unknown when it does not.
func (u *Usage) knowsAny() bool {
	return u.refund || u.Tokens != 0 || u.TokensKnown || u.Cost != 0 || u.CostKnown || len(u.Units) > 0
}

// clampAmount returns v within [0, MaxAmount].
func clampAmount(v int64) int64 { return min(max(v, 0), limits.MaxAmount) }
