package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// TestProviderAcceptedStreamNotCut: a stream reserves 5 output tokens
// (MaxOutputReserve) and produces 300, charged at every chunk; the provider's
// budget (100 tokens a minute, on the upstream store) runs out during it.
// The provider accepted the stream and charges it whatever happens, so it
// runs to its end, its overrun charged to the provider's budget (the next
// request waits for it); a tenant policy that runs out still cuts it.
func TestProviderAcceptedStreamNotCut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tenantTPM string
		cut       bool
	}{
		{"provider budget only", "1M", false},
		{"tenant budget too", "100", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Now())
			sim := upstream.New(upstream.Config{OutputTokens: 300}, upstream.WithClock(clk))
			pg := newProviderGatewayOn(t, sim, `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 100, per: 1m}
  - {name: tenant-tpm, key: [tenant], unit: tokens, algorithm: token_bucket, limit: `+tc.tenantTPM+`, per: 1m}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`, clk, nil, func(c *gateway.Config) { c.MaxOutputReserve, c.ChargeInterval = 5, time.Nanosecond })
			status, body, err := sendBody(pg.url, `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			if err != nil {
				t.Fatal(err)
			}
			cut := strings.Contains(body, "tokens_limit_exceeded")
			if status != 200 || cut != tc.cut || cut == strings.Contains(body, "[DONE]") {
				t.Fatalf("status %d, cut %v: %s; want 200, cut %v", status, cut, body, tc.cut)
			}
			// The overrun was charged to the provider's budget: the next
			// request does not fit in it now.
			status, body, err = sendBody(pg.url, `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "X-Stainless-Timeout", "0.05")
			if err != nil {
				t.Fatal(err)
			}
			if status != 429 {
				t.Errorf("the next request: status %d: %s; want 429 (the provider's budget is spent)", status, body)
			}
		})
	}
}
