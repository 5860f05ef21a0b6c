package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
)

// Remaining appends to dst the standing of every policy that would
// evaluate r (those whose Match holds for its operation and model), in
// evaluation order, with the tenant's plan and overrides: the figures
// an admission's headers would show (Ticket.Statuses), as of now and
// before taking anything. It answers what x/time/rate's Tokens does: how
// much a caller has left. r's set (Request.Policies) decides, as for
// Admit, so a program reading a snapshot names it there; r's identity
// picks the partitions exactly as Admit's does, and its amounts are not
// read. A concurrency policy reports its cap and what is not in flight.
//
// It only reads (backend.Peeker): no permit is taken, no partition is
// created (one that does not exist reads as full, so an unknown tenant
// costs nothing), no state is refilled, rolled or reclaimed, no idle
// timer is reset, and no decision is reported to the observer. A policy
// whose store cannot read without writing (its limiters are no Peeker)
// or failed reads as full, and the error, which names every such policy,
// matches errors.ErrUnsupported or wraps the store's failure: every
// status is appended whatever the error.
func (c *Controller) Remaining(ctx context.Context, r Request, dst []Status) ([]Status, error) {
	set, err := c.setOf(&r, nil)
	if err != nil {
		return dst, err
	}
	lims := set.limitsFor(r.Tenant)
	allShadow := c.allShadow.Load()
	now := c.clock.Now()
	var t ticket // only its key buffer and ops: no pooled ticket, no lease
	var errs []error
	for _, p := range set.policies {
		if !p.applies(&r) {
			continue
		}
		h := t.add(p, lims, &r, allShadow)
		if err := peek(ctx, h, now); err != nil {
			errs = append(errs, fmt.Errorf("admission: remaining of policy %q: %w", p.Name, err))
			h.grant = backend.Grant{Limit: h.lim.Capacity(), Remaining: h.lim.Capacity()}
		}
		h.grant.OK = true // zero permits fit: the figures of an admission
		dst = append(dst, h.status())
	}
	return dst, errors.Join(errs...)
}

// peek reads h's partition into h.grant.
func peek(ctx context.Context, h *held, now time.Time) error {
	pk, ok := h.p.limiter.(backend.Peeker)
	if !ok {
		return errors.ErrUnsupported
	}
	return pk.Peek(ctx, h.key, h.lim, now, &h.grant)
}
