package envoyrls_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
)

// TestReconcileProperty: whatever the estimates, the actuals and the order
// in which the two phases of each request arrive (interleaved with other
// requests'), every request is charged its actual exactly once.
func TestReconcileProperty(t *testing.T) {
	r := start(t, mustParse(t, `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: week, requests_per_unit: 4000000000, counts: tokens}
`), rigOption{})
	rng := rand.New(rand.NewPCG(1, 2))
	type phase struct {
		rid      string
		response bool
		n        uint64
	}
	for round := range 20 {
		tenant := "t" + strconv.Itoa(round)
		var calls []phase
		var want uint64
		for i := range 1 + rng.IntN(12) {
			rid := strconv.Itoa(i)
			est, act := uint64(rng.IntN(5000)), uint64(rng.IntN(5000))
			want += act
			pair := []phase{{rid, false, est}, {rid, true, act}}
			if rng.IntN(2) == 0 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			// Insert the pair at random places, keeping its own order.
			a := rng.IntN(len(calls) + 1)
			calls = append(calls[:a], append([]phase{pair[0]}, calls[a:]...)...)
			b := a + 1 + rng.IntN(len(calls)-a)
			calls = append(calls[:b], append([]phase{pair[1]}, calls[b:]...)...)
		}
		for _, c := range calls {
			kv := []string{"tenant", tenant, envoyrls.RequestIDKey, c.rid}
			if c.response {
				kv = append(kv, envoyrls.PhaseKey, "response")
			}
			if got := outcome(r.call("ai", hits(desc(kv...), c.n))); got != "OK: OK" {
				t.Fatalf("round %d: %v = %s; want OK", round, c, got)
			}
		}
		resp := r.call("ai", hits(desc("tenant", tenant), 0))
		if got := 4_000_000_000 - uint64(resp.Statuses[0].LimitRemaining); got != want {
			t.Fatalf("round %d: charged %d; want the actuals' sum %d (calls %v)", round, got, want, calls)
		}
	}
}

// FuzzShouldRateLimit: no call, however malformed, makes the server panic;
// it is refused as a whole or answered with one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	cfg, err := rlsconfig.Parse("fuzz.yaml", []byte(`
domain: d
descriptors:
  - key: a
    tenant: true
    rate_limit: {unit: second, requests_per_unit: 3, replaces: [{name: n}]}
    descriptors:
      - {key: b, value: "v*", rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: c, rate_limit: {name: n, unlimited: true}}
  - {key: q, rate_limit: {unit: second, requests_per_unit: 1, queue: {size: 1, timeout: 1ms}}}
`))
	if err != nil {
		f.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := envoyrls.New(ctl, cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("d", "a", "x", "b", "vv", uint32(0), uint64(2), true, false)
	f.Add("d", "c", "", envoyrls.PhaseKey, "response", uint32(7), uint64(0), false, false)
	f.Add("d", "q", "1", envoyrls.RequestIDKey, "r", uint32(1), uint64(1<<60), true, true)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hitsAll uint32, hitsOne uint64, setOne, negative bool) {
		d := desc(k1, v1, k2, v2)
		if setOne {
			hits(d, hitsOne)
		}
		d.IsNegativeHits = negative
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hitsAll, Descriptors: []*rlv3.RateLimitDescriptor{d, desc(k2, v2), desc(k1, v1)}}
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err == nil && len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}
