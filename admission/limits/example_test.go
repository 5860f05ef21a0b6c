package limits_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// A Config is checked before any controller sees it; every problem is
// reported at once, with its path.
func ExampleConfig_Validate() {
	cfg := limits.Config{
		Policies: []limits.Policy{
			{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
				Algorithm: limits.TokenBucket, Limit: 100_000, Per: time.Minute},
			{Name: "inflight", Algorithm: limits.Concurrency, Limit: 0, Per: time.Second},
		},
		Plans: limits.Plans{Plans: map[string]map[string]limits.Override{
			"pro": {"tpm": {Limit: 1_000_000}, "rpm": {Limit: 600}},
		}},
	}
	fmt.Println(cfg.Validate())
	// Output:
	// policies[1].limit: must be > 0, got 0
	// policies[1].per: a concurrency limit has no period
	// plans.pro.rpm: no such policy
}

// Base gives a partition's figures; a plan's Override changes them.
func ExampleOverride_Apply() {
	p := limits.Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 60, Per: time.Minute}
	base := p.Base()
	pro := limits.Override{Limit: 600}.Apply(base)
	fmt.Println(base.Capacity(), base.Window(), base.Horizon(time.Unix(0, 0)))
	fmt.Println(pro.Capacity(), pro.Window(), pro.Horizon(time.Unix(0, 0)))
	// Output:
	// 60 1m0s 2m0s
	// 600 1m0s 2m0s
}
