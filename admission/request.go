package admission

import "net/netip"

// A Unit names what a policy counts. Requests are always worth 1; every other
// unit is an amount the caller estimates before the work starts (tokens,
// micro-dollars, operation cost units) and may reconcile when it ends.
type Unit string

// The units every caller can use. Any other non-empty string is a named unit
// whose amount the caller supplies in Request.Units.
const (
	UnitRequests Unit = "requests"
	UnitTokens   Unit = "tokens"
	UnitCost     Unit = "cost"
)

// UnitAmount is an amount of a named unit.
type UnitAmount struct {
	Unit   Unit
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
	// Addr is the client address, already resolved through trusted proxies.
	Addr netip.Addr
	// Operation is the route or operation name policies match on.
	Operation string
	// Model is the model asked for, for LLM work.
	Model string
	// Priority orders waiters in a queue: a higher value is served first.
	// Requests of equal priority are served fairly across tenants.
	Priority int
	// Tokens is the estimated token cost (prompt plus output reservation).
	Tokens int64
	// Cost is the estimated cost in micro-dollars or operation cost units.
	Cost int64
	// Units holds estimates for other named units.
	Units []UnitAmount
}

// Amount returns the request's cost in unit u: 1 for requests, the estimate
// for every other unit, 0 when the request does not name it.
func (r *Request) Amount(u Unit) int64 {
	switch u {
	case UnitRequests, "":
		return 1
	case UnitTokens:
		return r.Tokens
	case UnitCost:
		return r.Cost
	}
	for _, c := range r.Units {
		if c.Unit == u {
			return c.Amount
		}
	}
	return 0
}

// Usage is the actual cost of admitted work, known once it has finished (or
// so far, while it runs). A zero field means "as estimated" unless the
// matching Known flag says the actual amount really is zero.
type Usage struct {
	Tokens      int64
	TokensKnown bool
	Cost        int64
	CostKnown   bool
	// Units holds actual amounts for other named units; an entry present is known.
	Units []UnitAmount
}

// amount returns the actual amount of unit u and whether it is known.
func (u *Usage) amount(unit Unit) (int64, bool) {
	switch unit {
	case UnitRequests, "":
		return 0, false
	case UnitTokens:
		return u.Tokens, u.TokensKnown || u.Tokens != 0
	case UnitCost:
		return u.Cost, u.CostKnown || u.Cost != 0
	}
	for _, c := range u.Units {
		if c.Unit == unit {
			return c.Amount, true
		}
	}
	return 0, false
}
