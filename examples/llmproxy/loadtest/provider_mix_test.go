package main

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

func TestMaxMinFair(t *testing.T) {
	for _, tc := range []struct {
		demand   []int64
		capacity int64
		want     []int64
	}{
		// The light tenants' demand is met; the heavy split the rest.
		{[]int64{105, 105, 12, 12}, 100, []int64{38, 38, 12, 12}},
		{[]int64{10, 10, 10, 10}, 100, []int64{10, 10, 10, 10}},
		{[]int64{50, 50}, 60, []int64{30, 30}},
		{[]int64{0, 40}, 30, []int64{0, 30}},
	} {
		if got := maxMinFair(tc.demand, tc.capacity); !slices.Equal(got, tc.want) {
			t.Errorf("maxMinFair(%v, %d) = %v; want %v", tc.demand, tc.capacity, got, tc.want)
		}
	}
	// Served at the fair shares: Jain's index 1; the light starved: low.
	if j := jain(fairRatios([]int64{38, 38, 12, 12}, []int64{105, 105, 12, 12})); j < 0.999 {
		t.Errorf("Jain at the fair shares = %v; want 1", j)
	}
	if j := jain(fairRatios([]int64{47, 47, 3, 3}, []int64{105, 105, 12, 12})); j > 0.8 {
		t.Errorf("Jain with the light tenants starved = %v; want below 0.8", j)
	}
}

// The provider-mix policy file is the README's setup: valid, both
// policies on the upstream store, queued, fair by tenant by default.
func TestMixPolicy(t *testing.T) {
	f, err := config.Parse("provider-mix", []byte(mixPolicy(200, 10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Upstreams) != 1 || len(f.Config.Policies) != 2 || len(f.Config.Plans.Tenants) != len(mixTenants) {
		t.Fatalf("%d stores, %d policies, %d tenants", len(f.Upstreams), len(f.Config.Policies), len(f.Config.Plans.Tenants))
	}
	for _, p := range f.Config.Policies {
		if p.Store != "openai" || p.Queue.Size != 200 || p.Queue.PerTenant != 25 {
			t.Errorf("policy %s: store %q, queue %+v; want openai, size 200, per_tenant 25", p.Name, p.Store, p.Queue)
		}
	}
	if len(mixPrompt) != 600 {
		t.Errorf("the prompt is %d bytes; want 600", len(mixPrompt))
	}
}
