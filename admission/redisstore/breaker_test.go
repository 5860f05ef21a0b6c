package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
)

// TestOpenBreakerAllocatesNothing: while Redis is down the open breaker
// answers every decision, at the rate requests arrive; it allocates
// nothing, so that it makes no garbage whose collection would pause the
// decisions still on their way.
func TestOpenBreakerAllocatesNothing(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // nothing listens there
	t.Cleanup(func() { client.Close() })
	cases := []struct {
		name     string
		policies []admission.Policy
	}{
		{"token_bucket", []admission.Policy{{Name: "rpm", Algorithm: limits.TokenBucket, Limit: 100, Per: time.Hour}}},
		{"fixed_window", []admission.Policy{{Name: "fw", Algorithm: limits.FixedWindow, Limit: 100, Per: time.Hour}}},
		{"batch", []admission.Policy{
			{Name: "rpm", Algorithm: limits.TokenBucket, Limit: 100, Per: time.Hour},
			{Name: "inflight", Algorithm: limits.Concurrency, Limit: 10, MaxHold: time.Minute},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t, client, redisstore.Config{Timeout: 50 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Hour})
			ops := make([]backend.Op, len(c.policies))
			for i := range c.policies {
				lim, err := st.Limiter(&c.policies[i])
				if err != nil {
					t.Fatal(err)
				}
				ops[i] = backend.Op{Limiter: lim, Key: "acme", Limit: c.policies[i].Base(), N: 1}
			}
			decide := func() error { return st.AcquireBatch(context.Background(), ops, time.Now()) }
			if err := decide(); err == nil || errors.Is(err, redisstore.ErrBreakerOpen) {
				t.Fatalf("first decision = %v; want the network's error", err)
			}
			if err := decide(); !errors.Is(err, redisstore.ErrBreakerOpen) {
				t.Fatalf("decision after a failure = %v; want ErrBreakerOpen", err)
			}
			if n := testing.AllocsPerRun(100, func() { _ = decide() }); n != 0 {
				t.Errorf("a decision refused by the open breaker makes %v allocations; want 0", n)
			}
		})
	}
}
