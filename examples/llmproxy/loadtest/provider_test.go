package main

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []int64
		want float64
	}{
		{[]int64{5, 5, 5, 5}, 1},
		{[]int64{8, 0, 0, 0}, 0.25},
		{[]int64{2, 2, 0, 0}, 0.5},
		{[]int64{0, 0, 0, 0}, 0},
		{[]int64{3, 1}, 0.8},
	} {
		if got := jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("jain(%v) = %v; want %v", tc.xs, got, tc.want)
		}
	}
}

// The scenario's policy files are valid, and only the guarded one puts
// the provider's budget on an upstream store.
func TestProviderPolicy(t *testing.T) {
	s := providerSetup{Tokens: 30_000, Window: 10 * time.Second, Deadline: 10 * time.Second, Queue: 200}
	for _, guard := range []bool{false, true} {
		f, err := config.Parse("scenario", []byte(providerPolicy(s, guard)))
		if err != nil {
			t.Fatalf("guard %v: %v", guard, err)
		}
		if got := len(f.Upstreams) == 1 && len(f.Config.Policies) == 2; got != guard {
			t.Errorf("guard %v: %d upstream stores, %d policies", guard, len(f.Upstreams), len(f.Config.Policies))
		}
		if len(f.Config.Plans.Tenants) != len(tenants) {
			t.Errorf("guard %v: %d tenants; want %d", guard, len(f.Config.Plans.Tenants), len(tenants))
		}
	}
}
