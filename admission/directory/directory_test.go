package directory_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

func newDir(t *testing.T) *directory.Directory {
	t.Helper()
	f, err := config.Parse("p.yaml", []byte(`policies:
  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}
  - {name: c.x, key: [tenant], algorithm: concurrency, limit: 4}
directory: {source: postgres}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, httpadmit.FileOptions(f)...)
	if err != nil {
		t.Fatal(err)
	}
	d, err := directory.New(directory.Config{Next: mw, Controller: ctl, Source: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(f); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestInstallRefusesEntries: each bad entry is left out by itself (names
// with dots included), the rest installed.
func TestInstallRefusesEntries(t *testing.T) {
	d := newDir(t)
	data := &directory.Data{
		Plans: limits.Plans{
			Default: "gold",
			Plans: map[string]map[string]limits.Override{
				"a.b": {"rpm": {Limit: 10}, "c.x": {Burst: 2}},
				"a":   {"rpm": {Limit: 20}},
			},
			Tenants: map[string]limits.TenantPlan{
				"t.1":       {Plan: "a.b", Overrides: map[string]limits.Override{"c.x": {Limit: -1}, "rpm": {Limit: 7}}},
				"t.2":       {Plan: "nope"},
				"anonymous": {},
			},
		},
		Keys: map[config.KeyHash]config.Key{
			config.HashKey("k1"): {Tenant: "t.1", KeyID: "k1"},
			config.HashKey("k2"): {Tenant: "anonymous", KeyID: "k2"},
		},
	}
	err := d.Install(data)
	if !errors.Is(err, directory.ErrRefused) {
		t.Fatalf("Install = %v; want ErrRefused", err)
	}
	for _, want := range []string{
		`db: default_plan: no plan "gold"`,
		"db: plans.a.b.c.x.burst: only a token_bucket has a burst",
		"db: tenants.t.1.overrides.c.x.limit: must be > 0, got -1",
		`db: tenants.t.2.plan: no plan "nope"`,
		"db: tenants.anonymous: \"anonymous\" is the anonymous tenant",
		"db: keys.key_",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install error lacks %q:\n%v", want, err)
		}
	}
	got := d.Data()
	want := map[string]limits.TenantPlan{"t.1": {Plan: "a.b", Overrides: map[string]limits.Override{"rpm": {Limit: 7}}}}
	if len(got.Plans.Tenants) != 1 || got.Plans.Tenants["t.1"].Plan != "a.b" || len(got.Plans.Tenants["t.1"].Overrides) != 1 {
		t.Errorf("installed tenants = %+v; want %+v", got.Plans.Tenants, want)
	}
	if got.Plans.Default != "" || len(got.Plans.Plans["a.b"]) != 1 || len(got.Plans.Plans["a"]) != 1 {
		t.Errorf("installed plans = %+v, default %q", got.Plans.Plans, got.Plans.Default)
	}
	if len(got.Keys) != 1 {
		t.Errorf("installed keys = %v; want k1 only", got.Keys)
	}
	// The caller's data is not changed by the refusals.
	if data.Plans.Default != "gold" || len(data.Plans.Tenants) != 3 {
		t.Errorf("Install changed its argument: %+v", data.Plans)
	}
}

func TestSetTenantRefused(t *testing.T) {
	d := newDir(t)
	if err := d.Install(&directory.Data{Plans: limits.Plans{Plans: map[string]map[string]limits.Override{"p": {"rpm": {Limit: 9}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTenant("x", &limits.TenantPlan{Plan: "q"}); !errors.Is(err, directory.ErrRefused) || !strings.Contains(err.Error(), `tenants.x.plan: no plan "q"`) {
		t.Errorf("SetTenant(no plan) = %v", err)
	}
	if err := d.SetTenant("x", &limits.TenantPlan{Plan: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTenant("x", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Data().Plans.Tenants); n != 0 {
		t.Errorf("tenants after removal = %d; want 0", n)
	}
}

// TestApplyRefusesAnotherDirectory: a reload that moves the directory is
// refused, the running one kept.
func TestApplyRefusesAnotherDirectory(t *testing.T) {
	d := newDir(t)
	f, err := config.Parse("p.yaml", []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}\nplans: {p: {rpm: {limit: 3}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(f); err == nil || !strings.Contains(err.Error(), "directory: the section changed; a restart applies it") {
		t.Errorf("Apply(source file) = %v; want a refusal", err)
	}
}
