package config_test

import (
	"reflect"
	"strings"
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
		{"charge ratio", `
stores:
  openai: {kind: upstream, charge_ratio: {initial: 1.3, min: 1.3, max: 3, window: 20}}
policies:
  - {name: tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 2M, per: 1m}
`, map[string]config.Upstream{"openai": {ChargeRatio: config.ChargeRatio{Initial: 1.3, Min: 1.3, Max: 3, Window: 20}}}},
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
	// A queue guarding a provider is shared fairly by default: one tenant
	// fills at most an eighth of it, unless the file says otherwise.
	f, err := config.Parse("stores.yaml", []byte(`version: 1
stores:
  openai: {kind: upstream}
policies:
  - {name: tpm, store: openai, key: [model], unit: tokens, algorithm: token_bucket, limit: 2M, per: 1m, queue: {size: 200}}
  - {name: rpm, store: openai, key: [model], algorithm: token_bucket, limit: 10k, per: 1m, queue: {size: 200, per_tenant: 200}}
  - {name: own, key: [tenant], algorithm: token_bucket, limit: 10k, per: 1m, queue: {size: 200}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{25, 200, 0} {
		if got := f.Config.Policies[i].Queue.PerTenant; got != want {
			t.Errorf("policies[%d].queue.per_tenant = %d; want %d", i, got, want)
		}
	}
	if config.GroupByModel.String() != "model" || config.GroupByUpstream.String() != "upstream" {
		t.Errorf("Grouping names: %s, %s", config.GroupByModel, config.GroupByUpstream)
	}
}

// A store of kind redis names its server by one address, or by the
// variable holding it, never with credentials in the file; each mistake
// is refused with its line.
func TestRedisStores(t *testing.T) {
	const policy = "\npolicies:\n  - {name: rpm, store: shared, key: [tenant], algorithm: fixed_window, limit: 10, per: 1m}\n"
	f, err := config.Parse("stores.yaml", []byte(`version: 1
stores:
  shared: {kind: redis, address_env: SLUICE_REDIS_URL, prefix: "svc:", timeout: 250ms}
  other: {kind: redis, address: "127.0.0.1:6379"}`+policy))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Redis{
		"shared": {AddressEnv: "SLUICE_REDIS_URL", Prefix: "svc:", Timeout: 250 * time.Millisecond},
		"other":  {Address: "127.0.0.1:6379"},
	}
	if !reflect.DeepEqual(f.Redis, want) {
		t.Errorf("Redis = %+v; want %+v", f.Redis, want)
	}
	if len(f.Upstreams) != 0 {
		t.Errorf("Upstreams = %+v; want none", f.Upstreams)
	}
	refused := []struct{ entry, want string }{
		{`{kind: redis}`, "stores.yaml:3:11: stores.shared.address: missing"},
		{`{kind: redis, address: "a:1", address_env: A}`, "stores.yaml:3:41: stores.shared.address_env: give address or address_env, not both"},
		{`{kind: redis, address: "redis://u:secret@h:1"}`, `stores.yaml:3:25: stores.shared.address: "redis://u:xxxxx@h:1" holds credentials`},
		{`{kind: redis, address_env: "A B"}`, `stores.yaml:3:25: stores.shared.address_env: "A B" is not an environment variable name`},
		{`{kind: redis, address: "a:1", prefix: "x{"}`, `stores.yaml:3:41: stores.shared.prefix: "x{" must not contain`},
		{`{kind: redis, address: "a:1", group_by: model}`, "stores.yaml:3:41: stores.shared.group_by: a store of kind redis has no group_by"},
		{`{kind: upstream, timeout: 1s}`, "stores.yaml:3:28: stores.shared.timeout: a store of kind upstream has no timeout"},
		{`{kind: redis, address: "a:1", adress: b}`, `stores.yaml:3:41: stores.shared.adress: unknown key "adress"`},
		{`{kind: upstream, charge_ratio: {min: 2, max: 1}}`, "stores.shared.charge_ratio.min: 2 is above max 1"},
		{`{kind: upstream, charge_ratio: {initial: 0}}`, "stores.shared.charge_ratio.initial"},
		{`{kind: redsi, address: "a:1"}`, `stores.yaml:3:12: stores.shared.kind: unknown kind "redsi" (want upstream or redis)`},
	}
	for _, tc := range refused {
		_, err := config.Parse("stores.yaml", []byte("version: 1\nstores:\n  shared: "+tc.entry+policy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(stores: {shared: %s}) = %v; want an error containing %q", tc.entry, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Parse(stores: {shared: %s}) = %v; the error shows the password", tc.entry, err)
		}
	}
}

// TestStoreFractionsRefuseNaN refuses a NaN (or infinite) figure in a
// store's adaptive_concurrency and charge_ratio: NaN passes every
// range comparison, and a provider budget reserved through a NaN ratio
// would be no figure at all.
func TestStoreFractionsRefuseNaN(t *testing.T) {
	const policy = "\npolicies:\n  - {name: tpm, key: model, algorithm: token_bucket, unit: tokens, limit: 1000, per: 1m, store: shared}\n"
	for _, entry := range []struct{ field, yaml string }{
		{"adaptive_concurrency.tolerance", "adaptive_concurrency: {tolerance: .nan}"},
		{"adaptive_concurrency.smoothing", "adaptive_concurrency: {smoothing: NaN}"},
		{"charge_ratio.initial", "charge_ratio: {initial: .NaN}"},
		{"charge_ratio.min", "charge_ratio: {min: nan}"},
		{"charge_ratio.max", "charge_ratio: {max: +Inf}"},
	} {
		_, err := config.Parse("stores.yaml", []byte("stores:\n  shared: {kind: upstream, "+entry.yaml+"}"+policy))
		if want := "stores.shared." + entry.field; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v; want an error at %s", entry.yaml, err, want)
		}
	}
}
