package gateway_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// accountingPrompt is an English prompt of about 600 bytes.
var accountingPrompt = strings.Repeat("Summarize the quarterly report for the board in three short bullet points, please. ", 7)

// TestProviderAccountingLearned: the simulated provider's limiter counts
// prompts from their characters, far above (2 bytes a token) or below (8)
// the gateway's exact BPE count, and its tokens per minute are the
// policy's limit. The gateway learns the ratio from the provider's
// headers and reserves in the provider's units: of the requests it sends
// over two minutes of overload, at most 1% meet a provider 429, and the
// provider's budget is used to at least 80% (a request refused waits for
// the next of the sender's 100 ms steps: about 50 ms of the provider's
// refill lost a request, 5 to 13%). Reserving the exact estimate, a
// provider counting more refuses a large part of them; one counting less
// is used at about 60%.
func TestProviderAccountingLearned(t *testing.T) {
	for _, charsPerToken := range []float64{2, 8} {
		t.Run(fmt.Sprint("chars_per_token=", charsPerToken), func(t *testing.T) {
			const tpm = 20_000
			clk := admissiontest.NewClock(time.Now())
			sim := upstream.New(upstream.Config{OutputTokens: 1 << 12, Limits: upstream.Limits{Tokens: tpm, CharsPerToken: charsPerToken}}, upstream.WithClock(clk))
			pg := newProviderGateway(t, sim, `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 20000, per: 1m}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`, clk)
			body := `{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":"` + accountingPrompt + `"}]}`
			// The provider's count: (3+3 bytes and the prompt's) over
			// charsPerToken, and max_tokens.
			perRequest := int64(math.Ceil(float64(6+len(accountingPrompt))/charsPerToken)) + 50
			var served int64
			for range 1200 { // 10 a second for two minutes: several times the provider's rate
				status, answer, err := sendBody(pg.url, body)
				if err != nil {
					t.Fatal(err)
				}
				if status == 200 {
					served++
				} else if status != 429 {
					t.Fatalf("status %d: %s", status, answer)
				}
				clk.Advance(100 * time.Millisecond)
			}
			sent, limited := sim.Requests(), sim.Limited()
			capacity := float64(tpm + 2*tpm) // the full bucket, and two minutes' refill
			used := float64((sent-limited)*perRequest) / capacity
			t.Logf("served %d, sent to the provider %d, provider 429s %d, provider budget used %.1f%%, ratio learned %.2f",
				served, sent, limited, 100*used, pg.prov.Store("openai").Ratio("gpt-4o"))
			if float64(limited) > 0.01*float64(sent) || used < 0.8 {
				t.Errorf("provider 429s %d of %d sent, %.3f of its budget used; want at most 1%% and at least 0.8", limited, sent, used)
			}
		})
	}
}
