package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// AuthFailureLimit throttles failed authentication per client address
// (the address as the identity settings resolve it: the TCP peer, or the
// client named by a trusted proxy, IPv6 grouped by /64). Each address may
// fail Limit times per Per, in a burst of Limit; once it has used them
// up, its requests are refused with 429 before their key is even looked
// at, valid keys included, until the allowance refills. Zero fields take
// their value from DefaultAuthFailures.
type AuthFailureLimit struct {
	// Disabled turns the throttle off.
	Disabled bool
	// Limit is the number of failed attempts allowed per Per.
	Limit int64
	// Per is the period over which Limit refills.
	Per time.Duration
	// MaxAddresses bounds the addresses tracked, so that memory stays
	// bounded under a flood from many addresses. When every tracked
	// address still has failures to forgive, a new address is not
	// tracked (nor throttled) until one is forgiven: the throttle never
	// refuses an address for the failures of others.
	MaxAddresses int
}

// DefaultAuthFailures is the failed-authentication throttle used for
// zero fields: 20 failures a minute per address, 65,536 addresses
// tracked (a few megabytes).
var DefaultAuthFailures = AuthFailureLimit{Limit: 20, Per: time.Minute, MaxAddresses: 1 << 16}

// authLimiter is the failed-authentication throttle: a controller of its
// own with one token bucket keyed by client address, whose unit is a
// failed attempt.
type authLimiter struct {
	ctl *admission.Controller // nil when disabled
}

const unitAuthFailures limits.Unit = "auth_failures"

// authPolicy is the throttle's policy for l, zero fields defaulted; ok is
// false when l is disabled.
func authPolicy(l AuthFailureLimit) (p admission.Policy, ok bool) {
	if l.Disabled {
		return p, false
	}
	d := DefaultAuthFailures
	if l.Limit <= 0 {
		l.Limit = d.Limit
	}
	if l.Per <= 0 {
		l.Per = d.Per
	}
	if l.MaxAddresses <= 0 {
		l.MaxAddresses = d.MaxAddresses
	}
	return admission.Policy{
		Name: "failed-authentication", Key: []limits.KeyPart{limits.KeyIP}, Unit: unitAuthFailures,
		Algorithm: limits.TokenBucket, Limit: l.Limit, Per: l.Per,
		MaxPartitions: l.MaxAddresses, Overflow: limits.OverflowReject,
	}, true
}

func newAuthLimiter(l AuthFailureLimit, clk admission.Clock) (*authLimiter, error) {
	p, ok := authPolicy(l)
	if !ok {
		return &authLimiter{}, nil
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

// SetAuthFailures replaces the failed-authentication throttle's figures,
// for a policy file reload. While the throttle stays on, every address
// keeps what is left of its allowance, refilled at the new rate.
func (g *Gateway) SetAuthFailures(l AuthFailureLimit) error {
	p, on := authPolicy(l)
	if cur := g.auth.Load(); on && cur.ctl != nil {
		return cur.ctl.SetConfig(admission.Config{Policies: []admission.Policy{p}})
	}
	a, err := newAuthLimiter(l, g.cfg.Clock)
	if err != nil {
		return err
	}
	g.auth.Store(a)
	return nil
}
