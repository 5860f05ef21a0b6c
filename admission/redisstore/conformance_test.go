package redisstore_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other store in this test binary uses.
func uniquePrefix() string { return fmt.Sprintf("t%d:", prefixSeq.Add(1)) }

// newClient returns a client of the server, closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// callerTimeStores returns a constructor of caller-time stores on client,
// each with its own prefix. Their timeout is long: the tests using them
// compare figures, and a machine starved of CPU must not fail them.
func callerTimeStores(client redis.UniversalClient) func(t *testing.T) backend.Store {
	return func(t *testing.T) backend.Store {
		s, err := redisstore.New(client, redisstore.Config{
			Prefix: uniquePrefix(), CallerTime: true, Timeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TestConformance runs the conformance suite as a Redis user denied
// FUNCTION and FCALL: the store runs scripts only, so a server without
// Functions (before Redis 7, or an ACL) runs it the same.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	if _, err := redistest.Do(srv.Addr, "ACL", "SETUSER", "scripts", "on", ">scripts", "~*", "&*", "+@all", "-function", "-fcall", "-fcall_ro"); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "scripts", Password: "scripts", ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	if err := client.FunctionList(t.Context(), redis.FunctionListQuery{}).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("FUNCTION LIST as the user denied it = %v; want NOPERM", err)
	}
	stores := callerTimeStores(client)
	backendtest.RunCases(t, stores)
	for seed := uint64(1); seed <= 3; seed++ {
		backendtest.RunProperties(t, stores, backendtest.Traffic{
			Seed: seed, Ops: 1000, Keys: 3, MaxN: 6, MaxDt: 200 * time.Millisecond,
		})
	}
}
