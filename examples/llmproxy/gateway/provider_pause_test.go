package gateway_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// A provider 429 asking to retry in a day ("retry-after: 86400") pauses
// the model it came from on the account it came from, for no longer than
// the provider's own reset header says (1s from the simulator), never
// the day nor ten minutes: every tenant of the model is served again a
// second later, and the store guarding another account (grouped by
// upstream, so one pause would stop all its traffic) is not paused at
// all.
func TestProviderPauseBounded(t *testing.T) {
	clk := admissiontest.NewClock(time.Now())
	sim := upstream.New(upstream.Config{OutputTokens: 3})
	pg := newProviderGateway(t, sim, `
stores:
  openai: {kind: upstream}
  other: {kind: upstream, group_by: upstream}
policies:
  - name: provider-rpm
    store: openai
    key: [model]
    match: {routes: [/v1/chat/completions]}
    algorithm: sliding_window
    limit: 1000
    per: 1m
    queue: {size: 10, timeout: 10s}
  - name: other-rpm
    store: other
    key: [global]
    match: {routes: [/v1/embeddings]}
    algorithm: sliding_window
    limit: 1000
    per: 1m
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`, clk)
	// The provider refuses the request and its retry, asking for a day
	// each time: the retry waits for the pause (1s), then the provider's
	// second 429 reaches the client.
	status, body := queuedThen(t, pg, sim, 1, clk, time.Second, "X-Sim-Fault", "429", "X-Sim-Retry-After", "86400")
	if status != 429 {
		t.Fatalf("refused twice: status %d: %s; want the provider's 429", status, body)
	}
	now := clk.Now()
	for _, g := range pg.prov.Store("openai").Groups(now) {
		if g.Paused > time.Second {
			t.Errorf("openai group %q paused %v after retry-after 86400 with a 1s reset; want at most 1s", g.Group, g.Paused)
		}
	}
	for _, g := range pg.prov.Store("other").Groups(now) {
		if g.Paused > 0 {
			t.Errorf("the other account's group %q paused %v by a 429 it never received; want 0", g.Group, g.Paused)
		}
	}
	clk.Advance(time.Second)
	if status, body := post(t, pg.url, false, "X-Stainless-Timeout", "1"); status != 200 {
		t.Errorf("a second after the provider's reset: status %d: %s; want 200", status, body)
	}
}
