package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

const dirPolicies = `policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m, max_cost: 1}
  - {name: inflight, key: [tenant], algorithm: concurrency, limit: 4}
`

func TestDirectorySection(t *testing.T) {
	f, err := config.Parse("d.yaml", []byte(dirPolicies+"directory: {source: postgres, refresh: 30s, snapshot: /tmp/dir.json}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Directory{Source: "postgres", DSNEnv: "SLUICE_DATABASE_URL", Refresh: 30 * time.Second, Snapshot: "/tmp/dir.json"}
	if f.Directory != want {
		t.Errorf("Directory = %+v; want %+v", f.Directory, want)
	}
	f, err = config.Parse("d.yaml", []byte(dirPolicies))
	if err != nil {
		t.Fatal(err)
	}
	if f.Directory != (config.Directory{Source: "file"}) {
		t.Errorf("default Directory = %+v; want source file", f.Directory)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"directory: {source: mysql}", `d.yaml:4:13: directory.source: "mysql" is not a source (want file or postgres)`},
		{"directory: {source: postgres, refresh: 10ms}", "directory.refresh: must be at least 1s, got 10ms"},
		{"directory: {source: postgres, dsn: x}", `directory.dsn: unknown key "dsn"`},
		{"directory: {source: postgres, dsn_env: 'A B'}", `directory.dsn_env: "A B" is not an environment variable name`},
		{"directory: {source: file, snapshot: /x}", "directory: dsn_env, refresh and snapshot apply to source postgres only"},
		{"directory: {source: postgres}\nplans: {basic: {rpm: {limit: 5}}}", "d.yaml:5:1: plans: not allowed with directory.source postgres"},
		{"directory: {source: postgres}\ntenants: {acme: {plan: basic}}", "tenants: not allowed with directory.source postgres"},
	} {
		_, err := config.Parse("d.yaml", []byte(dirPolicies+tc.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestCheckPlans checks a directory's plans with the messages a policy file
// with the same entries gets from Parse.
func TestCheckPlans(t *testing.T) {
	f, err := config.Parse("d.yaml", []byte(dirPolicies))
	if err != nil {
		t.Fatal(err)
	}
	pl := &limits.Plans{
		Default: "basic",
		Plans: map[string]map[string]limits.Override{
			"basic": {"rpm": {Limit: 30}},
			"bad":   {"inflight": {Burst: 3}, "nope": {Limit: 1}},
		},
		Tenants: map[string]limits.TenantPlan{
			"acme":      {Plan: "basic"},
			"ghost":     {Plan: "gold"},
			"neg":       {Overrides: map[string]limits.Override{"rpm": {Limit: -2}}},
			"anonymous": {},
			"bad\x00":   {},
		},
	}
	got := f.CheckPlans("postgres", pl).Error()
	for _, want := range []string{
		"postgres: plans.bad.inflight.burst: only a token_bucket has a burst",
		`postgres: plans.bad.nope: no such policy "nope"`,
		`postgres: tenants.ghost.plan: no plan "gold"`,
		"postgres: tenants.neg.overrides.rpm.limit: must be > 0, got -2",
		`tenants.anonymous: "anonymous" is the anonymous tenant`,
		`is not a valid tenant name`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("CheckPlans: missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "acme") {
		t.Errorf("CheckPlans reports the valid tenant acme:\n%s", got)
	}
	// The same entries in a file give the same messages.
	_, err = config.Parse("d.yaml", []byte(dirPolicies+"plans: {bad: {inflight: {burst: 3}}}\ntenants: {ghost: {plan: gold}}\n"))
	for _, want := range []string{"plans.bad.inflight.burst: only a token_bucket has a burst", `tenants.ghost.plan: no plan "gold"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse: %v; want %q", err, want)
		}
	}
	if es := f.CheckPlans("postgres", &limits.Plans{Plans: map[string]map[string]limits.Override{"basic": {"rpm": {Limit: 30}}}}); es != nil {
		t.Errorf("CheckPlans(valid) = %v; want nil", es)
	}
}
