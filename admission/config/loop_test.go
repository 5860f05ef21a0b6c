package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

// TestLoopPolicyFile: a loop policy (keyed by fingerprint) loads, and its
// contradictions are refused with their line: no session or tenant in
// its key, a unit other than steps, the default overflow, a budget.
func TestLoopPolicyFile(t *testing.T) {
	const ok = "version: 1\npolicies:\n" +
		"  - {name: loops, key: [tenant, session, fingerprint], algorithm: sliding_log, limit: 5, per: 2m, mode: shadow, overflow: evict}\n"
	f, err := config.Parse("loops.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Config.Policies[0]; !p.DetectsLoops() {
		t.Errorf("policy %+v: DetectsLoops = false; want true", p)
	}
	for src, want := range map[string]string{
		"{name: l, key: [tenant, fingerprint], algorithm: sliding_log, limit: 5, per: 2m, overflow: evict}":                        "policies[0].key: fingerprint must be combined with tenant and session",
		"{name: l, key: [tenant, session, fingerprint], algorithm: sliding_log, limit: 5, per: 2m}":                                "policies[0].overflow: a loop policy needs overflow: evict",
		"{name: l, key: [tenant, session, fingerprint], unit: tokens, algorithm: sliding_log, limit: 5, per: 2m, overflow: evict}": "policies[0].unit: a loop policy counts steps",
	} {
		_, err := config.Parse("bad.yaml", []byte("version: 1\npolicies:\n  - "+src+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v; want %q", src, err, want)
		}
	}
	_, err = config.Parse("bad.yaml", []byte("version: 1\npolicies:\n  - {name: l, key: [tenant, session, fingerprint], algorithm: quota, limit: 5, per: 2m, overflow: evict, budget: true}\n"))
	if err == nil || !strings.Contains(err.Error(), "policies[0].budget: a loop policy (keyed by fingerprint) cannot be a budget") {
		t.Errorf("Parse(a loop budget) = %v; want the budget refused", err)
	}
}
