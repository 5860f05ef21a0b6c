package main

import (
	"errors"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// A policy file with an upstream store: the proxy learns the simulated
// provider's limits (--sim-rpm) from its headers and keeps inside them,
// absorbs the provider's 429 once, and exports what it learned and what
// became of the 429s under the names the runbook uses.
func TestProviderLimits(t *testing.T) {
	clk := admissiontest.NewClock(time.Now())
	s := startProxy(t, withPolicy(t, `  - name: provider-rpm
    store: openai
    key: [model]
    algorithm: token_bucket
    limit: 1000
    per: 1m
    queue: {size: 10, timeout: 10s}
`, []string{"a"}, "stores:\n  openai: {kind: upstream}\n"), func(o *options) {
		o.clock = clk
		o.simLimits = upstream.Limits{Requests: 2, Window: time.Second}
	})
	c := sdk(s, testKey("a"))
	for i := range 2 {
		if _, err := c.Chat.Completions.New(ctxT(t, 10*time.Second), chatParams("hi")); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if v := scrape(t, s, "llmproxy_provider_budget_limit", "store", "openai", "group", "gpt-4o-mini", "dimension", "requests"); v != 2 {
		t.Errorf("llmproxy_provider_budget_limit = %v; want 2", v)
	}
	if v := scrape(t, s, "llmproxy_provider_budget_remaining", "store", "openai", "group", "gpt-4o-mini", "dimension", "requests"); v != 0 {
		t.Errorf("llmproxy_provider_budget_remaining = %v; want 0", v)
	}
	// The third request waits for the provider's budget, then a provider
	// that refuses it twice has its 429 reach the client.
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(ctxT(t, 10*time.Second), chatParams("hi"), option.WithHeader("X-Sim-Fault", "429"))
		done <- err
	}()
	for range 2 {
		eventually(t, 10*time.Second, "a request waiting in the queue", func() bool {
			st := s.ctl.Stats()
			return len(st) > 0 && st[0].Queued == 1
		})
		clk.Advance(time.Second)
	}
	var apiErr *openai.Error
	if err := <-done; !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("a provider refusing twice: %v; want its 429", err)
	}
	if n := s.sim.Limited(); n != 0 {
		t.Errorf("the provider's limits refused %d requests; want none: the gateway keeps inside what it learned", n)
	}
	for outcome, want := range map[string]float64{"absorbed": 1, "passed_through": 1, "refused": 0} {
		if v := scrape(t, s, "llmproxy_provider_throttled_total", "outcome", outcome); v != want {
			t.Errorf("llmproxy_provider_throttled_total{outcome=%q} = %v; want %v", outcome, v, want)
		}
	}
}
