package admission

import (
	"context"
	"errors"
	"fmt"
)

// Charge records work already done, without a ticket: the cost of a
// request known only after its response (Envoy's response-phase hits, a
// provider's usage report for work admitted elsewhere). Each rate policy
// matching r whose unit u knows is charged u's amount in it at once; r
// gives the identity, operation and model, its own amounts are ignored.
// The request itself is not counted again (it was when it was admitted):
// request-counting policies, like concurrency policies and units u does
// not know, are left alone.
//
// A charge is not a decision: it never waits, never refuses, and reports
// no Decision. It is taken whatever the partition holds, an overrun
// included, within the store's debt bound (a token bucket goes into debt
// by its capacity at most, a window or quota fills to its limit; the part
// beyond is forgiven), so that the next admission sees it. Shadow policies
// are charged too: they keep the state enforcement would. Each policy
// charged reports a Settlement with Estimated 0, Actual the amount and the
// partition's figures after the charge (see Settlement). A store that
// fails loses its policy's charge: the failure goes to the observer and
// is returned, joined with the others.
func (c *Controller) Charge(ctx context.Context, r Request, u Usage) error {
	u.refund = false
	cfg := r.Policies
	if cfg == nil {
		cfg = c.cfg.Load()
	} else if cfg.ctl != c {
		return errForeignSet
	}
	lims := cfg.limitsFor(r.Tenant)
	now := c.clock.Now()
	t := c.tickets.Get().(*ticket)
	t.cfg, t.start, t.stage = cfg, now, stageWhole
	t.tenant, t.model, t.operation, t.priority = r.Tenant, r.Model, r.Operation, r.Priority
	t.keybuf = t.keybuf[:0]
	allShadow := c.allShadow.Load()
	var errs []error
	for _, p := range cfg.policies {
		n, known := u.amount(p.unit)
		if !p.Algorithm.IsRate() || !known || n == 0 || !p.applies(&r) {
			continue
		}
		t.ops = t.ops[:0]
		h := t.add(p, lims, &r, allShadow)
		h.est = 0
		// Acquiring nothing finds the partition (its window, its
		// overflow) and its figures; the charge is an adjustment of that
		// empty grant.
		err := p.limiter.Acquire(ctx, h.key, h.lim, 0, now, &h.grant)
		if err == nil {
			h.rem0 = h.grant.Remaining
			err = p.limiter.Adjust(ctx, h.key, h.lim, &h.grant, n, now)
		}
		if err != nil {
			c.settleFailed(h, err)
			errs = append(errs, fmt.Errorf("admission: policy %q: charging: %w", p.Name, err))
			continue
		}
		if c.nop {
			continue
		}
		h.grant.OK, h.remAfter, h.win = true, h.rem0, h.window()
		h.closing(n)
		c.reportSettled(ctx, t, h, n)
	}
	t.recycle()
	return errors.Join(errs...)
}
