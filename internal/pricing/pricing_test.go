package pricing_test

import (
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/weights"
)

func TestTable(t *testing.T) {
	f, err := config.Parse("prices.yaml", []byte(`version: 1
policies:
  - {name: spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 5M}
prices:
  unpriced: fallback
  fallback: {input: 10, output: 30}
  models:
    llama-3.3-70b: {input: 0.59, output: 0.79}
    claude-sonnet-4: {input: 3, output: 15, cached_input: 0.3, cache_write: 3.75, batch_discount: 0.5}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pricing.Table(f.Prices)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model string
		want  weights.Price
		src   weights.PriceSource
	}{
		{"llama-3.3-70b", weights.Price{Input: 0.59, Output: 0.79}, weights.PriceListed},
		{"claude-sonnet-4-5", weights.Price{Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6, BatchDiscount: 0.5}, weights.PriceListed},
		{"gpt-4o-mini", weights.DefaultPrices()["gpt-4o-mini"], weights.PriceListed},
		{"ft:gpt-4o-mini-2024-07-18:acme::abc123", weights.DefaultPrices()["gpt-4o-mini"], weights.PriceBaseModel},
		{"my-local-model", weights.Price{Input: 10, Output: 30}, weights.PriceFallback},
	} {
		got, src, ok := p.Resolve(tc.model)
		if !ok || got != tc.want || src != tc.src {
			t.Errorf("Resolve(%q) = %+v, %v, %v; want %+v, %v, true", tc.model, got, src, ok, tc.want, tc.src)
		}
	}
}
