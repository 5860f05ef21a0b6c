package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestShutdownPastTimeoutReleasesRedisLeases: streams that outlast the
// shutdown timeout are cut, and their concurrency leases on Redis are
// given back before shutdown returns, so that the other replicas admit
// at once rather than after the leases' max hold.
func TestShutdownPastTimeoutReleasesRedisLeases(t *testing.T) {
	srv := redistest.Start(t)
	s := startProxy(t, withPolicy(t, `
  - name: global-concurrency
    key: [global]
    algorithm: concurrency
    limit: 64
    store: redis
    on_store_error: closed
`, []string{"a"}, ""), func(o *options) {
		o.redis = srv.Addr
		o.simRate, o.simTokens = 100, 1_000_000 // longer than any shutdown timeout
	})
	c := sdk(s, testKey("a"))
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 64 {
		user := fmt.Sprintf("run%d", i)
		started := make(chan struct{})
		wg.Go(func() { runStream(ctx, c, userParams(user), func() { close(started) }) })
		<-started
	}
	if n := redisLeases(t, srv.Addr); n != 64 {
		t.Fatalf("Redis leases with 64 streams running = %d; want 64", n)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("shutdown with streams that never end = %v; want the deadline exceeded", err)
	}
	if n := redisLeases(t, srv.Addr); n != 0 {
		t.Errorf("Redis leases after the shutdown cut 64 streams = %d; want 0 (given back, not left to max hold)", n)
	}
}
