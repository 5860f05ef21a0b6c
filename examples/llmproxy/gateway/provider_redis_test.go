package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/internal/redistest"
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
		{"on Redis", func() backend.Store {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			st, err := redisstore.New(c, redisstore.Config{Name: "upstream"})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}, 10},
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
