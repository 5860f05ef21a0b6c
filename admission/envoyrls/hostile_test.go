package envoyrls_test

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
)

// TestDeepDescriptorMatchesNoRule: a descriptor with more entries than any
// rule can have matches no rule, whatever its last entries are: it is
// answered by the domain's unknown setting and charges no limit.
func TestDeepDescriptorMatchesNoRule(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
unknown: over_limit
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
`), rigOption{})
	for n := rlsconfig.MaxDepth + 1; n <= rlsconfig.MaxDepth+2; n++ {
		d := &rlv3.RateLimitDescriptor{}
		for i := range n - 1 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: fmt.Sprintf("k%d", i), Value: "v"})
		}
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "tenant", Value: "a"})
		if got := outcome(r.call("api", d)); got != "OVER_LIMIT: OVER_LIMIT" {
			t.Errorf("descriptor of %d entries ending in tenant=a = %s; want OVER_LIMIT: OVER_LIMIT (no rule)", n, got)
		}
	}
	if got := outcome(r.call("api", desc("tenant", "a"))); got != "OK: OK" {
		t.Errorf("tenant=a after the deep descriptors = %s; want OK: OK (they charged nothing)", got)
	}
}

// TestBlockedUnderGlobalShadow: the global shadow switch turns every limit
// into a shadow one, requests_per_unit 0 included: it answers OK.
func TestBlockedUnderGlobalShadow(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: route
    value: /admin
    rate_limit: {unit: second, requests_per_unit: 0}
`), rigOption{})
	if got := outcome(r.call("api", desc("route", "/admin"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("blocked route = %s; want OVER_LIMIT: OVER_LIMIT", got)
	}
	r.ctl.SetAllShadow(true)
	resp := r.call("api", desc("route", "/admin"))
	if got := outcome(resp); got != "OK: OK" {
		t.Errorf("blocked route with every limit in shadow = %s; want OK: OK", got)
	}
	if got := header(resp, "retry-after"); got != "" {
		t.Errorf("retry-after = %q; want none", got)
	}
}
