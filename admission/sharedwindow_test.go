package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestWindowOfOtherLengthKeepsCount: a window partition's count is not
// forgotten when a request judges it with another window length: a
// reload that lengthens the window, or a plan that gives some tenants a
// longer window on a partition they share with others (a policy keyed by
// model). Otherwise two tenants taking turns on a shared partition reset
// its count at every request, and neither is ever refused.
func TestWindowOfOtherLengthKeepsCount(t *testing.T) {
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch.Add(30 * time.Second))
			c, err := admission.New(admission.Config{
				Policies: []admission.Policy{{Name: "per-model", Key: []limits.KeyPart{limits.KeyModel}, Algorithm: alg, Limit: 4, Per: time.Minute}},
				Plans: limits.Plans{
					Plans:   map[string]map[string]limits.Override{"hourly": {"per-model": {Per: time.Hour}}},
					Tenants: map[string]limits.TenantPlan{"b": {Plan: "hourly"}},
				},
			}, admission.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			admitted := 0
			for i := 0; i < 40; i++ {
				tenant := []string{"a", "b"}[i%2]
				if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: tenant, Model: "m"}); err == nil {
					tk.Done()
					admitted++
				}
			}
			if admitted != 4 {
				t.Errorf("admitted %d of 40 requests of two tenants taking turns on a partition of limit 4; want 4", admitted)
			}

			// A reload that lengthens the window keeps the count of the
			// window in progress.
			cfg := admission.Config{Policies: []admission.Policy{{Name: "per-model", Key: []limits.KeyPart{limits.KeyModel}, Algorithm: alg, Limit: 4, Per: 2 * time.Minute}}}
			if err := c.SetConfig(cfg); err != nil {
				t.Fatal(err)
			}
			got := ""
			for i := 0; i < 4; i++ {
				_, err := c.TryAdmit(ctx, admission.Request{Tenant: "a", Model: "m"})
				got += fmt.Sprint(err == nil, " ")
			}
			if got != "false false false false " {
				t.Errorf("after a reload to a 2m window, TryAdmit x4 admitted = %s; want none (the 4 of this minute count)", got)
			}
		})
	}
}
