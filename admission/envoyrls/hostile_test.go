package envoyrls_test

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
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

// TestUnknownRefusalNoRetryAfter: a descriptor refused because no rule
// matches it is refused whenever it comes again: the answer advises no
// Retry-After, alone or beside a limit that does.
func TestUnknownRefusalNoRetryAfter(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
unknown: over_limit
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
`), rigOption{srvOpts: []envoyrls.Option{envoyrls.WithUnknownDomain(rlsconfig.OverLimit)}})
	for _, c := range []struct {
		name   string
		domain string
		ds     []*rlv3.RateLimitDescriptor
		want   string
	}{
		{"unknown descriptor", "api", []*rlv3.RateLimitDescriptor{desc("other", "x")}, ""},
		{"unknown domain", "nowhere", []*rlv3.RateLimitDescriptor{desc("tenant", "a")}, ""},
		{"tenant spent", "api", []*rlv3.RateLimitDescriptor{desc("tenant", "b"), desc("tenant", "b")}, "60"},
		{"tenant spent and unknown", "api", []*rlv3.RateLimitDescriptor{desc("tenant", "b"), desc("tenant", "b"), desc("other", "x")}, "60"},
	} {
		resp := r.call(c.domain, c.ds...)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s = %s; want OVER_LIMIT", c.name, outcome(resp))
		}
		if got := header(resp, "retry-after"); got != c.want {
			t.Errorf("%s: retry-after = %q; want %q", c.name, got, c.want)
		}
	}
}

// TestEarlyActualRefusedFigures: an estimate whose actual was charged
// first is a check of one unit; when another descriptor refuses the call,
// its status reports what the partition holds, not the estimate given
// back.
func TestEarlyActualRefusedFigures(t *testing.T) {
	r := start(t, mustParse(t, `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, counts: tokens}
  - key: route
    value: /blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`), rigOption{})
	r.call("llm", hits(desc("tenant", "a", envoyrls.PhaseKey, "response", envoyrls.RequestIDKey, "r1"), 60))
	resp := r.call("llm", hits(desc("tenant", "a", envoyrls.RequestIDKey, "r1"), 50), desc("route", "/blocked"))
	if got := outcome(resp); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("call = %s; want OVER_LIMIT: OK OVER_LIMIT", got)
	}
	if got := resp.Statuses[0].LimitRemaining; got != 40 {
		t.Errorf("remaining = %d; want 40 (100 less the 60 charged)", got)
	}
	if got := header(resp, "x-ratelimit-remaining"); got != "40" {
		t.Errorf("x-ratelimit-remaining = %q; want 40", got)
	}
	if got := r.call("llm", hits(desc("tenant", "a"), 0)).Statuses[0].LimitRemaining; got != 40 {
		t.Errorf("remaining after = %d; want 40", got)
	}
}

// TestRulesAndPoliciesOneSnapshot: a call is decided by the policies
// compiled with the rules it matched, even while the controller's
// installed set is being replaced (here: emptied, as a reload swapping
// the controller's set before the server's rules would leave it).
func TestRulesAndPoliciesOneSnapshot(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
`), rigOption{})
	if err := r.ctl.SetConfig(admission.Config{}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		if got := outcome(r.call("api", desc("tenant", "a"))); got != want {
			t.Errorf("call %d = %s; want %s", i+1, got, want)
		}
	}
}
