package admission_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestInvalidCost: a request with an amount outside [0, MaxAmount] is the
// caller's error. It matches ErrInvalidCost, is no rejection, takes
// nothing and reports no decision, whether or not a policy counts the
// unit.
func TestInvalidCost(t *testing.T) {
	cases := []struct {
		name string
		r    admission.Request
	}{
		{"tokens=-1", admission.Request{Tokens: -1}},
		{"tokens=MinInt64", admission.Request{Tokens: math.MinInt64}},
		{"tokens=MaxInt64", admission.Request{Tokens: math.MaxInt64}},
		{"tokens=MaxAmount+1", admission.Request{Tokens: limits.MaxAmount + 1}},
		{"cost=-5", admission.Request{Cost: -5}},
		{"cost=1e18", admission.Request{Cost: 1e18}},
		{"units=-1", admission.Request{Units: []admission.UnitAmount{{Unit: "images", Amount: 1}, {Unit: "pages", Amount: -1}}}},
		{"units=MaxInt64", admission.Request{Units: []admission.UnitAmount{{Unit: "images", Amount: math.MaxInt64}}}},
		{"unit_nobody_counts=-1", admission.Request{Units: []admission.UnitAmount{{Unit: "unused", Amount: -1}}}},
	}
	s := time.Second
	policies := []admission.Policy{
		{Name: "rpm", Algorithm: limits.TokenBucket, Limit: 2, Per: time.Minute},
		{Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 100, Per: time.Minute},
		{Name: "spend", Unit: limits.UnitCost, Algorithm: limits.FixedWindow, Limit: 100, Per: s},
		{Name: "images", Unit: "images", Algorithm: limits.SlidingLog, Limit: 10, Per: s},
		{Name: "pages", Unit: "pages", Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 10},
		{Name: "inflight", Algorithm: limits.Concurrency, Limit: 1},
	}
	for _, tc := range cases {
		for _, try := range []bool{false, true} {
			name := tc.name + "/admit"
			if try {
				name = tc.name + "/try"
			}
			t.Run(name, func(t *testing.T) {
				clock := admissiontest.NewClock(backendtest.Epoch)
				rec := &recorder{}
				c := newController(t, clock, rec, policies...)
				admit := c.Admit
				if try {
					admit = c.TryAdmit
				}
				for i := 0; i < 3; i++ {
					tk, err := admit(context.Background(), tc.r)
					if !errors.Is(err, admission.ErrInvalidCost) {
						t.Fatalf("Admit(%+v) = %v; want an error matching ErrInvalidCost", tc.r, err)
					}
					var rej *admission.Rejection
					if errors.As(err, &rej) || errors.Is(err, admission.ErrRateLimited) {
						t.Fatalf("Admit(%+v) = %v; want no rejection", tc.r, err)
					}
					if tk.Valid() {
						t.Fatal("a refused request has a live ticket")
					}
				}
				if n := len(rec.decisions); n != 0 {
					t.Fatalf("%d decisions reported for an invalid request; want none", n)
				}
				// Nothing was taken: the request rate, the concurrency cap
				// and every weighted limit still have all their room.
				tk, err := c.TryAdmit(context.Background(), admission.Request{
					Tokens: 100, Cost: 100,
					Units: []admission.UnitAmount{{Unit: "images", Amount: 10}, {Unit: "pages", Amount: 10}},
				})
				if err != nil {
					t.Fatalf("a valid request after the invalid ones: %v", err)
				}
				tk.Done()
			})
		}
	}
}

// TestValidAmountBoundaries: 0 and MaxAmount are valid amounts, and a
// policy may count up to MaxAmount.
func TestValidAmountBoundaries(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, admission.Policy{
		Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: limits.MaxAmount, Per: time.Minute,
	})
	for _, n := range []int64{0, 1, limits.MaxAmount} {
		clock.Advance(time.Hour)
		tk, err := c.TryAdmit(context.Background(), admission.Request{Tokens: n})
		if err != nil {
			t.Fatalf("TryAdmit(tokens=%d) = %v; want admitted", n, err)
		}
		tk.Done()
	}
}

// TestLimitBounds: limits, bursts, max costs and plan overrides above
// MaxAmount, and durations so long that an instant plus them would
// overflow (a lease that expired at once, lifting a concurrency cap), fail
// validation with their path.
func TestLimitBounds(t *testing.T) {
	const year = 365 * 24 * time.Hour
	tb := func(f func(p *admission.Policy)) admission.Policy {
		p := admission.Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 10, Per: time.Second}
		f(&p)
		return p
	}
	cases := []struct {
		name string
		cfg  admission.Config
		want string // the start of the error, with its path; empty for a valid config
	}{
		{"limit=MaxAmount", admission.Config{Policies: []admission.Policy{tb(func(p *admission.Policy) { p.Limit = limits.MaxAmount })}}, ""},
		{"limit>MaxAmount", admission.Config{Policies: []admission.Policy{tb(func(p *admission.Policy) { p.Limit = limits.MaxAmount + 1 })}}, "policies[0].limit: must be <= "},
		{"limit=MaxInt64", admission.Config{Policies: []admission.Policy{tb(func(p *admission.Policy) { p.Limit = math.MaxInt64 })}}, "policies[0].limit: must be <= "},
		{"burst>MaxAmount", admission.Config{Policies: []admission.Policy{tb(func(p *admission.Policy) { p.Burst = math.MaxInt64 })}}, "policies[0].burst: must be <= "},
		{"max_cost>MaxAmount", admission.Config{Policies: []admission.Policy{tb(func(p *admission.Policy) { p.MaxCost = limits.MaxAmount + 1 })}}, "policies[0].max_cost: must be <= "},
		{"window limit>MaxAmount", admission.Config{Policies: []admission.Policy{{Name: "w", Algorithm: limits.FixedWindow, Limit: 1 << 62, Per: time.Second}}}, "policies[0].limit: must be <= "},
		{"plan limit>MaxAmount", admission.Config{
			Policies: []admission.Policy{tb(func(*admission.Policy) {})},
			Plans:    limits.Plans{Plans: map[string]map[string]limits.Override{"big": {"tpm": {Limit: limits.MaxAmount + 1}}}},
		}, "plans.big.tpm.limit: must be <= "},
		{"max_hold 250 years", admission.Config{Policies: []admission.Policy{{Name: "c", Algorithm: limits.Concurrency, Limit: 1, MaxHold: 250 * year}}}, "policies[0].max_hold: must be at most"},
		{"quota per 250 years", admission.Config{Policies: []admission.Policy{{Name: "q", Algorithm: limits.Quota, Period: limits.PeriodFixed, Limit: 1, Per: 250 * year}}}, "policies[0].per: must be at most"},
		{"retry_hint 101 years", admission.Config{Policies: []admission.Policy{{Name: "c", Algorithm: limits.Concurrency, Limit: 1, RetryHint: 101 * year}}}, "policies[0].retry_hint: must be at most"},
		{"retry_hint<0", admission.Config{Policies: []admission.Policy{{Name: "c", Algorithm: limits.Concurrency, Limit: 1, RetryHint: -1}}}, "policies[0].retry_hint: must be >= 0"},
		{"plan per 250 years", admission.Config{
			Policies: []admission.Policy{tb(func(*admission.Policy) {})},
			Plans:    limits.Plans{Plans: map[string]map[string]limits.Override{"slow": {"tpm": {Per: 250 * year}}}},
		}, "plans.slow.tpm.per: must be at most"},
		{"durations of 100 years", admission.Config{Policies: []admission.Policy{{Name: "c", Algorithm: limits.Concurrency, Limit: 1, MaxHold: 100 * year, IdleTimeout: 100 * year}}}, ""},
		{"tenant burst>MaxAmount", admission.Config{
			Policies: []admission.Policy{tb(func(*admission.Policy) {})},
			Plans:    limits.Plans{Tenants: map[string]limits.TenantPlan{"acme": {Overrides: map[string]limits.Override{"tpm": {Burst: math.MaxInt64}}}}},
		}, "tenants.acme.overrides.tpm.burst: must be <= "},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v; want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate() = %v; want an error at %s", tc.name, err, tc.want)
		}
	}
}

// arithPolicies holds one policy of each rate algorithm counting tokens,
// all keyed globally: the worst case, where one tenant's settlement
// would lock out everyone.
func arithPolicies() []admission.Policy {
	s := time.Second
	return []admission.Policy{
		{Name: "tb", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 100, Per: 10 * s, Burst: 150},
		{Name: "fw", Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 100, Per: 10 * s},
		{Name: "sw", Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 100, Per: 10 * s},
		{Name: "sl", Unit: limits.UnitTokens, Algorithm: limits.SlidingLog, Limit: 100, Per: 10 * s},
		{Name: "qf", Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 100, Period: limits.PeriodFixed, Per: time.Hour},
		{Name: "qm", Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 100, Period: limits.PeriodMonth},
	}
}

// TestExtremeUsageBoundedWait: whatever usage a settlement or a charge
// reports (as an upstream may, hostile or broken), the next rejection
// advises a wait within the policy's horizon, and after that wait the
// partition admits again.
func TestExtremeUsageBoundedWait(t *testing.T) {
	usages := []int64{math.MaxInt64, 9.2e18, 1e18, limits.MaxAmount, limits.MaxAmount + 1, 1e6}
	for _, p := range arithPolicies() {
		for _, actual := range usages {
			for _, charge := range []bool{false, true} {
				clock := admissiontest.NewClock(backendtest.Epoch)
				c := newController(t, clock, nil, p)
				ctx := context.Background()
				tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "mallory", Tokens: 10})
				if err != nil {
					t.Fatalf("%s: first admit: %v", p.Name, err)
				}
				if charge {
					err := tk.Charge(admission.Usage{Tokens: actual})
					var rej *admission.Rejection
					if !errors.As(err, &rej) {
						t.Fatalf("%s: Charge(%d) = %v; want a rejection", p.Name, actual, err)
					}
					if h := p.Base().Horizon(clock.Now()); rej.RetryAfter > h {
						t.Errorf("%s: Charge(%d) advises %v; horizon %v", p.Name, actual, rej.RetryAfter, h)
					}
				}
				tk.Settle(admission.Usage{Tokens: actual})
				_, err = c.TryAdmit(ctx, admission.Request{Tenant: "alice", Tokens: 1})
				var rej *admission.Rejection
				if !errors.As(err, &rej) {
					t.Fatalf("%s: admit after usage %d = %v; want a rejection", p.Name, actual, err)
				}
				h := p.Base().Horizon(clock.Now())
				if rej.RetryAfter < 0 || rej.RetryAfter > h {
					t.Fatalf("%s: after usage %d (charged first: %v) RetryAfter = %v; want within the horizon %v", p.Name, actual, charge, rej.RetryAfter, h)
				}
				clock.Advance(rej.RetryAfter)
				if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "alice", Tokens: 1}); err != nil {
					t.Fatalf("%s: after usage %d, waiting the advised %v: %v", p.Name, actual, rej.RetryAfter, err)
				} else {
					tk.Done()
				}
			}
		}
	}
}

// TestNegativeUsageRefundsOnlyWhatWasTaken: a negative actual refunds what
// the ticket took, not what other tickets hold.
func TestNegativeUsageRefundsOnlyWhatWasTaken(t *testing.T) {
	for _, p := range arithPolicies() {
		p.Burst = 0
		for _, actual := range []int64{-1, -1e18, math.MinInt64} {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, p)
			ctx := context.Background()
			a, err := c.TryAdmit(ctx, admission.Request{Tokens: 40})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.TryAdmit(ctx, admission.Request{Tokens: 60}); err != nil {
				t.Fatal(err)
			}
			a.Settle(admission.Usage{Tokens: actual})
			// 40 are back, the other ticket's 60 are still held.
			tk, err := c.TryAdmit(ctx, admission.Request{Tokens: 40})
			if err != nil {
				t.Fatalf("%s: after Settle(%d): TryAdmit(40) = %v; want the 40 refunded", p.Name, actual, err)
			}
			st := tk.Statuses(nil)
			if len(st) != 1 || st[0].Remaining != 0 {
				t.Fatalf("%s: after Settle(%d) and taking the 40 back: statuses %+v; want 0 remaining", p.Name, actual, st)
			}
		}
	}
}

// TestArithmeticProperties replays random traffic with random estimates
// (extreme and negative ones included), random usages, charges and settle
// orders, on every algorithm and through plans that lower limits, and
// requires: no panic, invalid estimates refused with ErrInvalidCost, no
// valid one refused for ever unless it exceeds the capacity, every finite
// retry-after within the horizon of the partition's limit, and figures in
// range.
func TestArithmeticProperties(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		runArithmetic(t, rand.New(rand.NewPCG(seed, 12)), 1500)
	}
}

// FuzzArithmetic is TestArithmeticProperties with the fuzzer choosing the
// seed and the length of the traffic.
func FuzzArithmetic(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint16(300))
	f.Add(uint64(0xdead), uint64(0xbeef), uint16(1000))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, n uint16) {
		runArithmetic(t, rand.New(rand.NewPCG(s1, s2)), int(n%2000))
	})
}

// extremeAmount returns a random amount, often a hostile one.
func extremeAmount(rng *rand.Rand, typical int64) int64 {
	switch rng.IntN(12) {
	case 0:
		return math.MaxInt64
	case 1:
		return math.MinInt64
	case 2:
		return limits.MaxAmount
	case 3:
		return limits.MaxAmount + 1 + rng.Int64N(1<<40)
	case 4:
		return -1 - rng.Int64N(1e18)
	case 5:
		return rng.Int64()
	}
	return rng.Int64N(typical + 1)
}

func runArithmetic(t *testing.T, rng *rand.Rand, steps int) {
	t.Helper()
	policies := append(arithPolicies(),
		admission.Policy{Name: "cc", Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 300, MaxHold: time.Minute},
		admission.Policy{Name: "rq", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 50, Per: time.Second},
	)
	// Tenant "small" has every weighted limit lowered, and may switch plans
	// while its partitions hold state of the larger limits.
	small := map[string]limits.Override{}
	for _, p := range policies[:5] {
		small[p.Name] = limits.Override{Limit: 30}
	}
	plans := limits.Plans{
		Plans:   map[string]map[string]limits.Override{"small": small, "big": {}},
		Tenants: map[string]limits.TenantPlan{"small": {Plan: "small"}},
	}
	clock := admissiontest.NewClock(backendtest.Epoch.Add(time.Duration(rng.Int64N(int64(40 * 24 * time.Hour)))))
	c, err := admission.New(admission.Config{Policies: policies, Plans: plans}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]admission.Policy{}
	for _, p := range policies {
		byName[p.Name] = p
	}
	limitOf := func(tenant, name string) limits.Limit {
		p := byName[name]
		l := p.Base()
		if o, ok := plans.Plans[plans.Tenants[tenant].Plan][name]; ok {
			l = o.Apply(l)
		}
		return l
	}
	ctx := context.Background()
	tenants := []string{"small", "alice", "bob"}
	var open []admission.Ticket
	var admitted, waits, invalid int
	for i := 0; i < steps; i++ {
		clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		switch op := rng.IntN(10); {
		case op == 0:
			// Lower or restore the small tenant's limits.
			plan := []string{"small", "big"}[rng.IntN(2)]
			plans.Tenants = map[string]limits.TenantPlan{"small": {Plan: plan}}
			if err := c.SetPlans(plans); err != nil {
				t.Fatal(err)
			}
		case op < 4 && len(open) > 0:
			j := rng.IntN(len(open))
			tk := open[j]
			u := admission.Usage{Tokens: extremeAmount(rng, 200), TokensKnown: rng.IntN(4) > 0}
			if rng.IntN(3) == 0 {
				_ = tk.Charge(u) // a rejection is checked below, by the next admit
				continue
			}
			tk.Settle(u)
			open = append(open[:j], open[j+1:]...)
		default:
			tenant := tenants[rng.IntN(len(tenants))]
			r := admission.Request{Tenant: tenant, Tokens: extremeAmount(rng, 60)}
			tk, err := c.TryAdmit(ctx, r)
			if r.Tokens < 0 || r.Tokens > limits.MaxAmount {
				if !errors.Is(err, admission.ErrInvalidCost) {
					t.Fatalf("step %d: TryAdmit(tokens=%d) = %v; want ErrInvalidCost", i, r.Tokens, err)
				}
				invalid++
				continue
			}
			if err == nil {
				admitted++
				open = append(open, tk)
				if len(open) > 40 {
					open[0].Settle(admission.Usage{Tokens: extremeAmount(rng, 200)})
					open = open[1:]
				}
				continue
			}
			var rej *admission.Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("step %d: TryAdmit = %v; want a ticket or a rejection", i, err)
			}
			if rej.RetryAfter == limits.Never {
				if lim := limitOf(tenant, rej.Policy); r.Tokens <= lim.Capacity() {
					t.Fatalf("step %d: %s: tokens=%d rejected for ever; capacity %d", i, rej.Policy, r.Tokens, lim.Capacity())
				}
				continue
			}
			h := limitOf(tenant, rej.Policy).Horizon(clock.Now())
			if rej.Policy == "cc" {
				h = limits.DefaultRetryHint
			}
			waits++
			if rej.RetryAfter < 0 || rej.RetryAfter > h {
				t.Fatalf("step %d: %s: tokens=%d for %s: RetryAfter = %v; want within the horizon %v", i, rej.Policy, r.Tokens, tenant, rej.RetryAfter, h)
			}
			for _, st := range rej.Statuses {
				if st.Remaining < 0 || st.Remaining > st.Limit || st.Reset < 0 {
					t.Fatalf("step %d: status %+v out of range", i, st)
				}
			}
		}
	}
	for _, tk := range open {
		tk.Settle(admission.Usage{Tokens: extremeAmount(rng, 200)})
	}
	if steps >= 1000 && (admitted == 0 || waits == 0 || invalid == 0) {
		t.Fatalf("%d admitted, %d told to wait, %d invalid: the traffic does not exercise the limits", admitted, waits, invalid)
	}
}

// TestChargeIsNotRefunded: usage so far never decreases, so a settlement
// below what Charge charged refunds nothing. Otherwise a charge the debt
// bound mostly forgave, followed by a settlement at zero, would refund
// what the partition never took: a full partition for free.
func TestChargeIsNotRefunded(t *testing.T) {
	for _, p := range arithPolicies() {
		for _, final := range []int64{0, -1, 5} {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, p)
			ctx := context.Background()
			tk, err := c.TryAdmit(ctx, admission.Request{Tokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			_ = tk.Charge(admission.Usage{Tokens: limits.MaxAmount})
			tk.Settle(admission.Usage{Tokens: final, TokensKnown: true})
			_, err = c.TryAdmit(ctx, admission.Request{Tokens: 1})
			var rej *admission.Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("%s: after Charge(MaxAmount) and Settle(%d): TryAdmit(1) = %v; want a rejection (nothing refunded)", p.Name, final, err)
			}
			if h := p.Base().Horizon(clock.Now()); rej.RetryAfter > h {
				t.Fatalf("%s: RetryAfter = %v; horizon %v", p.Name, rej.RetryAfter, h)
			}
		}
	}
	// A legitimate stream charged 30 so far, then reports 25 in all: it
	// stays charged 30.
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, admission.Policy{Name: "fw", Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 100, Per: time.Minute})
	tk, _ := c.TryAdmit(context.Background(), admission.Request{Tokens: 10})
	_ = tk.Charge(admission.Usage{Tokens: 30})
	tk.Settle(admission.Usage{Tokens: 25})
	next, err := c.TryAdmit(context.Background(), admission.Request{Tokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st := next.Statuses(nil); st[0].Remaining != 69 {
		t.Fatalf("remaining = %d; want 69 (30 charged, 1 taken)", st[0].Remaining)
	}
}
