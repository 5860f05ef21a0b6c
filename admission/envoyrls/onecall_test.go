package envoyrls_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// scriptCounter is a client hook counting the commands that run a script
// (EVALSHA, or EVAL when the server did not have it): the store's calls.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			// A NOSCRIPT answer and the EVAL that follows are one call.
			if err := next(ctx, cmd); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				return err
			}
			h.n.Add(1)
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// countedReplica starts a rate limit service on the Redis at addr whose
// client counts the store's script calls.
func countedReplica(t *testing.T, addr, yaml string) (*rig, *scriptCounter) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	calls := &scriptCounter{}
	client.AddHook(calls)
	store, err := redisstore.New(client, redisstore.Config{Name: "redis", Timeout: slowOK})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, mustParse(t, yaml), rigOption{clock: admission.SystemClock{}, ctlOpts: []admission.Option{admission.WithStore("redis", store)}})
	return r, calls
}

// threeLimits are three token buckets on one Redis refilling in a day
// (no refill a figure shows inside a test), one of them on tokens.
const threeLimits = `
domain: api
store: redis
on_store_error: closed
algorithm: token_bucket
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: model
    rate_limit: {unit: day, requests_per_unit: 100, counts: tokens}
`

// TestOneScriptCallPerCall: every descriptor of a call is decided in one
// script call on Redis, admitted or refused, and a descriptor's own
// hits_addend is what it is charged.
func TestOneScriptCallPerCall(t *testing.T) {
	srv := redistest.Start(t)
	r, calls := countedReplica(t, srv.Addr, threeLimits)
	steps := []struct {
		route     uint64 // the route descriptor's hits_addend
		want      string
		remaining [3]uint32
	}{
		{1, "OK: OK OK OK", [3]uint32{9, 3, 70}},
		{2, "OK: OK OK OK", [3]uint32{8, 1, 40}},
		// Over the route's limit: nothing is charged, and the others'
		// figures are their partitions', untouched.
		{2, "OVER_LIMIT: OK OVER_LIMIT OK", [3]uint32{8, 1, 40}},
		{1, "OK: OK OK OK", [3]uint32{7, 0, 10}},
	}
	for i, s := range steps {
		before := calls.n.Load()
		resp := r.call("api", desc("tenant", "acme"), hits(desc("route", "/v1/chat"), s.route), hits(desc("model", "gpt"), 30))
		if got := outcome(resp); got != s.want {
			t.Fatalf("step %d: %s; want %s", i, got, s.want)
		}
		for j, st := range resp.Statuses {
			if st.LimitRemaining != s.remaining[j] {
				t.Errorf("step %d: descriptor %d remaining = %d; want %d", i, j, st.LimitRemaining, s.remaining[j])
			}
		}
		if n := calls.n.Load() - before; n != 1 {
			t.Errorf("step %d: %d script calls; want 1", i, n)
		}
	}
	if n := r.obs.count(admission.FailClosed); n != 0 {
		t.Fatalf("%d store failures", n)
	}
}

// TestDescriptorsAllOrNothingOnRedis: a call is charged by all its
// descriptors or by none, on Redis as in memory, including when two
// descriptors count in one partition (each sees what the other takes)
// and when a refusal comes from a limit without a partition's room.
func TestDescriptorsAllOrNothingOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	r, _ := countedReplica(t, srv.Addr, threeLimits)
	// The same partition twice: 3 + 2 tokens do not fit in 4.
	if got := outcome(r.call("api", hits(desc("route", "/a"), 3), hits(desc("route", "/a"), 2))); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("3 then 2 in one partition of 4 = %s; want OVER_LIMIT: OK OVER_LIMIT", got)
	}
	if got := outcome(r.call("api", hits(desc("route", "/a"), 2), hits(desc("route", "/a"), 2))); got != "OK: OK OK" {
		t.Fatalf("2 then 2 in one partition of 4 = %s; want OK (nothing was charged before)", got)
	}
	// A refusal gives back nothing it did not take: the tenant and model
	// partitions are as before the refused call.
	r.call("api", desc("tenant", "t"), hits(desc("model", "m"), 50))
	resp := r.call("api", hits(desc("tenant", "t"), 5), hits(desc("model", "m"), 51))
	if got := outcome(resp); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("51 tokens of 50 left = %s; want OVER_LIMIT: OK OVER_LIMIT", got)
	}
	resp = r.call("api", hits(desc("tenant", "t"), 0), hits(desc("model", "m"), 0))
	if a, b := resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining; a != 9 || b != 50 {
		t.Fatalf("after the refusal: remaining %d and %d; want 9 and 50", a, b)
	}
	if s := r.srv.Stats(); s.Unknown != 0 {
		t.Fatalf("stats %+v: a descriptor matched no limit", s)
	}
}
