package envoyrls_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestFleetBurstSeveralDescriptors: three replicas on one Redis, a burst
// of ten times the limit from 64 callers, three descriptors per call (the
// tenant, one of three routes, tokens of a model): each route admits
// exactly its limit fleet-wide, and every answer is whole: a call
// answered OK was charged on all its descriptors, one answered
// OVER_LIMIT on none, which the tenant's and the model's figures left
// afterwards show to the unit.
func TestFleetBurstSeveralDescriptors(t *testing.T) {
	const (
		routes   = 3
		perRoute = 10   // each route's limit
		tenant   = 40   // the tenant's: 10 more than the routes admit together
		model    = 1000 // tokens
		tokens   = 3    // each call's
		callers  = 64
		calls    = 10 * perRoute * routes
	)
	for _, alg := range []string{"fixed_window", "sliding_log", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			srv := redistest.Start(t)
			// A week: no window boundary, no refill a figure shows, inside the test.
			cfg := mustParse(t, fmt.Sprintf(`
domain: api
store: redis
on_store_error: closed
algorithm: %s
descriptors:
  - key: tenant
    rate_limit: {unit: week, requests_per_unit: %d}
  - key: route
    rate_limit: {unit: week, requests_per_unit: %d}
  - key: model
    rate_limit: {unit: week, requests_per_unit: %d, counts: tokens}
`, alg, tenant, perRoute, model))
			var fleet []*rig
			for range 3 {
				fleet = append(fleet, replica(t, srv.Addr, cfg, slowOK))
			}
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			next := make(chan int)
			for range callers {
				wg.Go(func() {
					for i := range next {
						route := fmt.Sprintf("/r%d", i%routes)
						resp := fleet[i%len(fleet)].call("api", desc("tenant", "acme"), desc("route", route), hits(desc("model", "m"), tokens))
						got := outcome(resp)
						switch got {
						case "OK: OK OK OK":
							mu.Lock()
							admitted[route]++
							mu.Unlock()
						case "OVER_LIMIT: OK OVER_LIMIT OK":
						default:
							t.Errorf("call %d on %s = %s; want all OK, or the route alone OVER_LIMIT", i, route, got)
						}
					}
				})
			}
			for i := range calls {
				next <- i
			}
			close(next)
			wg.Wait()
			for r := range routes {
				route := fmt.Sprintf("/r%d", r)
				if admitted[route] != perRoute {
					t.Errorf("route %s admitted %d of %d calls; want %d", route, admitted[route], calls/routes, perRoute)
				}
			}
			// What is left: the tenant and the model were charged by the
			// admitted calls alone.
			resp := fleet[0].call("api", hits(desc("tenant", "acme"), 0), hits(desc("model", "m"), 0))
			if a, b := resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining; a != tenant-routes*perRoute || b != model-tokens*routes*perRoute {
				t.Errorf("after the burst: tenant remaining %d, model remaining %d; want %d and %d", a, b, tenant-routes*perRoute, model-tokens*routes*perRoute)
			}
			for i, r := range fleet {
				if n := r.obs.count(admission.FailClosed); n != 0 {
					t.Errorf("replica %d: %d store failures", i, n)
				}
			}
		})
	}
}

// TestFleetReconcileOnRedis: on a fleet sharing Redis, a request-phase
// estimate and its response-phase actual (one sluice.request_id) reaching
// one replica cost the actual once, in either order, which every other
// replica sees: an over-estimate refunded, an overrun charged.
func TestFleetReconcileOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := mustParse(t, `
domain: api
store: redis
on_store_error: closed
algorithm: token_bucket
descriptors:
  - key: model
    rate_limit: {unit: week, requests_per_unit: 1000, counts: tokens}
`)
	a, b := replica(t, srv.Addr, cfg, slowOK), replica(t, srv.Addr, cfg, slowOK)
	for i, c := range []struct {
		estimate, actual uint64
		actualFirst      bool
	}{{50, 20, false}, {50, 80, false}, {50, 20, true}, {50, 80, true}} {
		rid, model := fmt.Sprint("req-", i), fmt.Sprint("m", i)
		estimate := func() { a.call("api", hits(desc("model", model, envoyrls.RequestIDKey, rid), c.estimate)) }
		actual := func() {
			a.call("api", hits(desc("model", model, envoyrls.RequestIDKey, rid, envoyrls.PhaseKey, "response"), c.actual))
		}
		if c.actualFirst {
			actual()
			estimate()
		} else {
			estimate()
			actual()
		}
		resp := b.call("api", hits(desc("model", model), 0))
		if got, want := resp.Statuses[0].LimitRemaining, uint32(1000-c.actual); got != want {
			t.Errorf("estimate %d, actual %d (actual first: %v): remaining on another replica = %d; want %d", c.estimate, c.actual, c.actualFirst, got, want)
		}
	}
	if s := a.srv.Stats(); s.Reconciled != 2 || s.Charged != 2 {
		t.Errorf("stats %+v; want 2 reconciled, 2 charged", s)
	}
}
