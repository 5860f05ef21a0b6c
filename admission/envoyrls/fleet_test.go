package envoyrls_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/internal/poll"
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

// TestFleetRedisPaused: two replicas, a limit of 10, Redis paused
// (CLIENT PAUSE WRITE: the scripts wait as on an overloaded server) in the
// middle of a burst. Before the pause the limit counts in Redis; during
// it each failure mode answers as documented (open: every call OK;
// closed: every call OVER_LIMIT with the retry hint; local: each replica
// its share, 10 / 2, with that share's figures); after it Redis counts
// again from where it stood, the calls decided without it not charged
// there. An answer made without the store carries no limit figures (as
// at the HTTP edge: they would describe the store, not the caller): no
// "remaining 0, reset 0" for a call let through or refused for want of
// Redis.
func TestFleetRedisPaused(t *testing.T) {
	const (
		limit  = 10
		before = 4
		during = 24
		after  = 10
	)
	for _, c := range []struct {
		mode     string
		duringOK int // of during
		// The headers of each answer during the pause, for an OK and an
		// OVER_LIMIT answer.
		okHeaders, overHeaders string
	}{
		{"open", during, "[]", ""},
		{"closed", 0, "", "[retry-after: 1]"},
		{"local", limit, "local", "local"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := mustParse(t, fmt.Sprintf(`
domain: api
store: redis
replicas: 2
algorithm: token_bucket
descriptors:
  - key: tenant
    rate_limit: {unit: week, requests_per_unit: %d, on_store_error: %s}
`, limit, c.mode))
			// The store's default timeout: the calls held by the pause fail
			// after it, the others never reach it.
			fleet := []*rig{replica(t, srv.Addr, cfg, 0), replica(t, srv.Addr, cfg, 0)}
			burst := func(n int, tenant string) (ok int, resps []*rlsv3.RateLimitResponse) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						resp := fleet[i%2].call("api", desc("tenant", tenant))
						mu.Lock()
						defer mu.Unlock()
						resps = append(resps, resp)
						if resp.OverallCode == rlsv3.RateLimitResponse_OK {
							ok++
						}
					})
				}
				wg.Wait()
				return ok, resps
			}
			storeErrors := func() int64 { return fleet[0].obs.storeErrors.Load() + fleet[1].obs.storeErrors.Load() }
			if ok, _ := burst(before, "acme"); ok != before {
				t.Fatalf("before the pause: %d of %d admitted", ok, before)
			}
			srv.Pause(t)
			ok, resps := burst(during, "acme")
			if ok != c.duringOK {
				t.Errorf("during the pause: %d of %d admitted; want %d", ok, during, c.duringOK)
			}
			if n := storeErrors(); n != during {
				t.Errorf("during the pause: %d store errors; want %d, one a call", n, during)
			}
			var localRemaining []int
			for _, resp := range resps {
				got, st := fmt.Sprint(headerList(resp)), resp.Statuses[0]
				want := c.okHeaders
				if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					want = c.overHeaders
				}
				if want == "local" {
					// The replica's share, and what it has left.
					if header(resp, "x-ratelimit-limit") != "5" || fmt.Sprint(st.LimitRemaining) != header(resp, "x-ratelimit-remaining") {
						t.Errorf("%s during the pause: headers %s, limit_remaining %d; want the figures of a limit of 5", outcome(resp), got, st.LimitRemaining)
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						localRemaining = append(localRemaining, int(st.LimitRemaining))
					}
					continue
				}
				if got != want || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
					t.Errorf("%s during the pause: headers %s, limit_remaining %d, duration_until_reset %v; want headers %s and no figures", outcome(resp), got, st.LimitRemaining, st.DurationUntilReset, want)
				}
			}
			if c.mode == "local" {
				slices.Sort(localRemaining)
				if want := []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}; !slices.Equal(localRemaining, want) {
					t.Errorf("during the pause: the admitted calls' remaining = %v; want %v (5 on each replica)", localRemaining, want)
				}
			}
			srv.Unpause(t)
			// Redis answers again once the breakers let a call through: a
			// call of another tenant that meets no store error says so.
			poll.Until(t, time.Second, "Redis deciding again", func() bool {
				n := storeErrors()
				for _, r := range fleet {
					r.call("api", desc("tenant", "probe"))
				}
				return storeErrors() == n
			})
			ok, resps = burst(after, "acme")
			if ok != limit-before {
				t.Errorf("after the pause: %d of %d admitted; want %d (the calls decided without Redis not charged there)", ok, after, limit-before)
			}
			for _, resp := range resps {
				if got := header(resp, "x-ratelimit-limit"); got != fmt.Sprint(limit) {
					t.Errorf("%s after the pause: x-ratelimit-limit %q; want %d", outcome(resp), got, limit)
				}
			}
		})
	}
}

// headerList returns the headers of resp as "name: value" strings.
func headerList(resp *rlsv3.RateLimitResponse) []string {
	out := []string{}
	for _, h := range resp.ResponseHeadersToAdd {
		out = append(out, h.Key+": "+h.Value)
	}
	return out
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
