package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisPolicy is three requests a minute per tenant, kept in the store
// named redis.
const redisPolicy = `
  - name: rpm
    key: [tenant]
    algorithm: token_bucket
    limit: 3
    per: 1m
    store: redis
    on_store_error: closed
`

// TestReplicasShareRedisLimit starts two replicas of the proxy on one
// Redis server with a policy kept there: three requests a minute per
// tenant hold across both, and the fourth is refused by whichever replica
// it reaches.
func TestReplicasShareRedisLimit(t *testing.T) {
	srv := redistest.Start(t)
	policy := withPolicy(t, redisPolicy, []string{"acme"}, "")
	useRedis := func(o *options) { o.redis = srv.Addr }
	a := startProxy(t, policy, useRedis)
	b := startProxy(t, policy, useRedis)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`
	for i, s := range []*server{a, b, a} {
		resp, out := post(t, s, "/v1/chat/completions", testKey("acme"), body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s; want 200", i, resp.StatusCode, out)
		}
	}
	for _, s := range []*server{b, a} {
		resp, out := post(t, s, "/v1/chat/completions", testKey("acme"), body)
		checkError(t, "fourth request", resp, out, http.StatusTooManyRequests, "rate_limit_exceeded")
		if resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	// The decisions went to Redis, and the metrics say so.
	if n := scrape(t, a, "admission_store_duration_seconds_count", `store="redis"`); n < 3 {
		t.Errorf("replica a made %v Redis calls; want its decisions made there", n)
	}
}

// TestRedisStoreNeedsAddress: a policy file naming a store without
// --redis is refused at start, with an error that says what is missing.
func TestRedisStoreNeedsAddress(t *testing.T) {
	o := options{addr: "127.0.0.1:0", cut: "all"}
	withPolicy(t, redisPolicy, []string{"acme"}, "")(&o)
	_, err := start(o)
	if err == nil || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("start without --redis = %v; want an error naming --redis", err)
	}
}

// TestRedisStoreOfTheFileRefused: a store of kind redis in the file names
// its own server, which the gateway would not use (it holds shared stores
// on --redis): the file is refused at start, naming the entry, rather
// than the limits silently kept on another server.
func TestRedisStoreOfTheFileRefused(t *testing.T) {
	o := options{addr: "127.0.0.1:0", cut: "all", redis: "127.0.0.1:1"}
	pol := strings.Replace(redisPolicy, "store: redis", "store: shared", 1)
	withPolicy(t, pol, []string{"acme"}, "stores:\n  shared: {kind: redis, address: 127.0.0.1:2}\n")(&o)
	_, err := start(o)
	if err == nil || !strings.Contains(err.Error(), "stores.shared") || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("start with a redis store in the file = %v; want an error naming stores.shared and --redis", err)
	}
}
