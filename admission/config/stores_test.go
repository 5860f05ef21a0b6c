package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

// The stores section declares upstream stores; the policies on them are
// keyed as the store groups its budgets, and the file still lists them
// among the stores the program registers.
func TestUpstreamStores(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       map[string]config.Upstream
	}{
		{"by model, defaults", `
stores:
  openai: {kind: upstream}
policies:
  - {name: tpm, store: openai, key: [model], unit: tokens, algorithm: sliding_window, limit: 2M, per: 1m}
`, map[string]config.Upstream{"openai": {}}},
		{"whole upstream, every field", `
stores:
  azure: {kind: upstream, group_by: upstream, max_groups: 8, pause: 2s, max_pause: 1m, remaining_ttl: 30s}
policies:
  - {name: rpm, store: azure, algorithm: token_bucket, limit: 600, per: 1m}
  - {name: tpm, store: azure, key: [global], unit: tokens, algorithm: token_bucket, limit: 100k, per: 1m}
`, map[string]config.Upstream{"azure": {GroupBy: config.GroupByUpstream, MaxGroups: 8, Pause: 2 * time.Second, MaxPause: time.Minute, RemainingTTL: 30 * time.Second}}},
		{"adaptive concurrency", `
stores:
  openai: {kind: upstream, adaptive_concurrency: {min: 4, tolerance: 2, smoothing: 0.5, window: 300}}
policies:
  - {name: cap, store: openai, key: [model], algorithm: concurrency, limit: 64}
`, map[string]config.Upstream{"openai": {Adaptive: &config.Adaptive{Min: 4, Tolerance: 2, Smoothing: 0.5, Window: 300}}}},
		{"none", `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 600, per: 1m}
`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := config.Parse("stores.yaml", []byte("version: 1"+tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Upstreams) != len(tc.want) {
				t.Fatalf("Upstreams = %+v; want %+v", f.Upstreams, tc.want)
			}
			for name, w := range tc.want {
				if got, ok := f.Upstreams[name]; !ok || !reflect.DeepEqual(got, w) {
					t.Errorf("Upstreams[%q] = %+v; want %+v", name, got, w)
				}
				if stores := f.Stores(); len(stores) != 1 || stores[0] != name {
					t.Errorf("Stores() = %q; want [%q]", stores, name)
				}
			}
		})
	}
	if config.GroupByModel.String() != "model" || config.GroupByUpstream.String() != "upstream" {
		t.Errorf("Grouping names: %s, %s", config.GroupByModel, config.GroupByUpstream)
	}
}
