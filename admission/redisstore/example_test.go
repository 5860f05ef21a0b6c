package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Every replica builds the same controller on the same Redis: the limit
// holds for the fleet. When Redis is down, this policy falls back to an
// in-memory limiter holding a third of the limit (three replicas).
func Example() {
	// A throwaway redis-server for this example; use your own address.
	srv, err := redistest.Launch()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()

	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr,
		// Required: the store's per-call timeout is a context deadline.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{Prefix: "sluice:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name:         "requests_per_hour",
		Key:          []limits.KeyPart{limits.KeyTenant},
		Algorithm:    limits.TokenBucket,
		Limit:        2,
		Per:          time.Hour,
		Store:        "redis",
		OnStoreError: limits.FailLocalMode,
		Replicas:     3,
	}}}, admission.WithStore("redis", store))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := 0; i < 3; i++ {
		tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		if errors.Is(err, admission.ErrRateLimited) {
			fmt.Println("rejected: rate limited")
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("admitted")
		tk.Done()
	}
	// Output:
	// admitted
	// admitted
	// rejected: rate limited
}
