package envoyrls_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// replica starts one rate limit service whose limits live in the Redis at
// addr, with its own client as a replica of a fleet has. timeout bounds
// each Redis call (zero: the store's default).
func replica(t testing.TB, addr string, cfg *rlsconfig.Config, timeout time.Duration) *rig {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Name: "redis", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return start(t, cfg, rigOption{clock: admission.SystemClock{}, ctlOpts: []admission.Option{admission.WithStore("redis", store)}})
}

// slowOK is a Redis timeout no call on a loaded test machine reaches: the
// tests that count admissions must not see a store failure answer for
// Redis.
const slowOK = 10 * time.Second

// callerDeadline is a call's deadline in the tests where it passes while
// Redis holds the call: time enough for the call to reach Redis on a
// loaded machine, far less than slowOK.
const callerDeadline = 2 * time.Second

// TestFleet: three replicas on one Redis enforce one limit, whatever
// replica Envoy calls; a cost charged after the response on one replica
// is seen by the next request on another.
func TestFleet(t *testing.T) {
	srv := redistest.Start(t)
	// A token bucket refilling 30 a day: no window boundary inside the test.
	cfg := mustParse(t, `
domain: api
store: redis
on_store_error: closed
algorithm: token_bucket
descriptors:
  - key: tenant
    tenant: true
    rate_limit: {unit: day, requests_per_unit: 30}
  - key: model
    rate_limit: {unit: day, requests_per_unit: 1000, counts: tokens}
`)
	var fleet []*rig
	for range 3 {
		fleet = append(fleet, replica(t, srv.Addr, cfg, slowOK))
	}
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 15 {
				resp := fleet[(g+i)%len(fleet)].call("api", desc("tenant", "acme"))
				switch resp.OverallCode {
				case rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				case rlsv3.RateLimitResponse_OVER_LIMIT:
					over.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 30 || over.Load() != 60 {
		t.Fatalf("fleet admitted %d and refused %d of 90; want 30 and 60", ok.Load(), over.Load())
	}
	for i, r := range fleet {
		if n := r.obs.count(admission.FailClosed); n != 0 {
			t.Fatalf("replica %d: %d store failures", i, n)
		}
	}
	// Response-phase charge on one replica, check on another.
	fleet[0].call("api", hits(desc("model", "m", envoyrls.PhaseKey, "response"), 990))
	resp := fleet[1].call("api", hits(desc("model", "m"), 0))
	if got := resp.Statuses[0].LimitRemaining; got != 10 {
		t.Fatalf("remaining on another replica = %d; want 10", got)
	}
	resp = fleet[2].call("api", hits(desc("model", "m"), 11))
	if got := outcome(resp); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("11 tokens on a third replica = %s; want OVER_LIMIT", got)
	}
}

// TestStoreDown: with Redis gone, each limit answers as its
// on_store_error says: open lets the call through, closed refuses it,
// local falls back to an in-memory limit of its share (2 replicas: half).
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	r := replica(t, srv.Addr, mustParse(t, `
domain: api
store: redis
replicas: 2
descriptors:
  - key: open
    rate_limit: {unit: day, requests_per_unit: 5, on_store_error: open}
  - key: closed
    rate_limit: {unit: day, requests_per_unit: 5, on_store_error: closed}
  - key: local
    rate_limit: {unit: day, requests_per_unit: 2, on_store_error: local}
`), 0)
	if got := outcome(r.call("api", desc("closed", "x"))); got != "OK: OK" {
		t.Fatalf("with Redis up = %s; want OK", got)
	}
	srv.Stop()
	for _, c := range []struct {
		key, want string
	}{
		{"open", "OK: OK"},
		{"closed", "OVER_LIMIT: OVER_LIMIT"},
		{"local", "OK: OK"},
		{"local", "OVER_LIMIT: OVER_LIMIT"},
	} {
		if got := outcome(r.call("api", desc(c.key, "x"))); got != c.want {
			t.Errorf("%s with Redis down = %s; want %s", c.key, got, c.want)
		}
	}
	if got := r.obs.count(admission.FailClosed); got != 1 {
		t.Errorf("fail-closed decisions = %d; want 1", got)
	}
}

// TestCallerDeadlineDoesNotFailOpen: a call whose deadline (Envoy's
// filter sends 20ms by default) passes while a healthy Redis is still
// answering is decided by the limit and charged, not failed open. Redis
// holds the call's script until the deadline has passed, whatever the
// machine's speed; the deadline only has to leave the call the time to
// reach the server.
func TestCallerDeadlineDoesNotFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	r := replica(t, srv.Addr, mustParse(t, `
domain: api
store: redis
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 5}
`), slowOK)
	if got := r.call("api", desc("tenant", "x")).Statuses[0].LimitRemaining; got != 4 {
		t.Fatalf("first call: remaining %d; want 4", got)
	}
	// Scripts write: paused until the test lets them go.
	if _, err := redistest.Do(srv.Addr, "CLIENT", "PAUSE", "600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
	_, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "x")}})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call with a %v deadline against a paused Redis = %v; want DeadlineExceeded", callerDeadline, err)
	}
	info, err := redistest.Do(srv.Addr, "INFO", "clients")
	if err != nil || !strings.Contains(info, "blocked_clients:1\r\n") {
		t.Fatalf("after the caller's deadline: INFO clients = %q, %v; want the call's script held by the paused Redis", info, err)
	}
	if _, err := redistest.Do(srv.Addr, "CLIENT", "UNPAUSE"); err != nil {
		t.Fatal(err)
	}
	// The server goes on deciding: wait for its decision.
	poll.Until(t, time.Second, "the late call's decision", func() bool {
		return r.obs.count(admission.Admitted)+r.obs.count(admission.FailOpen) >= 2
	})
	if n := r.obs.count(admission.FailOpen); n != 0 {
		t.Errorf("fail-open decisions = %d; want 0 (Redis was healthy)", n)
	}
	if got := r.call("api", desc("tenant", "x")).Statuses[0].LimitRemaining; got != 2 {
		t.Errorf("remaining after the late call and one more = %d; want 2 (the late call charged)", got)
	}
}
