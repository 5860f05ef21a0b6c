package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestSetTenant changes one tenant at a time: its next request has the new
// limit, its partition keeps its level, the other tenants keep theirs, and
// an invalid change is refused with the path check gives.
func TestSetTenant(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	rpm := admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute}
	c, err := admission.New(admission.Config{
		Policies: []admission.Policy{rpm},
		Plans: limits.Plans{
			Default: "basic",
			Plans:   map[string]map[string]limits.Override{"basic": {"rpm": {Limit: 3}}, "pro": {"rpm": {Limit: 10}}},
			Tenants: map[string]limits.TenantPlan{"a": {Plan: "basic"}, "b": {Plan: "basic"}},
		},
	}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// admit takes n requests of tenant and returns the limit and remaining
	// of the last one, or of its rejection.
	admit := func(tenant string, n int) (limit, remaining int64, ok bool) {
		for range n {
			tk, err := c.TryAdmit(ctx, admission.Request{Tenant: tenant})
			if err != nil {
				var rej *admission.Rejection
				if !errors.As(err, &rej) {
					t.Fatal(err)
				}
				return rej.Status.Limit, rej.Status.Remaining, false
			}
			st := tk.Statuses(nil)[0]
			limit, remaining = st.Limit, st.Remaining
			tk.Done()
		}
		return limit, remaining, true
	}
	steps := []struct {
		what          string
		change        func() error
		tenant        string
		n             int
		limit, remain int64
		ok            bool
	}{
		{"a on basic uses 3 of 3", nil, "a", 3, 3, 0, true},
		{"a is refused", nil, "a", 1, 3, 0, false},
		{"a moves to pro: 7 left of 10 (level kept)", func() error { return c.SetTenant("a", &limits.TenantPlan{Plan: "pro"}) }, "a", 1, 10, 6, true},
		{"b still on basic", nil, "b", 1, 3, 2, true},
		{"a gets its own override", func() error {
			return c.SetTenant("a", &limits.TenantPlan{Plan: "pro", Overrides: map[string]limits.Override{"rpm": {Limit: 5}}})
		}, "a", 1, 5, 0, true},
		{"new tenant c on pro", func() error { return c.SetTenant("c", &limits.TenantPlan{Plan: "pro"}) }, "c", 1, 10, 9, true},
		{"a removed: the default plan, level kept", func() error { return c.SetTenant("a", nil) }, "a", 1, 3, 0, false},
	}
	for _, s := range steps {
		if s.change != nil {
			if err := s.change(); err != nil {
				t.Fatalf("%s: %v", s.what, err)
			}
		}
		limit, remain, ok := admit(s.tenant, s.n)
		if limit != s.limit || remain != s.remain || ok != s.ok {
			t.Errorf("%s: admit(%s, %d) = limit %d, remaining %d, ok %v; want %d, %d, %v", s.what, s.tenant, s.n, limit, remain, ok, s.limit, s.remain, s.ok)
		}
	}
	for _, bad := range []struct {
		tp   limits.TenantPlan
		want string
	}{
		{limits.TenantPlan{Plan: "gold"}, `tenants.a.plan: no plan "gold"`},
		{limits.TenantPlan{Overrides: map[string]limits.Override{"nope": {Limit: 1}}}, "tenants.a.overrides.nope: no such policy"},
		{limits.TenantPlan{Overrides: map[string]limits.Override{"rpm": {Limit: -1}}}, "tenants.a.overrides.rpm.limit: must be > 0"},
	} {
		if err := c.SetTenant("a", &bad.tp); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("SetTenant(a, %+v) = %v; want %q", bad.tp, err, bad.want)
		}
	}
	if limit, _, _ := admit("b", 1); limit != 3 {
		t.Errorf("after refused changes, b's limit = %d; want 3", limit)
	}
}

// TestSetTenantWithoutPlans gives a tenant its own override in a
// controller that had no plans at all.
func TestSetTenantWithoutPlans(t *testing.T) {
	c := newController(t, admissiontest.NewClock(backendtest.Epoch), nil,
		admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 2, Per: time.Minute})
	if err := c.SetTenant("a", &limits.TenantPlan{Overrides: map[string]limits.Override{"rpm": {Limit: 9}}}); err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]int64{"a": 9, "b": 2} {
		tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if got := tk.Statuses(nil)[0].Limit; got != want {
			t.Errorf("limit of %s = %d; want %d", tenant, got, want)
		}
		tk.Done()
	}
}

// TestSetTenantUnderLoad changes tenants while others admit: every
// decision sees one of the limits the tenant was given, never a torn one.
func TestSetTenantUnderLoad(t *testing.T) {
	c := newController(t, admission.SystemClock{}, nil,
		admission.Policy{Name: "rpm", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				tk, err := c.TryAdmit(ctx, admission.Request{Tenant: fmt.Sprintf("t%d", (i+g)%50)})
				if err != nil {
					errs <- err
					return
				}
				if l := tk.Statuses(nil)[0].Limit; l != 1<<40 && (l < 1000 || l >= 1200) {
					errs <- fmt.Errorf("limit %d: never set", l)
					tk.Done()
					return
				}
				tk.Done()
			}
		}()
	}
	for i := range 200 {
		tp := &limits.TenantPlan{Overrides: map[string]limits.Override{"rpm": {Limit: int64(1000 + i)}}}
		if err := c.SetTenant(fmt.Sprintf("t%d", i%50), tp); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
