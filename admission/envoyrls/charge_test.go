package envoyrls_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
)

// TestResponsePhaseChargesABucketInDebt: over gRPC on loopback, costs
// reported after the response are charged to a token bucket of 1000
// tokens a minute even while it is in debt (within its capacity), and are
// not counted as admitted decisions. 1500 then 300 tokens leave the bucket
// 800 in debt: 40s later (667 refilled) a check is still refused, 50s
// later (833) it is admitted.
func TestResponsePhaseChargesABucketInDebt(t *testing.T) {
	const cfg = `
domain: ai
algorithm: token_bucket
descriptors:
  - key: tenant
    tenant: true
    rate_limit: {unit: minute, requests_per_unit: 1000, counts: tokens}
`
	r := start(t, mustParse(t, cfg), rigOption{})
	actual := func(n uint64) { r.call("ai", hits(desc("tenant", "a", envoyrls.PhaseKey, "response"), n)) }
	check := func() string { return outcome(r.call("ai", hits(desc("tenant", "a"), 0))) }
	actual(1500)
	actual(300) // the bucket is in debt already: charged all the same
	if n := r.obs.count(admission.Admitted); n != 0 {
		t.Errorf("%d admitted decisions after two charges; want 0 (a charge is not a decision)", n)
	}
	if st := r.srv.Stats(); st.Charged != 2 {
		t.Errorf("Stats() = %+v; want 2 charged", st)
	}
	r.clk.Advance(40 * time.Second)
	if got := check(); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("check 40s after 1800 tokens = %s; want OVER_LIMIT (the second charge was taken)", got)
	}
	r.clk.Advance(10 * time.Second)
	if got := check(); got != "OK: OK" {
		t.Errorf("check 50s after 1800 tokens = %s; want OK (debt bounded by the capacity)", got)
	}
}

// TestHugeHitsClamped: a hits_addend above limits.MaxAmount is clamped,
// never refused: reported after the response it is charged, so the next
// request is refused; in the request phase it is over the limit and
// charges nothing.
func TestHugeHitsClamped(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
descriptors:
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 1000, counts: tokens}
`), rigOption{})
	huge := uint64(1) << 62
	if got := outcome(r.call("api", hits(desc("model", "a"), huge))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("request phase with hits_addend 2^62 = %s; want OVER_LIMIT", got)
	}
	if got := r.call("api", hits(desc("model", "a"), 0)).Statuses[0].LimitRemaining; got != 1000 {
		t.Fatalf("remaining after a refused huge request = %d; want 1000 (nothing charged)", got)
	}
	if got := outcome(r.call("api", hits(desc("model", "a", envoyrls.PhaseKey, "response"), huge))); got != "OK: OK" {
		t.Fatalf("response phase with hits_addend 2^62 = %s; want OK", got)
	}
	resp := r.call("api", hits(desc("model", "a"), 1))
	if got := outcome(resp); got != "OVER_LIMIT: OVER_LIMIT" || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a request after 2^62 tokens were reported = %s, remaining %d; want OVER_LIMIT, 0 (the usage charged)",
			got, resp.Statuses[0].LimitRemaining)
	}
	if st := r.srv.Stats(); st.Charged != 1 {
		t.Errorf("charged response-phase costs = %d; want 1", st.Charged)
	}
}
