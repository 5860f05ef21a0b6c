package main

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// upstreamPolicy publishes the provider's budget, four requests a minute
// for each model, on the upstream store openai.
const upstreamPolicy = `
  - name: provider-rpm
    store: openai
    key: [model]
    algorithm: sliding_window
    limit: 4
    per: 1m
`

// TestReplicasShareProviderBudget starts two replicas with --redis on one
// Redis server and an upstream store in the policy file: the provider's
// published budget holds across both (its static part is kept on Redis),
// and the fifth request is refused by whichever replica it reaches,
// whatever tenant sends it.
func TestReplicasShareProviderBudget(t *testing.T) {
	srv := redistest.Start(t)
	policy := withPolicy(t, upstreamPolicy, []string{"acme", "globex"}, "stores:\n  openai: {kind: upstream}\n")
	useRedis := func(o *options) { o.redis = srv.Addr }
	a := startProxy(t, policy, useRedis)
	b := startProxy(t, policy, useRedis)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`
	for i, s := range []*server{a, b, a, b} {
		resp, out := post(t, s, "/v1/chat/completions", testKey([]string{"acme", "globex"}[i/2]), body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s; want 200", i, resp.StatusCode, out)
		}
	}
	for _, s := range []*server{a, b} {
		resp, out := post(t, s, "/v1/chat/completions", testKey("globex"), body)
		checkError(t, "fifth request", resp, out, http.StatusTooManyRequests, "rate_limit_exceeded")
	}
	if n := scrape(t, b, "admission_store_duration_seconds_count", `store="upstream"`); n < 2 {
		t.Errorf("replica b made %v Redis calls for the provider's budget; want its decisions made there", n)
	}
}
