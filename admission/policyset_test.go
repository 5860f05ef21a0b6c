package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestPolicySetDecidesItsRequests: a request naming a compiled set is
// decided by that set while another is installed, and by nothing else;
// the set a tenant change derives leaves the first set as it was; sets
// share partitions; a set of another controller is refused.
func TestPolicySetDecidesItsRequests(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	cfg := func(limit int64) admission.Config {
		return admission.Config{
			Policies: []admission.Policy{{Name: "rpm", Key: tenantKey, Algorithm: limits.FixedWindow, Limit: limit, Per: time.Minute}},
			Plans:    limits.Plans{Tenants: map[string]limits.TenantPlan{"a": {}}},
		}
	}
	c, err := admission.New(cfg(5), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	old, err := c.Compile(cfg(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetConfig(cfg(7)); err != nil {
		t.Fatal(err)
	}
	moved, err := old.WithTenant("a", &limits.TenantPlan{Overrides: map[string]limits.Override{"rpm": {Limit: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := func(set *admission.PolicySet) int64 {
		t.Helper()
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Policies: set})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Done()
		return tk.Statuses(nil)[0].Limit
	}
	for _, s := range []struct {
		what string
		set  *admission.PolicySet
		want int64
	}{
		{"the installed set", nil, 7},
		{"the set compiled before", old, 5},
		{"the set with a's override", moved, 9},
		{"the set compiled before, after WithTenant", old, 5},
	} {
		if got := limit(s.set); got != s.want {
			t.Errorf("%s: limit %d; want %d", s.what, got, s.want)
		}
	}
	// The four requests above counted in one partition, shared by the sets.
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Policies: old})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Statuses(nil)[0].Remaining; got != 0 {
		t.Errorf("fifth request by the set of limit 5: remaining %d; want 0 (the sets share the partition)", got)
	}
	tk.Done()
	other, err := admission.New(cfg(5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAdmit(ctx, admission.Request{Tenant: "a", Policies: old}); err == nil {
		t.Error("another controller admitted a request naming this controller's set; want an error")
	}
	if err := other.Install(old); err == nil {
		t.Error("another controller installed this controller's set; want an error")
	}
	if _, err := old.WithTenant("a", &limits.TenantPlan{Plan: "nope"}); err == nil {
		t.Error(`WithTenant with an unknown plan: nil error; want one`)
	}
	var rej *admission.Rejection
	if _, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Policies: old}); !errors.As(err, &rej) || rej.Status.Limit != 5 {
		t.Errorf("sixth request by the set of limit 5: %v; want a rejection by limit 5", err)
	}
}
