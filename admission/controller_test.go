package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	admission.NopObserver
	mu        sync.Mutex
	decisions []admission.Decision
	settled   []admission.Settlement
	expired   int
	evicted   int
}

func (r *recorder) Decision(d *admission.Decision) {
	r.mu.Lock()
	r.decisions = append(r.decisions, *d)
	r.mu.Unlock()
}

func (r *recorder) Settled(s admission.Settlement) {
	r.mu.Lock()
	r.settled = append(r.settled, s)
	r.mu.Unlock()
}

func (r *recorder) LeaseExpired(_ string, n int) {
	r.mu.Lock()
	r.expired += n
	r.mu.Unlock()
}

func (r *recorder) PartitionsEvicted(_ string, n int) {
	r.mu.Lock()
	r.evicted += n
	r.mu.Unlock()
}

func (r *recorder) count(o admission.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.decisions {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

// queuedOf returns how many Queued decisions the tenant's requests got.
func (r *recorder) queuedOf(tenant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.decisions {
		if d.Outcome == admission.Queued && d.Tenant == tenant {
			n++
		}
	}
	return n
}

func newController(t testing.TB, clock admission.Clock, obs admission.Observer, policies ...admission.Policy) *admission.Controller {
	t.Helper()
	opts := []admission.Option{admission.WithClock(clock)}
	if obs != nil {
		opts = append(opts, admission.WithObserver(obs))
	}
	c, err := admission.New(admission.Config{Policies: policies}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var tenantKey = []limits.KeyPart{limits.KeyTenant}

func TestRollbackAcrossPolicies(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec,
		admission.Policy{Name: "hourly", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 2, Per: time.Hour},
		admission.Policy{Name: "per-minute", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute},
	)
	ctx := context.Background()
	req := admission.Request{Tenant: "a"}
	tk, err := c.TryAdmit(ctx, req)
	if err != nil {
		t.Fatalf("first request: %v", err)
	}
	tk.Done()
	for i := 0; i < 3; i++ {
		_, err := c.TryAdmit(ctx, req)
		var rej *admission.Rejection
		if !errors.As(err, &rej) || rej.Policy != "per-minute" || !errors.Is(err, admission.ErrRateLimited) {
			t.Fatalf("request %d: err = %v; want a per-minute rate rejection", i+2, err)
		}
		// The rejection carries every evaluated policy's standing: the
		// hourly bucket with the permit it gave back.
		var got []string
		for _, s := range rej.Statuses {
			got = append(got, fmt.Sprintf("%s:%d/%d", s.Policy, s.Remaining, s.Limit))
		}
		if want := "[hourly:1/2 per-minute:0/1]"; fmt.Sprint(got) != want {
			t.Errorf("request %d: statuses %v; want %s", i+2, got, want)
		}
	}
	// The hourly bucket gave back what the rejected requests took: one of
	// its two tokens is left when the minute window resets.
	rec.mu.Lock()
	var decisions []string
	for _, d := range rec.decisions {
		decisions = append(decisions, fmt.Sprintf("%s:%s:%v", d.Policy, d.Outcome, d.RolledBack))
	}
	rec.mu.Unlock()
	want := "[hourly:admitted:false per-minute:admitted:false" + strings.Repeat(" per-minute:rejected:false hourly:admitted:true", 3) + "]"
	if fmt.Sprint(decisions) != want {
		t.Errorf("decisions %v;\nwant %s", decisions, want)
	}
	clock.Advance(time.Minute)
	if _, err := c.TryAdmit(ctx, req); err != nil {
		t.Fatalf("after the window: %v; the hourly bucket leaked permits on rollback", err)
	}
	clock.Advance(time.Minute)
	_, err = c.TryAdmit(ctx, req)
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Policy != "hourly" {
		t.Fatalf("third admission: err = %v; want the hourly bucket to be empty", err)
	}
	if rej.RetryAfter != 28*time.Minute {
		t.Errorf("hourly retry-after = %v; want 28m (a token every 30m, 2m elapsed)", rej.RetryAfter)
	}
}

func TestReconcile(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec,
		admission.Policy{Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 100, Per: time.Hour})
	ctx := context.Background()
	remaining := func() int64 {
		t.Helper()
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Tokens: 0})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Done()
		return tk.Statuses(nil)[0].Remaining
	}
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Tokens: 60})
	if err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != 40 {
		t.Fatalf("after reserving 60: remaining = %d; want 40", got)
	}
	tk.Settle(admission.Usage{Tokens: 20})
	if got := remaining(); got != 80 {
		t.Fatalf("after settling at 20: remaining = %d; want 80 (the unused 40 refunded)", got)
	}
	tk.Settle(admission.Usage{Tokens: 0, TokensKnown: true}) // settling twice is harmless
	if got := remaining(); got != 80 {
		t.Fatalf("after a second settle: remaining = %d; want 80", got)
	}
	tk, err = c.TryAdmit(ctx, admission.Request{Tenant: "a", Tokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(admission.Usage{Tokens: 110}) // an overrun of 80 puts the bucket 30 into debt
	_, err = c.TryAdmit(ctx, admission.Request{Tenant: "a", Tokens: 10})
	var rej *admission.Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("after an overrun: err = %v; want a rejection", err)
	}
	// 40 tokens at 100 per hour: 24 minutes.
	if rej.RetryAfter != 24*time.Minute {
		t.Errorf("retry-after in debt = %v; want 24m", rej.RetryAfter)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, s := range rec.settled {
		if s.Estimated != 0 {
			got = append(got, fmt.Sprintf("%d->%d", s.Estimated, s.Actual))
		}
	}
	if strings.Join(got, " ") != "60->20 30->110" {
		t.Errorf("settlements = %v; want [60->20 30->110]", got)
	}
}

func TestZeroTicketAndStaleCopies(t *testing.T) {
	var zero admission.Ticket
	zero.Done()
	zero.Settle(admission.Usage{Tokens: 5})
	if zero.Valid() {
		t.Fatal("zero ticket is valid")
	}
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil,
		admission.Policy{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 1})
	ctx := context.Background()
	first, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	stale := first
	first.Done()
	second, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	// A stale copy of the first ticket must not release the second's permit,
	// even if the controller reuses the same memory.
	stale.Done()
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("stale Done released someone else's permit: err = %v", err)
	}
	second.Done()
}

func TestUnsettledLeaseExpires(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec,
		admission.Policy{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 2, MaxHold: 30 * time.Second})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil { // never settled
			t.Fatal(err)
		}
	}
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); !errors.Is(err, admission.ErrConcurrencyLimited) {
		t.Fatalf("at the cap: err = %v", err)
	}
	if s := c.Stats()[0]; s.InFlight != 2 {
		t.Fatalf("in flight = %d; want 2", s.InFlight)
	}
	// The tickets were dropped unsettled: once the collector has found
	// them unreachable, the lease keeper renews them no more.
	runtime.GC()
	clock.Advance(30 * time.Second)
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatalf("after MaxHold: %v; leaked permits were not reclaimed", err)
	}
	tk.Done()
	if rec.expired != 2 {
		t.Errorf("expired leases reported = %d; want 2", rec.expired)
	}
	if s := c.Stats()[0]; s.InFlight != 0 {
		t.Errorf("in flight after expiry = %d; want 0", s.InFlight)
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec,
		admission.Policy{Name: "candidate", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute, Mode: limits.Shadow})
	ctx := context.Background()
	var would []string
	for i := 0; i < 5; i++ {
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatalf("request %d: shadow policy blocked: %v", i, err)
		}
		would = tk.WouldReject(would[:0])
		if (i >= 2) != (len(would) == 1) {
			t.Errorf("request %d: WouldReject = %v", i, would)
		}
		tk.Done()
	}
	if n := rec.count(admission.WouldReject); n != 3 {
		t.Errorf("would_reject decisions = %d; want 3", n)
	}
	for _, d := range rec.decisions {
		if d.Outcome == admission.WouldReject && (d.Reason != admission.ReasonRate || d.RetryAfter != time.Minute || d.Mode != limits.Shadow) {
			t.Errorf("would-reject decision = %+v; want reason rate, retry 1m, mode shadow", d)
		}
	}
}

// TestShadowEqualsEnforce sends the same random traffic through an enforcing
// and a shadow copy of each policy: the shadow's would-reject sequence must
// equal the enforcer's reject sequence, with the same reasons and retry-after.
func TestShadowEqualsEnforce(t *testing.T) {
	s := time.Second
	policies := []admission.Policy{
		{Name: "tb", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 50, Per: 10 * s, Burst: 80},
		{Name: "fw", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 60, Per: 5 * s},
		{Name: "sw", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 60, Per: 5 * s},
		{Name: "sl", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.SlidingLog, Limit: 60, Per: 5 * s},
		{Name: "q", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 500, Period: limits.PeriodFixed, Per: time.Minute},
		{Name: "c", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 40},
	}
	for _, p := range policies {
		t.Run(p.Name, func(t *testing.T) {
			run := func(mode limits.Mode) []string {
				clock := admissiontest.NewClock(backendtest.Epoch)
				rec := &recorder{}
				pp := p
				pp.Mode = mode
				c := newController(t, clock, rec, pp)
				rng := rand.New(rand.NewPCG(42, 7))
				var open []admission.Ticket
				var seq []string
				for i := 0; i < 3000; i++ {
					clock.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
					if len(open) > 0 && rng.IntN(3) == 0 {
						j := rng.IntN(len(open))
						open[j].Settle(admission.Usage{Tokens: rng.Int64N(20), TokensKnown: true})
						open = append(open[:j], open[j+1:]...)
					}
					tenant := fmt.Sprintf("t%d", rng.IntN(3))
					tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: tenant, Tokens: 1 + rng.Int64N(15)})
					var rej *admission.Rejection
					switch {
					case errors.As(err, &rej):
						seq = append(seq, fmt.Sprintf("%d:%s:%s:%v", i, tenant, rej.Reason, rej.RetryAfter))
					case err != nil:
						t.Fatal(err)
					default:
						if w := tk.WouldReject(nil); len(w) > 0 {
							d := rec.decisions[len(rec.decisions)-1]
							if d.Outcome != admission.WouldReject {
								t.Fatalf("request %d: last decision %v; want would_reject", i, d.Outcome)
							}
							seq = append(seq, fmt.Sprintf("%d:%s:%s:%v", i, tenant, d.Reason, d.RetryAfter))
							// Enforcement would not have admitted it: the
							// caller gives up, as it does on a rejection.
							tk.Done()
							continue
						}
						open = append(open, tk)
					}
				}
				return seq
			}
			enforced, shadowed := run(limits.Enforce), run(limits.Shadow)
			if len(enforced) == 0 {
				t.Fatal("the traffic never hits the limit")
			}
			if strings.Join(enforced, "\n") != strings.Join(shadowed, "\n") {
				t.Fatalf("shadow predictions differ from enforcement:\nenforce %d rejections, first %v\nshadow  %d would-rejects, first %v",
					len(enforced), enforced[:min(5, len(enforced))], len(shadowed), shadowed[:min(5, len(shadowed))])
			}
		})
	}
}

func TestModeFlipKeepsState(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	p := admission.Policy{Name: "candidate", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 3, Per: time.Minute, Mode: limits.Shadow}
	c := newController(t, clock, nil, p)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
		if err != nil {
			t.Fatal(err)
		}
		tk.Done()
	}
	p.Mode = limits.Enforce
	if err := c.SetConfig(admission.Config{Policies: []admission.Policy{p}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("after the flip: err = %v; want the shadow run's state to be enforced", err)
	}
	c.SetAllShadow(true)
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatalf("all-shadow switch: %v", err)
	}
	tk.Done()
	c.SetAllShadow(false)
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("all-shadow off: err = %v", err)
	}
	// An incompatible change (another algorithm) starts from scratch.
	p.Algorithm, p.Per = limits.Concurrency, 0
	if err := c.SetConfig(admission.Config{Policies: []admission.Policy{p}}); err != nil {
		t.Fatal(err)
	}
	if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a"}); err != nil {
		t.Fatalf("new algorithm: %v", err)
	} else {
		tk.Done()
	}
}

func TestPlans(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rpm := admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute}
	c, err := admission.New(admission.Config{
		Policies: []admission.Policy{rpm},
		Plans: limits.Plans{
			Default: "basic",
			Plans: map[string]map[string]limits.Override{
				"basic":   {"rpm": {Limit: 3}},
				"premium": {"rpm": {Limit: 10}},
			},
			Tenants: map[string]limits.TenantPlan{
				"big":  {Plan: "premium"},
				"tiny": {Plan: "basic", Overrides: map[string]limits.Override{"rpm": {Limit: 1}}},
			},
		},
	}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	allowance := func(tenant string, limit int64) int {
		n := 0
		for ; n < 100; n++ {
			tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: tenant})
			if err != nil {
				var rej *admission.Rejection
				if !errors.As(err, &rej) || rej.Status.Limit != limit {
					t.Errorf("%s: rejection = %v; want limit %d", tenant, err, limit)
				}
				break
			}
			tk.Done()
		}
		return n
	}
	for tenant, want := range map[string]int{"big": 10, "tiny": 1, "unlisted": 3} {
		if got := allowance(tenant, int64(want)); got != want {
			t.Errorf("allowance(%s) = %d; want %d", tenant, got, want)
		}
	}
	// Moving a tenant to another plan keeps its partition: "big" has used 10
	// this minute, more than basic's 3.
	err = c.SetPlans(limits.Plans{
		Plans:   map[string]map[string]limits.Override{"basic": {"rpm": {Limit: 3}}},
		Tenants: map[string]limits.TenantPlan{"big": {Plan: "basic"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := allowance("big", 3); got != 0 {
		t.Errorf("after the plan swap: allowance(big) = %d; want 0 (state kept)", got)
	}
	err = c.SetPlans(limits.Plans{Plans: map[string]map[string]limits.Override{"x": {"nope": {Limit: 1}}}})
	if err == nil || !strings.Contains(err.Error(), "plans.x.nope: no such policy") {
		t.Errorf("plan naming a missing policy: err = %v", err)
	}
}

func TestPlanSwapUnderLoad(t *testing.T) {
	rpm := admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Second}
	c := newController(t, admission.SystemClock{}, nil, rpm,
		admission.Policy{Name: "inflight", Key: tenantKey, Algorithm: limits.Concurrency, Limit: 4})
	ctx := context.Background()
	var wg sync.WaitGroup
	var admitted, rejected [4]int
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				tk, err := c.TryAdmit(ctx, admission.Request{Tenant: fmt.Sprintf("t%d", i%7)})
				if err != nil {
					rejected[g]++
					continue
				}
				admitted[g]++
				tk.Done()
			}
		}()
	}
	for i := 0; i < 50; i++ {
		limit := int64(10 + i)
		err := c.SetPlans(limits.Plans{
			Default: "p",
			Plans:   map[string]map[string]limits.Override{"p": {"rpm": {Limit: limit}, "inflight": {Limit: 2}}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	total := 0
	for g := range admitted {
		total += admitted[g]
	}
	if total == 0 {
		t.Fatal("nothing admitted under plan swaps")
	}
	for _, s := range c.Stats() {
		if s.Name == "inflight" && s.InFlight != 0 {
			t.Errorf("in flight after the load = %d; want 0", s.InFlight)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := admission.Config{Policies: []admission.Policy{
		{Name: "a", Algorithm: limits.TokenBucket, Limit: 0, Per: time.Second},
		{Name: "a", Algorithm: limits.FixedWindow, Limit: 5},
		{Name: "q", Algorithm: limits.Concurrency, Limit: 5, Queue: limits.Queue{Timeout: time.Second}},
		{Name: "b", Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 3, MaxCost: 4},
	}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"policies[0].limit: must be > 0, got 0",
		"policies[1].name: \"a\" already used by policies[0]",
		"policies[1].per: must be > 0 for fixed_window",
		"policies[2].queue.timeout: set without a queue (queue.size is 0)",
		"policies[3].burst: 3 is smaller than max_cost 4",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v\nmissing %q", err, want)
		}
	}
}

func TestKeys(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil,
		admission.Policy{Name: "by-prefix", Key: []limits.KeyPart{limits.KeyIPPrefix}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute},
		admission.Policy{Name: "tenant-model", Key: []limits.KeyPart{limits.KeyTenant, limits.KeyModel}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute,
			Match: limits.Match{Operations: []string{"chat"}}},
	)
	ctx := context.Background()
	admit := func(r admission.Request) error {
		tk, err := c.TryAdmit(ctx, r)
		tk.Done()
		return err
	}
	mustParse := func(s string) admission.Request {
		r := admission.Request{Tenant: "t", Operation: "embed"}
		r.Addr = netipMustParse(s)
		return r
	}
	if err := admit(mustParse("2001:db8:1:2::1")); err != nil {
		t.Fatal(err)
	}
	// Same /64: same partition.
	if err := admit(mustParse("2001:db8:1:2:ffff::9")); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("same /64: err = %v", err)
	}
	if err := admit(mustParse("2001:db8:1:3::1")); err != nil {
		t.Fatalf("other /64: %v", err)
	}
	if err := admit(mustParse("192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	if err := admit(mustParse("::ffff:192.0.2.1")); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("IPv4-mapped address: err = %v; want the IPv4 partition", err)
	}
	chat := func(tenant, model, addr string) error {
		r := mustParse(addr)
		r.Tenant, r.Model, r.Operation = tenant, model, "chat"
		return admit(r)
	}
	if err := chat("t1", "gpt-4o", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := chat("t1", "gpt-4o-mini", "10.0.0.2"); err != nil {
		t.Fatalf("other model: %v", err)
	}
	if err := chat("t1", "gpt-4o", "10.0.0.3"); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("same tenant and model: err = %v", err)
	}
}
