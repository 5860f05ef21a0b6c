// Package amounts bounds the amounts of a request's estimate before
// admission, one rule for every front end (httpadmit, grpcadmit): a
// negative amount is the caller's error, an amount above
// limits.MaxAmount is saturated to it, so that such a request is refused
// as larger than any limit (a decision) rather than failing.
package amounts

import (
	"fmt"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// ErrNegative is Bound's error, matching admission.ErrInvalidCost.
var ErrNegative = fmt.Errorf("%w: the request's estimated cost is negative", admission.ErrInvalidCost)

// Bound checks the amounts of req: a negative Tokens, Cost or Units
// amount is ErrNegative, and an amount above limits.MaxAmount is
// saturated to it.
func Bound(req *admission.Request) error {
	if req.Tokens < 0 || req.Cost < 0 {
		return ErrNegative
	}
	req.Tokens, req.Cost = min(req.Tokens, limits.MaxAmount), min(req.Cost, limits.MaxAmount)
	for i := range req.Units {
		if req.Units[i].Amount < 0 {
			return ErrNegative
		}
		req.Units[i].Amount = min(req.Units[i].Amount, limits.MaxAmount)
	}
	return nil
}
