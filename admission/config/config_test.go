package config_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

var update = flag.Bool("update", false, "rewrite the golden files of broken policy files")

// TestBrokenFiles parses every file in testdata/broken and compares the
// errors, all reported at once with file, line, column and path, with the
// .golden file next to it.
func TestBrokenFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/broken/*.yaml")
	if len(files) == 0 {
		t.Fatal("no test files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, err := config.Load(file)
			if err == nil {
				t.Fatalf("Load(%s) = nil error; want errors", file)
			}
			var es config.Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load(%s) error %T is not config.Errors", file, err)
			}
			for _, e := range es {
				if e.File != file || e.Line == 0 {
					t.Errorf("error %q has no position", e)
				}
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("Load(%s) errors:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

func TestExampleFile(t *testing.T) {
	f, err := config.Load("../../examples/policies/example.yaml")
	if err != nil {
		t.Fatalf("Load(example.yaml) = %v", err)
	}
	if got := len(f.Config.Policies); got != 6 {
		t.Errorf("policies = %d; want 6", got)
	}
	if _, err := admission.New(f.Config); err != nil {
		t.Errorf("admission.New(example) = %v", err)
	}
	id, ok := f.Identity.Keys[apikey.Sum("sk-example-acme-ci")]
	if !ok || id.Tenant != "acme" || id.KeyID != "acme-ci" {
		t.Errorf("Lookup(acme ci key) = %+v, %v; want acme/acme-ci", id, ok)
	}
	id, ok = f.Identity.Keys[apikey.Sum("sk-example-globex")]
	if !ok || id.Tenant != "globex" || !strings.HasPrefix(id.KeyID, "key_") {
		t.Errorf("Lookup(globex key) = %+v, %v; want globex with a derived id", id, ok)
	}
	tpm := f.Config.Policies[1]
	if want := []string{"POST /v1/chat/completions", "POST /v1/embeddings"}; strings.Join(tpm.Match.Operations, ",") != strings.Join(want, ",") {
		t.Errorf("tenant-tpm operations = %q; want %q", tpm.Match.Operations, want)
	}
	if tpm.Limit != 100_000 || tpm.MaxCost != 32_000 || tpm.Unit != limits.UnitTokens {
		t.Errorf("tenant-tpm = %d/%d %s; want 100000/32000 tokens", tpm.Limit, tpm.MaxCost, tpm.Unit)
	}
	if f.HTTP.MaxBody != 1<<20 || f.HTTP.QuotaStatus != 403 || len(f.Identity.TrustedProxies) != 2 {
		t.Errorf("http/identity = %+v %+v", f.HTTP, f.Identity.TrustedProxies)
	}
}

func TestEffective(t *testing.T) {
	f, err := config.Parse("plans.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}
  - {name: inflight, key: tenant, algorithm: concurrency, limit: 4}
default_plan: basic
plans:
  basic: {}
  premium:
    rpm: {limit: 600}
    inflight: {limit: 16}
tenants:
  acme: {plan: premium, overrides: {rpm: {burst: 900}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		plan, policy string
		limit, burst int64
	}
	want := []row{
		{"-", "rpm", 60, 60}, {"-", "inflight", 4, 0},
		{"basic", "rpm", 60, 60}, {"basic", "inflight", 4, 0},
		{"premium", "rpm", 600, 600}, {"premium", "inflight", 16, 0},
		{"tenant:acme", "rpm", 600, 900}, {"tenant:acme", "inflight", 16, 0},
	}
	got := f.Effective()
	if len(got) != len(want) {
		t.Fatalf("Effective() = %d rows; want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if (row{g.Plan, g.Policy, g.Limit, g.Burst}) != w {
			t.Errorf("Effective()[%d] = %v %v %d/%d; want %v", i, g.Plan, g.Policy, g.Limit, g.Burst, w)
		}
	}
}

func TestValues(t *testing.T) {
	tests := []struct {
		limit, per, size string
		wantLimit        int64
		wantPer          time.Duration
		wantSize         int64
	}{
		{"600", "1m", "1048576", 600, time.Minute, 1 << 20},
		{"100_000", "90s", "512KiB", 100_000, 90 * time.Second, 512 << 10},
		{"100k", "1h30m", "1MiB", 100_000, 90 * time.Minute, 1 << 20},
		{"2M", "7d", "10MB", 2_000_000, 7 * 24 * time.Hour, 10_000_000},
	}
	for _, tt := range tests {
		src := "policies:\n  - {name: p, algorithm: fixed_window, limit: " + tt.limit + ", per: " + tt.per + "}\nhttp: {max_body: " + tt.size + "}\n"
		f, err := config.Parse("v.yaml", []byte(src))
		if err != nil {
			t.Errorf("Parse(limit %s, per %s, size %s) = %v", tt.limit, tt.per, tt.size, err)
			continue
		}
		p := f.Config.Policies[0]
		if p.Limit != tt.wantLimit || p.Per != tt.wantPer || f.HTTP.MaxBody != tt.wantSize {
			t.Errorf("Parse(%s, %s, %s) = %d, %v, %d; want %d, %v, %d", tt.limit, tt.per, tt.size,
				p.Limit, p.Per, f.HTTP.MaxBody, tt.wantLimit, tt.wantPer, tt.wantSize)
		}
	}
}

// FuzzParse feeds arbitrary documents to the decoder: it must never panic,
// and what it accepts must be a configuration the controller accepts too.
func FuzzParse(f *testing.F) {
	for _, file := range append(must(filepath.Glob("testdata/broken/*.yaml")), "../../examples/policies/example.yaml") {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("policies: [{name: a, algorithm: quota, period: month, limit: 1}]"))
	f.Add([]byte("a: &a [*a, *a]\npolicies: *a"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tm := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("slow input %q", data)) })
		defer tm.Stop()
		file, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %T %v is not a non-empty config.Errors", err, err)
			}
			return
		}
		var opts []admission.Option
		for _, s := range file.Stores() {
			opts = append(opts, admission.WithStore(s, memstore.Store{}))
		}
		if _, err := admission.New(file.Config, opts...); err != nil {
			t.Fatalf("Parse accepted a configuration admission.New refuses: %v", err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPrices: the prices section decodes into the table the program
// builds its prices from; without it, the built-in table applies and
// unpriced models are refused.
func TestPrices(t *testing.T) {
	const policy = "policies:\n  - {name: spend, algorithm: quota, unit: cost, period: month, limit: 100M}\n"
	f := must(config.Parse("default.yaml", []byte(policy)))
	if p := f.Prices; !p.Builtin || p.Models != nil || p.Fallback != nil {
		t.Errorf("default prices = %+v; want the built-in table and refuse", p)
	}
	f = must(config.Parse("prices.yaml", []byte(policy+`prices:
  builtin: false
  unpriced: fallback
  fallback: {input: 10, output: 30.5}
  models:
    gpt-4o-mini: {input: 0.15, output: 0.6, cached_input: 0.075, batch_discount: 0.5}
    claude-sonnet-4: {input: 3, output: 15, cached_input: 0.3, cache_write: 3.75, cache_write_1h: 6, batch_discount: 0}
    ft:gpt-4o-mini: {input: 0.3, output: 1.2}
    local-embedder: {input: 0, output: 0}
`)))
	want := config.Prices{
		Models: map[string]config.Price{
			"gpt-4o-mini":     {Input: 0.15, Output: 0.6, CachedInput: 0.075, BatchDiscount: 0.5},
			"claude-sonnet-4": {Input: 3, Output: 15, CachedInput: 0.3, CacheWrite: 3.75, CacheWrite1h: 6},
			"ft:gpt-4o-mini":  {Input: 0.3, Output: 1.2},
			"local-embedder":  {},
		},
		Fallback: &config.Price{Input: 10, Output: 30.5},
	}
	got := f.Prices
	if got.Builtin || len(got.Models) != len(want.Models) || got.Fallback == nil || *got.Fallback != *want.Fallback {
		t.Fatalf("prices = %+v; want %+v", got, want)
	}
	for name, p := range want.Models {
		if got.Models[name] != p {
			t.Errorf("prices.models[%q] = %+v; want %+v", name, got.Models[name], p)
		}
	}
	// The example of the package documentation.
	f = must(config.Parse("doc.yaml", []byte(policy+`prices:
  builtin: true       # start from the built-in list prices (the default)
  unpriced: fallback  # refuse (the default), or charge the fallback price
  fallback: {input: 10, output: 30}
  models:             # replace or add entries, in US dollars per million tokens
    gpt-4o-mini: {input: 0.15, output: 0.60, cached_input: 0.075, batch_discount: 0.5}
    claude-sonnet-4: {input: 3, output: 15, cached_input: 0.30, cache_write: 3.75}
    ft:gpt-4o-mini: {input: 0.30, output: 1.20}
    llama-3.3-70b: {input: 0.59, output: 0.79}
`)))
	if p := f.Prices; !p.Builtin || len(p.Models) != 4 || p.Fallback == nil || p.Models["ft:gpt-4o-mini"].Output != 1.2 {
		t.Errorf("documented prices = %+v; want the built-in table, 4 models and a fallback", p)
	}
	f = must(config.Parse("refuse.yaml", []byte(policy+"prices: {unpriced: refuse, models: {llama: {input: 1, output: 2}}}\n")))
	if p := f.Prices; !p.Builtin || p.Fallback != nil || p.Models["llama"] != (config.Price{Input: 1, Output: 2}) {
		t.Errorf("refuse prices = %+v; want the built-in table, llama and no fallback", p)
	}
}

// metrics.top_tenants of 0 is refused by the file, as metrics.WithTopK
// would refuse it at start.
func TestTopTenantsAtLeastOne(t *testing.T) {
	_, err := config.Parse("m.yaml", []byte("version: 1\npolicies:\n  - {name: rpm, algorithm: token_bucket, limit: 1, per: 1s}\nmetrics: {top_tenants: 0}\n"))
	if err == nil || !strings.Contains(err.Error(), "metrics.top_tenants: must be between 1 and") {
		t.Errorf("top_tenants: 0: %v; want it refused", err)
	}
}

// Reading policy files must not link the OpenTelemetry and Prometheus
// modules, nor any adapter, nor the file watcher: package config is the
// schema and its decoder, and the packages that act on a section
// (httpadmitfile, metrics.Expose, reload) read it from the File.
func TestNoAdapterDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		adapter := false
		for _, a := range []string{"admission/httpadmit", "admission/echoadmit", "admission/httpretry", "admission/redisstore", "admission/reload", "metrics", "shadow", "weights"} {
			adapter = adapter || strings.HasPrefix(p, "github.com/sluicehq/sluice/"+a)
		}
		if adapter || strings.HasPrefix(p, "go.opentelemetry.io/") || strings.HasPrefix(p, "github.com/prometheus/") || strings.HasPrefix(p, "github.com/fsnotify/") {
			t.Errorf("admission/config depends on %s", p)
		}
	}
}
