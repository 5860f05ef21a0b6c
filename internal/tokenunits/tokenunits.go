// Package tokenunits carries the token figures package weights computes
// into the units package admission limits: a request's estimate into
// Request.Tokens and Request.Units, a response's usage into a Usage. It is
// the one place that imports both (weights does not import admission).
package tokenunits

import (
	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/weights"
)

// Append appends t's three units (input_tokens, output_tokens,
// cached_input_tokens) to dst and returns the extended slice; with a dst
// of capacity for them (a request's own buffer) it does not allocate.
func Append(dst []admission.UnitAmount, t weights.TokenUnits) []admission.UnitAmount {
	return append(dst,
		admission.UnitAmount{Unit: limits.UnitInputTokens, Amount: t.Input},
		admission.UnitAmount{Unit: limits.UnitOutputTokens, Amount: t.Output},
		admission.UnitAmount{Unit: limits.UnitCachedInputTokens, Amount: t.CachedInput},
	)
}

// Request sets r's token amounts to an estimate's: Tokens to their total,
// and the three token units appended to Units.
func Request(r *admission.Request, t weights.TokenUnits) {
	r.Tokens = t.Total()
	r.Units = Append(r.Units, t)
}

// Usage returns the actual usage t as a settlement or charge: Tokens (their
// total, known) and the three token units, appended to buf (nil for a new
// slice; a stream charging on every chunk passes the same buffer each
// time, which the controller does not keep). Cost is left to the caller.
func Usage(buf []admission.UnitAmount, t weights.TokenUnits) admission.Usage {
	if buf == nil {
		buf = make([]admission.UnitAmount, 0, 3)
	}
	return admission.Usage{Tokens: t.Total(), TokensKnown: true, Units: Append(buf, t)}
}
