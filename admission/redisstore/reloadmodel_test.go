package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/modeltest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestReloadModel runs the reload model (modeltest.RunReload) with a
// third controller on a real redis-server, for every algorithm: random
// weighted traffic, its settlements and renewals interleaved with
// reloads of the policy's limit and mode and changes of plans, each
// decision required the same on Redis as in memory, figures included.
func TestReloadModel(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	algs := []limits.Algorithm{
		limits.TokenBucket, limits.FixedWindow, limits.SlidingWindow,
		limits.SlidingLog, limits.Quota, limits.Concurrency,
	}
	for _, alg := range algs {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%v/seed=%d", alg, seed), func(t *testing.T) {
				st, err := redisstore.New(client, redisstore.Config{Prefix: uniquePrefix(), CallerTime: true, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				modeltest.RunReload(t, st, alg, seed, 600)
			})
		}
	}
}
