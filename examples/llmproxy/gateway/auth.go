package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// authLimiter is the failed-authentication throttle: a controller of its
// own with one token bucket keyed by client address, whose unit is a
// failed attempt.
type authLimiter struct {
	ctl *admission.Controller // nil when disabled
}

const unitAuthFailures limits.Unit = "auth_failures"

// authPolicy is the throttle's policy for the identity.failed_auth
// section l (each client address, as the identity settings resolve it,
// may fail l.Limit times per l.Per; see config.FailedAuth); ok is false
// when l is disabled.
func authPolicy(l config.FailedAuth) (p admission.Policy, ok bool) {
	if !l.Enabled {
		return p, false
	}
	return admission.Policy{
		Name: "failed-authentication", Key: []limits.KeyPart{limits.KeyIP}, Unit: unitAuthFailures,
		Algorithm: limits.TokenBucket, Limit: l.Limit, Per: l.Per,
		MaxPartitions: l.MaxAddresses, Overflow: limits.OverflowReject,
	}, true
}

// nextAuthLimiter returns the throttle for l after cur (nil at start):
// while the throttle stays on, cur itself with l's figures, every address
// keeping what is left of its allowance, refilled at the new rate.
func nextAuthLimiter(cur *authLimiter, l config.FailedAuth, clk admission.Clock) (*authLimiter, error) {
	p, ok := authPolicy(l)
	if !ok {
		return &authLimiter{}, nil
	}
	if cur != nil && cur.ctl != nil {
		return cur, cur.ctl.SetConfig(admission.Config{Policies: []admission.Policy{p}})
	}
	var opts []admission.Option
	if clk != nil {
		opts = append(opts, admission.WithClock(clk))
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: failed-authentication throttle: %w", err)
	}
	return &authLimiter{ctl: ctl}, nil
}

func authRequest(addr netip.Addr, units []admission.UnitAmount) admission.Request {
	return admission.Request{Addr: addr, Operation: "authenticate", Units: units}
}

// allow reports whether addr may try its credentials now; if not, it
// returns how long until it may.
func (a *authLimiter) allow(ctx context.Context, addr netip.Addr) (time.Duration, bool) {
	if a.ctl == nil {
		return 0, true
	}
	// A request of no failures reads the address's allowance without
	// taking any.
	peek := [1]admission.UnitAmount{{Unit: unitAuthFailures}}
	tk, err := a.ctl.TryAdmit(ctx, authRequest(addr, peek[:]))
	if err != nil {
		// An address the full table has no room for is not throttled.
		return 0, true
	}
	var buf [1]admission.Status
	sts := tk.Statuses(buf[:0])
	tk.Done()
	if len(sts) == 0 || sts[0].Remaining >= 1 {
		return 0, true
	}
	// Out of attempts: ask for one to learn when the next one comes.
	one := [1]admission.UnitAmount{{Unit: unitAuthFailures, Amount: 1}}
	tk, err = a.ctl.TryAdmit(ctx, authRequest(addr, one[:]))
	var rej *admission.Rejection
	if errors.As(err, &rej) {
		return rej.RetryAfter, false
	}
	if err == nil {
		// Refilled in between: give the attempt back.
		tk.Settle(admission.Usage{Units: peek[:]})
	}
	return 0, true
}

// failed charges one failed attempt to addr.
func (a *authLimiter) failed(ctx context.Context, addr netip.Addr) {
	if a.ctl == nil {
		return
	}
	one := [1]admission.UnitAmount{{Unit: unitAuthFailures, Amount: 1}}
	if tk, err := a.ctl.TryAdmit(ctx, authRequest(addr, one[:])); err == nil {
		tk.Done()
	}
}
