package limits_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// TestOverrideSlidingLogBound: a plan or a tenant cannot lift a sliding
// log's limit past the bound its policy has (one entry is kept per
// admission, so the bound is the memory one partition may take).
func TestOverrideSlidingLogBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plans limits.Plans
		want  string
	}{
		{"plan", limits.Plans{Plans: map[string]map[string]limits.Override{"big": {"log": {Limit: 2_000_000}}}}, "plans.big.log.limit"},
		{"tenant", limits.Plans{Tenants: map[string]limits.TenantPlan{"acme": {Overrides: map[string]limits.Override{"log": {Limit: limits.MaxAmount}}}}}, "tenants.acme.overrides.log.limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := limits.Config{
				Policies: []limits.Policy{{Name: "log", Algorithm: limits.SlidingLog, Limit: 100, Per: time.Minute}},
				Plans:    tc.plans,
			}
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v; want an error at %s", err, tc.want)
			}
		})
	}
	ok := limits.Config{
		Policies: []limits.Policy{{Name: "log", Algorithm: limits.SlidingLog, Limit: 100, Per: time.Minute}},
		Plans:    limits.Plans{Plans: map[string]map[string]limits.Override{"big": {"log": {Limit: 1_000_000}}}},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate() with the bound itself = %v; want nil", err)
	}
}
