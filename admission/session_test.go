package admission_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// sessionPolicies are a budget of 3 steps a day per session, kept in at
// most maxSessions partitions (0: the default), and a tenant's own limit
// of tenantLimit requests an hour.
func sessionPolicies(maxSessions int, tenantLimit int64) []admission.Policy {
	return []admission.Policy{
		{Name: "session-steps", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession}, Unit: limits.UnitSteps,
			Algorithm: limits.Quota, Limit: 3, Per: 24 * time.Hour, MaxPartitions: maxSessions, Overflow: limits.OverflowEvict},
		{Name: "tenant-rph", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: tenantLimit, Per: time.Hour},
	}
}

func step(tenant, session string) admission.Request {
	return admission.Request{Tenant: tenant, Session: session, Operation: "POST /v1/chat/completions",
		Units: []admission.UnitAmount{{Unit: limits.UnitSteps, Amount: 1}}}
}

// TestSessionBudgetUnderTenant: a session's steps are counted under its
// tenant (the same session id in two tenants is two budgets), a request
// without a session is not counted by the session policy, and every
// request, of any session or none, counts against its tenant's own limit.
func TestSessionBudgetUnderTenant(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, sessionPolicies(0, 10)...)
	ctx := context.Background()
	try := func(r admission.Request) string {
		tk, err := c.TryAdmit(ctx, r)
		var rej *admission.Rejection
		switch {
		case err == nil:
			tk.Done()
			return "admitted"
		case errors.As(err, &rej):
			return rej.Policy
		}
		t.Fatal(err)
		return ""
	}
	steps := []struct {
		tenant, session, want string
	}{
		{"a", "s1", "admitted"}, {"a", "s1", "admitted"}, {"a", "s1", "admitted"},
		{"a", "s1", "session-steps"},
		{"b", "s1", "admitted"}, // another tenant's session of the same id
		{"a", "s2", "admitted"}, // another session of the tenant
		{"a", "", "admitted"},   // no session: the session policy does not apply
		{"a", "", "admitted"},
		{"a", "", "admitted"},
		{"a", "", "admitted"},
		{"a", "s3", "admitted"},
		{"a", "s4", "admitted"}, // the tenant's 10th request
		{"a", "s5", "tenant-rph"},
		{"a", "", "tenant-rph"},
	}
	for i, s := range steps {
		if got := try(step(s.tenant, s.session)); got != s.want {
			t.Errorf("step %d: TryAdmit(tenant %q, session %q) = %s; want %s", i, s.tenant, s.session, got, s.want)
		}
	}
}

// TestSessionFloodStaysUnderTenant: a tenant inventing a new session for
// every request gets no more than its own limit, and, under a limit high
// enough to let the flood through, the session table stays within its
// bound; another tenant's session is untouched either way.
func TestSessionFloodStaysUnderTenant(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tenantLimit  int64
		wantAdmitted int
	}{
		{"tenant limit binds", 10, 10},
		{"session table bound", 1_000_000, 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			c := newController(t, clock, nil, sessionPolicies(1000, tc.tenantLimit)...)
			ctx := context.Background()
			// A quiet tenant's session, started before the flood.
			quiet, err := c.TryAdmit(ctx, step("quiet", "s-1"))
			if err != nil {
				t.Fatal(err)
			}
			quiet.Done()
			admitted := 0
			for i := range 100_000 {
				tk, err := c.TryAdmit(ctx, step("greedy", "s-"+strconv.Itoa(i)))
				if err == nil {
					admitted++
					tk.Done()
				} else if !errors.Is(err, admission.ErrRateLimited) {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if admitted != tc.wantAdmitted {
				t.Errorf("admitted %d requests of invented sessions; want %d", admitted, tc.wantAdmitted)
			}
			for _, s := range c.Stats() {
				if s.Partitions > 1000 {
					t.Errorf("policy %s holds %d partitions; want <= 1000", s.Name, s.Partitions)
				}
				t.Logf("after 100000 invented sessions: policy %s holds %d partitions", s.Name, s.Partitions)
			}
			if tk, err := c.TryAdmit(ctx, step("quiet", "s-2")); err != nil {
				t.Errorf("quiet tenant, new session: %v; want admitted", err)
			} else {
				tk.Done()
			}
		})
	}
}

// TestSessionPolicyDecidedAfterBody: a session named in the body (known
// only at Continue) is counted by the session policy, even one counting
// requests, which Begin therefore leaves alone.
func TestSessionPolicyDecidedAfterBody(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, admission.Policy{
		Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 1, Per: 24 * time.Hour,
	})
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		r := admission.Request{Tenant: "a"}
		tk, err := c.Begin(ctx, r)
		if err != nil {
			t.Fatalf("call %d: Begin: %v", i, err)
		}
		r.Session = "from-body"
		err = tk.Continue(ctx, r)
		if got := err == nil; got != want {
			t.Errorf("call %d: Continue admitted = %v (%v); want %v", i, got, err, want)
		}
		tk.Done()
	}
}

// TestSessionTokenBudgetSettles: a session's token budget reserves the
// estimate before the call and keeps only the actual usage after it, so
// the next call of the session sees what is really left.
func TestSessionTokenBudgetSettles(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, admission.Policy{
		Name: "session-tokens", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession}, Unit: limits.UnitTokens,
		Algorithm: limits.Quota, Limit: 1000, Per: 24 * time.Hour,
	})
	ctx := context.Background()
	r := admission.Request{Tenant: "a", Session: "run", Tokens: 600}
	tk, err := c.TryAdmit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAdmit(ctx, r); !errors.Is(err, admission.ErrQuotaExceeded) {
		t.Errorf("second call while 600 of 1000 are reserved: %v; want a quota refusal", err)
	}
	tk.Settle(admission.Usage{Tokens: 100, TokensKnown: true})
	sts, err := c.Remaining(ctx, r, nil)
	if err != nil || len(sts) != 1 || sts[0].Remaining != 900 {
		t.Fatalf("Remaining after settling 100 of 600 = %+v, %v; want 900", sts, err)
	}
	tk, err = c.TryAdmit(ctx, r)
	if err != nil {
		t.Errorf("call after the settlement: %v; want admitted (900 left)", err)
	} else {
		tk.Done()
	}
}

// TestDecisionCarriesSession: a decision names the request's session, the
// one Admit was given or the one Continue learned from the body, so the
// decision log can show whose session was refused.
func TestDecisionCarriesSession(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, admission.Policy{
		Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 1, Per: 24 * time.Hour,
	})
	ctx := context.Background()
	tk, err := c.Admit(ctx, admission.Request{Tenant: "a", Session: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	tk, err = c.Begin(ctx, admission.Request{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Continue(ctx, admission.Request{Tenant: "a", Session: "run-1"}); err == nil {
		t.Error("the session's second call was admitted; want its budget of 1 refusing it")
	}
	tk.Done()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.decisions) != 2 {
		t.Fatalf("%d decisions; want 2", len(rec.decisions))
	}
	for i, d := range rec.decisions {
		if d.Session != "run-1" || d.Tenant != "a" {
			t.Errorf("decision %d (%v): session %q, tenant %q; want run-1 of a", i, d.Outcome, d.Session, d.Tenant)
		}
	}
}
