package gateway_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/weights"
)

// TestMessagesCacheWritesAtTheirPrice: under a cost policy, the prompt a
// message writes to Anthropic's cache (cache_creation_input_tokens) is
// charged at the model's cache_write price, the rest of the prompt at
// the input price; the built-in table prices Claude's cache writes at
// 1.25 times its input.
func TestMessagesCacheWritesAtTheirPrice(t *testing.T) {
	for _, tt := range []struct {
		name, prices string
		price        weights.Price
	}{
		{"the file's price", "prices:\n  models:\n    claude-sonnet-4-5: {input: 3, output: 15, cached_input: 0.3, cache_write: 4.5}\n", weights.Price{Input: 3, Output: 15, CacheWrite: 4.5}},
		{"the built-in price", "", weights.Price{Input: 3, Output: 15, CacheWrite: 3.75}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := anthropicGateway(t, `
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 100M}
`+tt.prices, false)
			body := `{"model":"` + claude + `","max_tokens":100,"system":[{"type":"text","text":"` + strings.Repeat("Rivers, patiently. ", 40) + `","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Why do rivers meander?"}]}`
			resp, b := s.post(t, gateway.OpMessages, keyA, body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			rep, err := weights.ReadUsage(b)
			u := rep.Usage
			if err != nil || u.CacheWriteInputTokens == 0 || u.CachedInputTokens != 0 {
				t.Fatalf("usage %s (%v): want a cache write and no read", b, err)
			}
			cost := tt.price.CostMicros(u)
			resp, b = s.post(t, gateway.OpCountTokens, keyA, `{"model":"`+claude+`","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
			}
			want := `"spend";r=` + strconv.FormatInt(100_000_000-cost, 10) + ";"
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
				t.Errorf("after the message, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, u)
			}
		})
	}
}
