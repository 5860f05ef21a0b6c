package gateway_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/weights"
)

// sharedBudgetFile publishes the provider's budget of 10 requests a
// minute per model on an upstream store, without a queue.
var sharedBudgetFile = `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-rpm, store: openai, key: [model], algorithm: sliding_window, limit: 10, per: 1m}
tenants:
  acme: {api_keys: [` + apikey.Sum("sk-acme").String() + `]}
identity: {anonymous: deny}
`

// Two gateways whose upstream stores keep their static budget on one
// real redis-server admit the provider's published budget once between
// them; each with its budget in memory admits it once each.
func TestSharedStaticBudget(t *testing.T) {
	srv := redistest.Start(t)
	sim := upstream.New(upstream.Config{}) // reports no limits: only the static budget holds
	for _, tc := range []struct {
		name   string
		static func() backend.Store
		want   int
	}{
		{"on Redis", func() backend.Store { return redisOn(t, srv.Addr, "upstream") }, 10},
		{"in memory", func() backend.Store { return nil }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Now())
			gws := []*providerGateway{
				newProviderGatewayOn(t, sim, sharedBudgetFile, clk, tc.static()),
				newProviderGatewayOn(t, sim, sharedBudgetFile, clk, tc.static()),
			}
			ok, refused := 0, 0
			for i := range 30 {
				switch status, body := post(t, gws[i%2].url, false); {
				case status == 200:
					ok++
				case status == 429 && strings.Contains(body, "rate_limit_exceeded"):
					refused++
				default:
					t.Fatalf("request %d: %d %s", i, status, body)
				}
			}
			if ok != tc.want || refused != 30-tc.want {
				t.Errorf("two gateways admitted %d and refused %d of 30; want %d admitted", ok, refused, tc.want)
			}
		})
	}
}

// Two gateways in front of one provider account of 100,000 tokens a
// minute (drawn down a little by the requests, 10 a second), whose
// limiter counts prompts from their characters (4 bytes a token, about
// 1.1 times the gateway's estimate with max_tokens), learn its
// accounting together on one real redis-server: a gateway that has received one answer reserves
// at the ratio the other learned from ten, and as they take turns both
// keep the provider's ratio. Each learning alone, the second keeps the
// initial ratio until it has learned five answers of its own, and as
// they take turns each sets the drop of the provider's budget its
// neighbour's requests made against its own sends: both ratios climb
// far above the provider's.
func TestSharedChargeRatio(t *testing.T) {
	const initialRatio = 1 // the store's Accounting.Initial by default
	srv := redistest.Start(t)
	body := `{"model":"gpt-4o","max_tokens":50,"messages":[{"role":"user","content":"` + accountingPrompt + `"}]}`
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	e, err := est.EstimateEndpoint(weights.EndpointChatCompletions, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	provider := math.Ceil(float64(6+len(accountingPrompt))/4) + 50
	want := provider / float64(e.TotalTokens())
	near := func(r float64) bool { return math.Abs(r-want) <= 0.02*want }
	for _, tc := range []struct {
		name   string
		static func() backend.Store
		shared bool
	}{
		{"on Redis", func() backend.Store { return redisOn(t, srv.Addr, "upstream") }, true},
		{"in memory", func() backend.Store { return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := admissiontest.NewClock(time.Now())
			sim := upstream.New(upstream.Config{OutputTokens: 1 << 12, Limits: upstream.Limits{Tokens: 100_000, CharsPerToken: 4}}, upstream.WithClock(clk))
			src := `
stores:
  openai: {kind: upstream}
policies:
  - {name: provider-tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
tenants:
  acme: {api_keys: [` + apikey.Sum("sk-acme").String() + `]}
identity: {anonymous: deny}
`
			gws := []*providerGateway{newProviderGatewayOn(t, sim, src, clk, tc.static()), newProviderGatewayOn(t, sim, src, clk, tc.static())}
			ratio := func(i int) float64 { return gws[i].prov.Store("openai").Ratio("gpt-4o") }
			call := func(i int) {
				t.Helper()
				if status, answer, err := sendBody(gws[i].url, body); err != nil || status != 200 {
					t.Fatalf("gateway %d: %d %s %v", i, status, answer, err)
				}
				clk.Advance(100 * time.Millisecond)
			}
			for range 10 {
				call(0)
			}
			if r := ratio(0); !near(r) {
				t.Fatalf("gateway 0 learned %.3f from ten answers; want the provider's %.3f", r, want)
			}
			if r := ratio(1); r != initialRatio {
				t.Errorf("gateway 1, before any answer: ratio %.3f; want the initial %v", r, initialRatio)
			}
			call(1)
			switch r := ratio(1); {
			case tc.shared && !near(r):
				t.Errorf("gateway 1 after one answer: ratio %.3f; want the fleet's %.3f", r, want)
			case !tc.shared && r != initialRatio:
				t.Errorf("gateway 1 alone after one answer: ratio %.3f; want the initial %v", r, initialRatio)
			}
			for i := range 40 {
				call(i % 2)
			}
			for i := range gws {
				t.Logf("gateway %d, the two taking turns: ratio %.3f (the provider's %.3f)", i, ratio(i), want)
				switch r := ratio(i); {
				case tc.shared && !near(r):
					t.Errorf("gateway %d, the two taking turns: ratio %.3f; want the provider's %.3f", i, r, want)
				case !tc.shared && r < 1.3*want:
					t.Errorf("gateway %d alone, the two taking turns: ratio %.3f; want far above the provider's %.3f", i, r, want)
				}
			}
		})
	}
}
