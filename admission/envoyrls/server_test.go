package envoyrls_test

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/metrics"
)

// TestAlgorithms runs every rate algorithm through descriptors: 3 a
// minute per tenant, a fourth refused with a retry-after, room again once
// the algorithm says so.
func TestAlgorithms(t *testing.T) {
	cases := []struct {
		algorithm string
		// after is when one more request fits again, from the refusal.
		after time.Duration
	}{
		{"fixed_window", time.Minute},
		{"sliding_window", 2 * time.Minute},
		{"sliding_log", time.Minute},
		{"token_bucket", 20 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.algorithm, func(t *testing.T) {
			r := start(t, mustParse(t, `
domain: api
algorithm: `+c.algorithm+`
descriptors:
  - key: tenant
    tenant: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`), rigOption{})
			for i := range 3 {
				if got := outcome(r.call("api", desc("tenant", "acme"))); got != "OK: OK" {
					t.Fatalf("call %d = %s; want OK", i+1, got)
				}
			}
			resp := r.call("api", desc("tenant", "acme"))
			if got := outcome(resp); got != "OVER_LIMIT: OVER_LIMIT" {
				t.Fatalf("call 4 = %s; want OVER_LIMIT", got)
			}
			if ra := header(resp, "retry-after"); ra == "" || ra == "0" {
				t.Errorf("retry-after = %q; want a positive wait", ra)
			}
			if got := outcome(r.call("api", desc("tenant", "other"))); got != "OK: OK" {
				t.Errorf("another tenant = %s; want OK (its own partition)", got)
			}
			r.clk.Advance(c.after)
			if got := outcome(r.call("api", desc("tenant", "acme"))); got != "OK: OK" {
				t.Errorf("after %v = %s; want OK", c.after, got)
			}
		})
	}
}

// TestWeightedHits: the request's hits_addend, and a descriptor's own,
// are the cost in the limit's unit.
func TestWeightedHits(t *testing.T) {
	r := start(t, mustParse(t, `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 1000, counts: tokens}
`), rigOption{})
	steps := []struct {
		req       *rlsv3.RateLimitRequest
		want      string
		remaining []uint32
	}{
		{&rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "a")}}, "OK: OK", []uint32{6}},
		{&rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "a")}}, "OK: OK", []uint32{2}},
		{&rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "a")}}, "OVER_LIMIT: OVER_LIMIT", []uint32{2}},
		// The descriptor's own hits_addend wins over the request's.
		{&rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{hits(desc("tenant", "a"), 2), hits(desc("model", "gpt"), 700)}}, "OK: OK OK", []uint32{0, 300}},
		// A refusal by one descriptor charges none: the tokens stay.
		{&rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{hits(desc("model", "gpt"), 200), desc("tenant", "a")}}, "OVER_LIMIT: OK OVER_LIMIT", []uint32{300, 0}},
		{&rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{hits(desc("model", "gpt"), 301)}}, "OVER_LIMIT: OVER_LIMIT", []uint32{300}},
		// More than the limit can ever admit: refused, with no Retry-After.
		{&rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{hits(desc("tenant", "b"), 11)}}, "OVER_LIMIT: OVER_LIMIT", []uint32{10}},
	}
	for i, s := range steps {
		resp := r.callReq(s.req)
		if got := outcome(resp); got != s.want {
			t.Fatalf("step %d = %s; want %s", i, got, s.want)
		}
		for j, w := range s.remaining {
			if got := resp.Statuses[j].LimitRemaining; got != w {
				t.Errorf("step %d descriptor %d: remaining = %d; want %d", i, j, got, w)
			}
		}
		// Every refusal says when to retry, but the last: waiting cannot help.
		wantRetry := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && i < len(steps)-1
		if ra := header(resp, "retry-after"); wantRetry != (ra != "") {
			t.Errorf("step %d: retry-after = %q; want one: %v", i, ra, wantRetry)
		}
	}
}

// TestResponsePhase: costs reported after the response reach the bucket.
// Two patterns: a request-phase check (hits_addend 0) and a response-phase
// charge, which works on any replica; and a request-phase estimate
// reconciled with the response-phase actual through a request id, in
// either order, charging the actual once.
func TestResponsePhase(t *testing.T) {
	const cfg = `
domain: ai
descriptors:
  - key: tenant
    tenant: true
    rate_limit: {unit: minute, requests_per_unit: 1000, counts: tokens}
`
	check := func(tenant string) *rlv3.RateLimitDescriptor { return hits(desc("tenant", tenant), 0) }
	actual := func(tenant string, n uint64, rid string) *rlv3.RateLimitDescriptor {
		kv := []string{"tenant", tenant, envoyrls.PhaseKey, "response"}
		if rid != "" {
			kv = append(kv, envoyrls.RequestIDKey, rid)
		}
		return hits(desc(kv...), n)
	}
	estimate := func(tenant string, n uint64, rid string) *rlv3.RateLimitDescriptor {
		return hits(desc("tenant", tenant, envoyrls.RequestIDKey, rid), n)
	}
	remaining := func(r *rig, tenant string) uint32 {
		t.Helper()
		resp := r.call("ai", check(tenant))
		return resp.Statuses[0].LimitRemaining
	}

	t.Run("check then charge", func(t *testing.T) {
		r := start(t, mustParse(t, cfg), rigOption{})
		if got := outcome(r.call("ai", check("a"))); got != "OK: OK" {
			t.Fatalf("check = %s; want OK", got)
		}
		if got := remaining(r, "a"); got != 1000 {
			t.Fatalf("a check charges nothing: remaining = %d; want 1000", got)
		}
		r.call("ai", actual("a", 900, ""))
		if got := remaining(r, "a"); got != 100 {
			t.Fatalf("after 900 tokens: remaining = %d; want 100", got)
		}
		// An overrun is charged whole: the next request is refused.
		r.call("ai", actual("a", 300, ""))
		if got := outcome(r.call("ai", check("a"))); got != "OVER_LIMIT: OVER_LIMIT" {
			t.Fatalf("check after the budget is spent = %s; want OVER_LIMIT", got)
		}
		if st := r.srv.Stats(); st.Charged != 2 || st.Reconciled != 0 {
			t.Errorf("Stats() = %+v; want 2 charged, 0 reconciled", st)
		}
	})
	t.Run("estimate then actual", func(t *testing.T) {
		r := start(t, mustParse(t, cfg), rigOption{})
		if got := outcome(r.call("ai", estimate("a", 500, "req-1"))); got != "OK: OK" {
			t.Fatalf("estimate = %s; want OK", got)
		}
		if got := remaining(r, "a"); got != 500 {
			t.Fatalf("after the estimate: remaining = %d; want 500", got)
		}
		r.call("ai", actual("a", 200, "req-1"))
		if got := remaining(r, "a"); got != 800 {
			t.Fatalf("after the actual: remaining = %d; want 800 (the actual replaces the estimate)", got)
		}
		r.call("ai", estimate("a", 100, "req-2"))
		r.call("ai", actual("a", 400, "req-2"))
		if got := remaining(r, "a"); got != 400 {
			t.Fatalf("after an overrun: remaining = %d; want 400", got)
		}
		if st := r.srv.Stats(); st.Reconciled != 2 || st.Charged != 0 {
			t.Errorf("Stats() = %+v; want 2 reconciled, 0 charged", st)
		}
	})
	t.Run("actual then estimate", func(t *testing.T) {
		r := start(t, mustParse(t, cfg), rigOption{})
		r.call("ai", actual("a", 200, "req-1"))
		if got := outcome(r.call("ai", estimate("a", 500, "req-1"))); got != "OK: OK" {
			t.Fatalf("late estimate = %s; want OK", got)
		}
		if got := remaining(r, "a"); got != 800 {
			t.Fatalf("remaining = %d; want 800 (the late estimate charges nothing)", got)
		}
	})
	t.Run("estimate expires", func(t *testing.T) {
		r := start(t, mustParse(t, cfg), rigOption{srvOpts: []envoyrls.Option{envoyrls.WithPending(10, time.Second)}})
		r.call("ai", estimate("a", 500, "req-1"))
		r.clk.Advance(2 * time.Second)
		r.call("ai", actual("a", 200, "req-1")) // too late: charged on its own
		if got := remaining(r, "a"); got != 300 {
			t.Fatalf("remaining = %d; want 300 (the expired estimate stays charged)", got)
		}
	})
	t.Run("table full", func(t *testing.T) {
		r := start(t, mustParse(t, cfg), rigOption{srvOpts: []envoyrls.Option{envoyrls.WithPending(1, time.Minute)}})
		r.call("ai", estimate("a", 100, "req-1"))
		r.call("ai", estimate("a", 100, "req-2"))
		if st := r.srv.Stats(); st.Untracked != 1 {
			t.Fatalf("Stats() = %+v; want 1 untracked", st)
		}
		r.srv.Close()
		if got := remaining(r, "a"); got != 800 {
			t.Fatalf("remaining after Close = %d; want 800 (estimates stay charged)", got)
		}
	})
}

// TestHeaders: the draft-10 fields of the enforcing limits, X-RateLimit-*
// of the tightest, Retry-After when refused; no shadow limit shows.
func TestHeaders(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_tenant}
  - key: route
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`), rigOption{})
	r.clk.Advance(17 * time.Second)
	resp := r.call("api", desc("tenant", "a"), desc("route", "/x"))
	want := map[string]string{
		"ratelimit-policy":      `"api/tenant";q=2;w=60;sluice-qu="hits"`,
		"ratelimit":             `"api/tenant";r=1;t=43`,
		"x-ratelimit-limit":     "2",
		"x-ratelimit-remaining": "1",
		"x-ratelimit-reset":     "43",
	}
	check := func(resp *rlsv3.RateLimitResponse, want map[string]string) {
		t.Helper()
		if len(resp.ResponseHeadersToAdd) != len(want) {
			t.Errorf("headers = %v; want %v", resp.ResponseHeadersToAdd, want)
		}
		for k, v := range want {
			if got := header(resp, k); got != v {
				t.Errorf("%s = %q; want %q", k, got, v)
			}
		}
	}
	check(resp, want)
	r.call("api", desc("tenant", "a"))
	resp = r.call("api", desc("tenant", "a"), desc("route", "/x"))
	if got := outcome(resp); got != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Fatalf("third call = %s; want OVER_LIMIT: OVER_LIMIT OK", got)
	}
	want["ratelimit"] = `"api/tenant";r=0;t=43`
	want["x-ratelimit-remaining"] = "0"
	want["retry-after"] = "43"
	check(resp, want)
	if st := resp.Statuses[0]; st.CurrentLimit.GetName() != "per_tenant" || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.DurationUntilReset.AsDuration() != 43*time.Second {
		t.Errorf("status = %v; want per_tenant, MINUTE, 43s to reset", st)
	}
}

// TestShadow: shadow limits always answer OK, keep the state enforcement
// would, and count each would-reject as the gateway does; the global
// switch turns every limit into a shadow one.
func TestShadow(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 2}
`), rigOption{})
	for i := range 5 {
		if got := outcome(r.call("api", desc("user", "u"))); got != "OK: OK" {
			t.Fatalf("shadow call %d = %s; want OK", i+1, got)
		}
	}
	if got := r.obs.count(admission.WouldReject); got != 3 {
		t.Errorf("would-reject decisions = %d; want 3", got)
	}
	r.ctl.SetAllShadow(true)
	for range 3 {
		r.call("api", desc("tenant", "t"))
	}
	if got := r.obs.count(admission.WouldReject); got != 4 {
		t.Errorf("would-reject decisions after the global switch = %d; want 4", got)
	}
	if got := r.obs.count(admission.Rejected); got != 0 {
		t.Errorf("rejections = %d; want 0", got)
	}
}

// TestShadowBlocked: a shadow limit of requests_per_unit 0 answers OK
// and counts each request-phase descriptor it matches as a would-reject
// decision of its limit, for its tenant, in the metrics, as every shadow
// limit does; so does an enforcing one under the global switch. A
// response-phase charge, a replaced limit and an enforced refusal are no
// would-reject.
func TestShadowBlocked(t *testing.T) {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Provider.Shutdown(context.Background()) })
	mo, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mo.Close() })
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    tenant: true
    descriptors:
      - key: route
        value: /beta
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 0}
  - key: route
    value: /admin
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: route
    value: /old
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0, name: old}
  - key: route
    value: /new
    rate_limit: {unit: minute, requests_per_unit: 10, replaces: [{name: old}]}
`), rigOption{ctlOpts: []admission.Option{admission.WithObserver(mo)}})
	for _, c := range []struct {
		ds   []*rlv3.RateLimitDescriptor
		want string
	}{
		{[]*rlv3.RateLimitDescriptor{desc("tenant", "acme", "route", "/beta")}, "OK: OK"},
		{[]*rlv3.RateLimitDescriptor{hits(desc("tenant", "acme", "route", "/beta"), 5)}, "OK: OK"},
		{[]*rlv3.RateLimitDescriptor{hits(desc("tenant", "acme", "route", "/beta", envoyrls.PhaseKey, "response"), 7)}, "OK: OK"},
		{[]*rlv3.RateLimitDescriptor{desc("route", "/admin")}, "OVER_LIMIT: OVER_LIMIT"},
		{[]*rlv3.RateLimitDescriptor{desc("route", "/old"), desc("route", "/new")}, "OK: OK OK"},
	} {
		if got := outcome(r.call("api", c.ds...)); got != c.want {
			t.Fatalf("call %v = %s; want %s", c.ds, got, c.want)
		}
	}
	r.ctl.SetAllShadow(true)
	if got := outcome(r.call("api", desc("route", "/admin"))); got != "OK: OK" {
		t.Fatalf("/admin under the global switch = %s; want OK: OK", got)
	}
	rec := httptest.NewRecorder()
	prom.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	counted := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, `decision="would_reject"`) &&
			(strings.HasPrefix(line, "admission_decisions_total{") || strings.HasPrefix(line, "admission_tenant_decisions_total{")) {
			name, value, _ := strings.Cut(line, " ")
			counted[name] = value
		}
	}
	want := map[string]string{
		`admission_decisions_total{decision="would_reject",mode="shadow",policy="api/tenant/route=/beta",reason="rate"}`: "2",
		`admission_decisions_total{decision="would_reject",mode="shadow",policy="api/route=/admin",reason="rate"}`:       "1",
		`admission_tenant_decisions_total{decision="would_reject",policy="api/tenant/route=/beta",tenant="acme"}`:        "2",
		`admission_tenant_decisions_total{decision="would_reject",policy="api/route=/admin",tenant="__none__"}`:          "1",
	}
	if !maps.Equal(counted, want) {
		t.Errorf("would-reject series = %v; want %v\n%s", counted, want, body)
	}
}

// TestUnknown: a descriptor no rule matches gets the domain's explicit
// answer, a call for an unknown domain the server's.
func TestUnknown(t *testing.T) {
	cfg := mustParse(t, `
domain: open
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}
---
domain: strict
unknown: over_limit
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}
`)
	r := start(t, cfg, rigOption{})
	for _, c := range []struct {
		domain string
		ds     []*rlv3.RateLimitDescriptor
		want   string
	}{
		{"open", []*rlv3.RateLimitDescriptor{desc("b", "x")}, "OK: OK"},
		{"strict", []*rlv3.RateLimitDescriptor{desc("b", "x")}, "OVER_LIMIT: OVER_LIMIT"},
		// The refusal of the unknown descriptor charges the known one nothing.
		{"strict", []*rlv3.RateLimitDescriptor{desc("a", "x"), desc("b", "x")}, "OVER_LIMIT: OK OVER_LIMIT"},
		{"strict", []*rlv3.RateLimitDescriptor{desc("a", "x")}, "OK: OK"},
		{"nowhere", []*rlv3.RateLimitDescriptor{desc("a", "x")}, "OK: OK"},
	} {
		if got := outcome(r.call(c.domain, c.ds...)); got != c.want {
			t.Errorf("%s %v = %s; want %s", c.domain, c.ds, got, c.want)
		}
	}
	if resp := r.call("strict", desc("a", "x")); resp.Statuses[0].LimitRemaining != 3 {
		t.Errorf("remaining = %d; want 3 (the refused call took nothing)", resp.Statuses[0].LimitRemaining)
	}
	strict := start(t, cfg, rigOption{srvOpts: []envoyrls.Option{envoyrls.WithUnknownDomain(rlsconfig.OverLimit)}})
	if got := outcome(strict.call("nowhere", desc("a", "x"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("unknown domain with WithUnknownDomain(OverLimit) = %s; want OVER_LIMIT", got)
	}
	if st := r.srv.Stats(); st.Unknown != 4 {
		t.Errorf("Stats().Unknown = %d; want 4", st.Unknown)
	}
}

// TestSharedTenant: a limit shared by every tenant, whose queue serves
// tenants in turn; the tenant entry stays out of the partition key.
func TestSharedTenant(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    tenant: true
    shared: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`), rigOption{})
	for i, tenant := range []string{"a", "b", "c"} {
		if got := outcome(r.call("api", desc("tenant", tenant))); got != "OK: OK" {
			t.Fatalf("call %d = %s; want OK", i+1, got)
		}
	}
	if got := outcome(r.call("api", desc("tenant", "d"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("fourth tenant = %s; want OVER_LIMIT (one shared limit)", got)
	}
}

// TestQueueDeadline: a limit with a queue holds the call until it is
// admitted, and never past the deadline Envoy sends: a wait longer than
// the call's deadline is refused at once. The service runs in a
// testing/synctest bubble on in-memory connections, so the waits are
// measured on the bubble's clock, to the nanosecond.
func TestQueueDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    tenant: true
    rate_limit:
      unit: second
      requests_per_unit: 2
      algorithm: token_bucket
      burst: 1
      queue: {size: 10, timeout: 5s}
`), rigOption{clock: admission.SystemClock{}, pipes: true})
		call := func(timeout time.Duration) (*rlsv3.RateLimitResponse, time.Duration, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "a")}})
			return resp, time.Since(start), err
		}
		if resp, _, err := call(5 * time.Second); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("first call = %v, %v; want OK", resp, err)
		}
		// The bucket is empty: the next token comes 500ms after the first
		// admission, within a 5s deadline.
		resp, took, err := call(5 * time.Second)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("queued call = %v, %v; want OK", resp, err)
		}
		if took != 500*time.Millisecond {
			t.Errorf("queued call answered after %v; want it held until the next token, 500ms", took)
		}
		// With a 200ms deadline the next token (500ms away) cannot come in
		// time: refused at once, an answer rather than a timeout.
		resp, took, err = call(200 * time.Millisecond)
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("call with a short deadline = %v, %v; want OVER_LIMIT before the deadline", resp, err)
		}
		if took != 0 {
			t.Errorf("call with a short deadline refused after %v; want at once", took)
		}
		if got := r.obs.count(admission.Queued); got != 1 {
			t.Errorf("queued decisions = %d; want 1", got)
		}
	})
}

// TestHostileRequests: calls outside the bounds are refused with
// InvalidArgument before anything is evaluated.
func TestHostileRequests(t *testing.T) {
	r := start(t, mustParse(t, "domain: api\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n"), rigOption{})
	many := make([]*rlv3.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("a", "x")
	}
	deep := desc()
	for range rlsconfig.MaxDepth + 3 {
		deep.Entries = append(deep.Entries, desc("a", "x").Entries...)
	}
	negative := desc("a", "x")
	negative.IsNegativeHits = true
	for _, c := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "x")}}},
		{"long domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", rlsconfig.MaxName+1), Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "x")}}},
		{"no descriptor", &rlsv3.RateLimitRequest{Domain: "api"}},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: many}},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{deep}}},
		{"empty descriptor", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc()}}},
		{"long value", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", strings.Repeat("v", rlsconfig.MaxName+1))}}},
		{"long request id", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("a", "x", envoyrls.RequestIDKey, strings.Repeat("r", 129))}}},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{negative}}},
	} {
		_, err := r.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error %v; want InvalidArgument", c.name, err)
		}
	}
	if resp := r.call("api", desc("a", "x")); resp.Statuses[0].LimitRemaining != 4 {
		t.Errorf("remaining = %d; want 4 (no refused call was charged)", resp.Statuses[0].LimitRemaining)
	}
}

// TestReload: a new
// configuration applies at once and keeps the counts of the limits it
// keeps, a raised limit included.
func TestReload(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5}}
`), rigOption{})
	for range 3 {
		r.call("api", desc("a", "x"), desc("b", "x"))
	}
	if err := r.srv.SetConfig(mustParse(t, `
domain: api
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: c, rate_limit: {unit: minute, requests_per_unit: 1}}
`)); err != nil {
		t.Fatal(err)
	}
	resp := r.call("api", desc("a", "x"), desc("b", "x"), desc("c", "x"))
	if got := outcome(resp); got != "OK: OK OK OK" {
		t.Fatalf("after reload = %s", got)
	}
	// a kept its count; b kept its count under its new limit; c is new.
	for i, want := range []uint32{1, 46, 0} {
		if got := resp.Statuses[i].LimitRemaining; got != want {
			t.Errorf("descriptor %d remaining = %d; want %d", i, got, want)
		}
	}
}

// TestHealth: grpc.health.v1 answers SERVING for the server and for the
// rate limit service.
func TestHealth(t *testing.T) {
	cfg := mustParse(t, "domain: api\ndescriptors:\n  - {key: a}\n")
	r := start(t, cfg, rigOption{})
	hc := healthpb.NewHealthClient(r.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
}

// TestFairQueue: callers waiting on a limit shared by every tenant are
// served round robin across tenants, as in the core: one tenant's backlog
// does not delay another tenant's single call behind all of it.
func TestFairQueue(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: tenant
    tenant: true
    shared: true
    rate_limit:
      unit: second
      requests_per_unit: 1
      algorithm: token_bucket
      queue: {size: 10, timeout: 1m}
`), rigOption{})
	if got := outcome(r.call("api", desc("tenant", "a"))); got != "OK: OK" {
		t.Fatalf("first call = %s; want OK", got)
	}
	served := make(chan string, 4)
	for i, tenant := range []string{"a", "a", "a", "b"} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", tenant)}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				served <- "error"
				return
			}
			served <- tenant
		}()
		// Queue them in this order.
		poll.Until(t, time.Second, fmt.Sprintf("waiter %d to queue", i+1), func() bool { return r.obs.count(admission.Queued) == int64(i+1) })
	}
	var order []string
	for range 4 {
		// A token comes on the fake clock, and the next waiter is served.
		r.clk.Advance(time.Second)
		order = append(order, <-served)
	}
	if got, want := strings.Join(order, " "), "a b a a"; got != want {
		t.Fatalf("served in the order %s; want %s", got, want)
	}
}

// TestReplacesResponsePhase: a replaced limit is not charged by the
// response phase either.
func TestReplacesResponsePhase(t *testing.T) {
	r := start(t, mustLoad(t, "ratelimit/example7.yaml"), rigOption{})
	both := func(phase ...string) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{
			hits(desc(append([]string{"key_1", "value_1", "user", "bkthomps"}, phase...)...), 3),
			hits(desc(append([]string{"key_2", "value_2", "user", "bkthomps"}, phase...)...), 3),
		}
	}
	r.call("example7", both(envoyrls.PhaseKey, "response")...)
	resp := r.call("example7", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))
	if got := resp.Statuses[1].LimitRemaining; got != 6 {
		t.Errorf("replacing limit remaining = %d; want 6 (3 charged after the response, 1 now)", got)
	}
	resp = r.call("example7", desc("key_1", "value_1", "user", "bkthomps"))
	if got := resp.Statuses[0].LimitRemaining; got != 4 {
		t.Errorf("replaced limit remaining = %d; want 4 (never charged while replaced)", got)
	}
}

// TestReplacedBlocked: a limit of requests_per_unit 0 that another
// matched limit replaces is not applied either, nor counted as blocked:
// the call is decided by the replacing limit alone.
func TestReplacedBlocked(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: route
    value: /old
    rate_limit: {unit: minute, requests_per_unit: 0, name: old}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1, replaces: [{name: old}]}
`), rigOption{})
	for i, want := range []string{"OK: OK OK", "OVER_LIMIT: OK OVER_LIMIT"} {
		if got := outcome(r.call("api", desc("route", "/old"), desc("tenant", "a"))); got != want {
			t.Errorf("call %d = %s; want %s", i+1, got, want)
		}
	}
	if got := r.srv.Stats().Blocked; got != 0 {
		t.Errorf("blocked descriptors counted after two calls replacing the limit of 0 = %d; want 0", got)
	}
	if got := outcome(r.call("api", desc("route", "/old"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("/old alone = %s; want OVER_LIMIT: OVER_LIMIT (nothing replaces it)", got)
	}
	if got := r.srv.Stats().Blocked; got != 1 {
		t.Errorf("blocked descriptors counted after /old alone = %d; want 1", got)
	}
}

// TestREADMEConfiguration runs the Envoy pattern of cmd/sluice-rls/README.md
// on its configuration, which the README quotes whole: a request-phase
// check per tenant and model, the tokens charged after the response, the
// next check refused once they are spent.
func TestREADMEConfiguration(t *testing.T) {
	file, err := os.ReadFile("testdata/sluice/llm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var quoted strings.Builder
	for line := range strings.Lines(string(file)) {
		if !strings.HasPrefix(line, "#") {
			quoted.WriteString(line)
		}
	}
	readme, err := os.ReadFile("../../cmd/sluice-rls/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+quoted.String()+"```\n") {
		t.Errorf("cmd/sluice-rls/README.md does not quote testdata/sluice/llm.yaml (its comments left out) as it is:\n%s", quoted.String())
	}
	r := start(t, mustLoad(t, "sluice/llm.yaml"), rigOption{})
	check := func() string {
		return outcome(r.call("llm", hits(desc("tenant", "acme", "model", "gpt-4o"), 0)))
	}
	if got := check(); got != "OK: OK" {
		t.Fatalf("check = %s; want OK", got)
	}
	r.call("llm", hits(desc("tenant", "acme", "model", "gpt-4o", envoyrls.PhaseKey, "response"), 100_000))
	if got := check(); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("check after 100k tokens = %s; want OVER_LIMIT", got)
	}
	if got := outcome(r.call("llm", hits(desc("tenant", "acme", "model", "other"), 0))); got != "OK: OK" {
		t.Fatalf("another model = %s; want OK (its own partition)", got)
	}
}
