package gateway_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
)

// TestMessagesCacheWritesAtTheirPrice: under a cost policy, the prompt a
// message writes to Anthropic's cache (cache_creation_input_tokens) is
// charged at the model's cache_write price, the rest of the prompt at
// the input price; the built-in table prices Claude's cache writes at
// 1.25 times its input.
func TestMessagesCacheWritesAtTheirPrice(t *testing.T) {
	for _, tt := range []struct {
		name, prices string
		write        int64 // pico-dollars per cache-written token
	}{
		{"the file's price", "prices:\n  models:\n    claude-sonnet-4-5: {input: 3, output: 15, cached_input: 0.3, cache_write: 4.5}\n", 4_500_000},
		{"the built-in price", "", 3_750_000},
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
			var m struct {
				Usage struct {
					In     int64 `json:"input_tokens"`
					Write  int64 `json:"cache_creation_input_tokens"`
					Read   int64 `json:"cache_read_input_tokens"`
					Output int64 `json:"output_tokens"`
				}
			}
			if err := json.Unmarshal(b, &m); err != nil || m.Usage.Write == 0 || m.Usage.Read != 0 {
				t.Fatalf("usage %s (%v): want a cache write and no read", b, err)
			}
			pico := m.Usage.In*3_000_000 + m.Usage.Write*tt.write + m.Usage.Output*15_000_000
			cost := (pico + 999_999) / 1_000_000
			resp, b = s.post(t, gateway.OpCountTokens, keyA, `{"model":"`+claude+`","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
			}
			want := `"spend";r=` + strconv.FormatInt(100_000_000-cost, 10) + ";"
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want) {
				t.Errorf("after the message, RateLimit = %q; want %s… (cost %d µ$ of usage %+v)", got, want, cost, m.Usage)
			}
		})
	}
}
