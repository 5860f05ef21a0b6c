package main

import (
	"net/http"
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
// policies on the upstream store, queued, fair by tenant by default; for
// clients without max_tokens its models section reserves what the
// provider counts for them.
func TestMixPolicy(t *testing.T) {
	f, err := config.Parse("provider-mix", []byte(mixPolicy(200, 10*time.Second, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Models) != 0 {
		t.Errorf("models section %v; want none", f.Models)
	}
	g, err := config.Parse("provider-mix", []byte(mixPolicy(200, 10*time.Second, mixDefaultMaxTokens)))
	if err != nil {
		t.Fatal(err)
	}
	if m := g.Models["gpt-4o-mini"]; len(g.Models) != 1 || m.DefaultMaxTokens != mixDefaultMaxTokens {
		t.Errorf("models section %v; want gpt-4o-mini: %d", g.Models, mixDefaultMaxTokens)
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

// A refusal is retried after its retry-after-ms (else its Retry-After)
// unless it says not to retry or its hint is beyond what the SDKs wait.
func TestRetryHint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header map[string]string
		wait   time.Duration
		retry  bool
	}{
		{"retry-after-ms", map[string]string{"Retry-After-Ms": "1500", "Retry-After": "2"}, 1500 * time.Millisecond, true},
		{"retry-after alone", map[string]string{"Retry-After": "2"}, 2 * time.Second, true},
		{"at once", map[string]string{"Retry-After-Ms": "0"}, 0, true},
		{"x-should-retry false", map[string]string{"Retry-After-Ms": "10", "X-Should-Retry": "false"}, 0, false},
		{"past a minute", map[string]string{"Retry-After-Ms": "61000", "Retry-After": "61"}, 0, false},
		{"no hint", nil, 0, false},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		if wait, retry := retryHint(h); retry != tc.retry || retry && wait != tc.wait {
			t.Errorf("%s: retryHint = %v, %v; want %v, %v", tc.name, wait, retry, tc.wait, tc.retry)
		}
	}
}
