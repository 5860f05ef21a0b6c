package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/puretest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// loadTimeout is the store timeout of the tests that load one Redis from
// many goroutines: no call on a loaded machine reaches it, so a decision
// is never a store failure because the machine was slow.
const loadTimeout = 10 * time.Second

// TestReplicas runs three controllers, each with its own client as three
// replicas would have, against one Redis under concurrent load, and checks
// the fleet-wide admitted totals.
func TestReplicas(t *testing.T) {
	srv := redistest.Start(t)
	const (
		replicas   = 3
		goroutines = 8
		attempts   = 30
		limit      = 150
	)
	long := 1000 * time.Hour // one window for the whole test
	cases := []struct {
		p admission.Policy
		// slack is how far above limit the total may go over the run.
		slack func(elapsed time.Duration) int64
	}{
		{admission.Policy{Name: "token_bucket", Algorithm: limits.TokenBucket, Limit: limit, Per: time.Hour},
			func(d time.Duration) int64 { return int64(float64(limit) * d.Hours()) }},
		{admission.Policy{Name: "fixed_window", Algorithm: limits.FixedWindow, Limit: limit, Per: long}, nil},
		{admission.Policy{Name: "sliding_window", Algorithm: limits.SlidingWindow, Limit: limit, Per: long}, nil},
		{admission.Policy{Name: "sliding_log", Algorithm: limits.SlidingLog, Limit: limit, Per: time.Hour}, nil},
		{admission.Policy{Name: "quota", Algorithm: limits.Quota, Limit: limit, Period: limits.PeriodFixed, Per: long}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.p.Name, func(t *testing.T) {
			prefix := uniquePrefix()
			p := tc.p
			p.Key = []limits.KeyPart{limits.KeyTenant}
			p.Unit = limits.UnitTokens
			var ctls []*admission.Controller
			for r := 0; r < replicas; r++ {
				st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix, Timeout: loadTimeout})
				ctls = append(ctls, newController(t, st, p))
			}
			var admitted, rejected atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for r := 0; r < replicas; r++ {
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func(ctl *admission.Controller, seed uint64) {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(seed, 1))
						for range attempts {
							n := 1 + rng.Int64N(4)
							tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "shared", Tokens: n})
							if err != nil {
								if !errorsIsRejection(err) {
									t.Errorf("Admit: %v", err)
									return
								}
								rejected.Add(1)
								continue
							}
							admitted.Add(n)
							tk.Done()
						}
					}(ctls[r], uint64(r*100+g))
				}
			}
			wg.Wait()
			elapsed := time.Since(start)
			var slack int64
			if tc.slack != nil {
				slack = tc.slack(elapsed)
			}
			got := admitted.Load()
			if got > limit+slack || got < limit-3 {
				t.Errorf("%d replicas admitted %d tokens in %v; want %d (at most %d more from refill, at most 3 fewer from the last costs)",
					replicas, got, elapsed.Round(time.Millisecond), limit, slack)
			}
			if rejected.Load() == 0 {
				t.Error("nothing rejected: the load did not reach the limit")
			}
		})
	}
	t.Run("concurrency", func(t *testing.T) {
		prefix := uniquePrefix()
		p := admission.Policy{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 5, MaxHold: time.Minute}
		var ctls []*admission.Controller
		for r := 0; r < replicas; r++ {
			st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix, Timeout: loadTimeout})
			ctls = append(ctls, newController(t, st, p))
		}
		var inflight, peak, admitted, rejected atomic.Int64
		var wg sync.WaitGroup
		for r := 0; r < replicas; r++ {
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(ctl *admission.Controller) {
					defer wg.Done()
					for range attempts {
						tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "shared"})
						if err != nil {
							rejected.Add(1)
							continue
						}
						admitted.Add(1)
						n := inflight.Add(1)
						for {
							p := peak.Load()
							if n <= p || peak.CompareAndSwap(p, n) {
								break
							}
						}
						time.Sleep(time.Millisecond)
						inflight.Add(-1)
						tk.Done()
					}
				}(ctls[r])
			}
		}
		wg.Wait()
		if peak.Load() > p.Limit {
			t.Errorf("%d requests in flight at once; limit %d", peak.Load(), p.Limit)
		}
		if admitted.Load() == 0 || rejected.Load() == 0 {
			t.Errorf("admitted %d, rejected %d; want both", admitted.Load(), rejected.Load())
		}
		// Every lease was released: the whole limit is free again.
		st := newStore(t, newClient(t, srv.Addr), redisstore.Config{Prefix: prefix, Timeout: loadTimeout})
		lim, _ := st.Limiter(&p)
		g, err := backendtest.Acquire(context.Background(), lim, "shared", limitOf(&p), p.Limit, time.Now())
		if err != nil || !g.OK {
			t.Errorf("Acquire(limit) after the load = %+v, %v; want the whole limit free", g, err)
		}
	})
}

func errorsIsRejection(err error) bool {
	_, ok := err.(*admission.Rejection)
	return ok
}

// TestCluster runs the conformance tables on a three-node Redis Cluster and
// checks a request's policies keyed by tenant run in one script there, and
// that what a tenant has left is read there.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	testSharded(t, func(t testing.TB) redis.UniversalClient { return newClusterClient(t, cl.Addrs) }, cl.Addrs)
}

// TestRing does the same on a Ring of two servers, which shards keys by
// their hash tag on the client.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	testSharded(t, func(t testing.TB) redis.UniversalClient {
		client := redis.NewRing(&redis.RingOptions{
			Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
			ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { client.Close() })
		return client
	}, []string{a.Addr, b.Addr})
}

// testSharded runs the conformance tables on a client of newClient, whose
// keys are spread over the servers at addrs by hash tag, also with every
// server's scripts flushed before every call, and checks a request's
// policies keyed by tenant run in one script there, and policies in
// different slots in one script each, all or nothing.
func testSharded(t *testing.T, newClient func(t testing.TB) redis.UniversalClient, addrs []string) {
	client := newClient(t)
	t.Run("conformance", func(t *testing.T) {
		backendtest.RunCases(t, callerTimeStores(client))
	})
	t.Run("scripts_flushed", func(t *testing.T) {
		flushed := newClient(t)
		h := &flushScripts{t: t, addrs: addrs}
		flushed.AddHook(h)
		backendtest.RunCases(t, callerTimeStores(flushed))
		h.check(t)
	})
	t.Run("remaining", func(t *testing.T) {
		// Reading what is left runs on the node of the tenant's slot (a
		// sliding log's two keys together) and reads the memory's figures.
		var ctls []*admission.Controller
		for _, st := range []backend.Store{memstore.Store{}, newStore(t, client, redisstore.Config{CallerTime: true, Timeout: 10 * time.Second})} {
			ctl, err := admission.New(puretest.Config("s"), admission.WithClock(admissiontest.NewClock(backendtest.Epoch)), admission.WithStore("s", st))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ctl.Close() })
			ctls = append(ctls, ctl)
		}
		ctx := context.Background()
		for i := range 20 {
			r := admission.Request{Tenant: fmt.Sprintf("tenant-%d", i), Tokens: int64(100 * i)}
			var figures [2]string
			for j, ctl := range ctls {
				if i%2 == 0 {
					if _, err := ctl.TryAdmit(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
				ss, err := ctl.Remaining(ctx, r, nil)
				if err != nil {
					t.Fatalf("Remaining(%s): %v", r.Tenant, err)
				}
				figures[j] = fmt.Sprint(ss)
			}
			if figures[1] != figures[0] {
				t.Errorf("Remaining(%s) =\n\t%s\nwant (memory)\n\t%s", r.Tenant, figures[1], figures[0])
			}
		}
	})
	t.Run("fixed_window_server_window", func(t *testing.T) {
		// A replica three days behind the server: the script names the
		// server's window's key itself, in the slot of the one it was
		// given, which the node lets it write.
		st := newStore(t, client, redisstore.Config{Prefix: uniquePrefix(), Timeout: 2 * time.Second})
		p := admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 10, Per: 24 * time.Hour}
		lim, _ := st.Limiter(&p)
		ctx := context.Background()
		behind := time.Now().Add(-72 * time.Hour)
		var g, again backend.Grant
		if err := lim.Acquire(ctx, "acme", limitOf(&p), 3, behind, &g); err != nil || !g.OK {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
		if err := lim.Acquire(ctx, "acme", limitOf(&p), 3, behind, &again); err != nil || !again.OK {
			t.Fatalf("second Acquire: %+v, %v", again, err)
		}
		// Unless the day turned between the two (then the second counts alone).
		if again.Stamp == g.Stamp && again.Remaining != 4 {
			t.Errorf("second Acquire left %d; want 4 in the server's window", again.Remaining)
		}
		if since := time.Since(time.Unix(0, again.Stamp)); since < 0 || since > 24*time.Hour {
			t.Errorf("the window starts %v before now; want the server's day", since)
		}
	})
	t.Run("batch", func(t *testing.T) {
		st := newStore(t, client, redisstore.Config{Timeout: 2 * time.Second})
		ctl := newController(t, st, threePolicies()...)
		ctx := context.Background()
		calls := func() int {
			n := 0
			for _, a := range addrs {
				n += scriptCalls(t, a)
			}
			return n
		}
		for i := 0; i < 20; i++ {
			tenant := fmt.Sprintf("tenant-%d", i)
			tk, err := ctl.Admit(ctx, admission.Request{Tenant: tenant, Tokens: 10}) // loads scripts on every node
			if err != nil {
				t.Fatal(err)
			}
			tk.Settle(admission.Usage{Tokens: 5})
		}
		before := calls()
		for i := 0; i < 20; i++ {
			tk, err := ctl.Admit(ctx, admission.Request{Tenant: fmt.Sprintf("tenant-%d", i), Tokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			tk.Settle(admission.Usage{Tokens: 5})
		}
		if got := calls() - before; got != 40 {
			t.Errorf("20 requests under 3 policies: %d script calls; want 40 (one admit, one settle each)", got)
		}
		for _, a := range addrs {
			if scriptCalls(t, a) == 0 {
				t.Errorf("no script call on %s: the 20 tenants were not spread over the servers", a)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		// Decisions from many goroutines at once share round trips per
		// node: every tenant is admitted exactly its limit, and the store
		// has one queue per server.
		st := newStore(t, client, redisstore.Config{Timeout: 2 * time.Second})
		p := admission.Policy{Name: "burst", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 30, Per: 1000 * time.Hour}
		ctl := newController(t, st, p)
		const tenants, goroutines, rounds = 12, 16, 3
		var admitted [tenants]atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < tenants*rounds; i++ {
					k := (i + g) % tenants
					tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: fmt.Sprintf("tenant-%d", k)})
					switch {
					case err == nil:
						admitted[k].Add(1)
						tk.Done()
					case !errorsIsRejection(err):
						t.Errorf("Admit: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for k := range admitted {
			if n := admitted[k].Load(); n != p.Limit {
				t.Errorf("tenant-%d: %d admitted of %d attempts; want exactly its limit %d", k, n, goroutines*rounds, p.Limit)
			}
		}
		if n := redisstore.NodeQueues(st); n != len(addrs) {
			t.Errorf("%d node queues; want one per server (%d)", n, len(addrs))
		}
	})
	t.Run("different_slots", func(t *testing.T) {
		// A global limit does not share the tenant's slot: the request is
		// evaluated in two scripts and what the first took is given back
		// when the second refuses.
		st := newStore(t, client, redisstore.Config{Timeout: 2 * time.Second})
		tenant := admission.Policy{Name: "per_tenant", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 100, Per: time.Hour}
		global := admission.Policy{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.FixedWindow, Limit: 3, Per: 1000 * time.Hour}
		ctl := newController(t, st, tenant, global)
		ctx := context.Background()
		for i := 0; i < 8; i++ {
			tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
			if (err == nil) != (i < 3) {
				t.Fatalf("Admit %d = %v; want admitted only for the first 3", i, err)
			}
			tk.Done()
		}
		lim, _ := st.Limiter(&tenant)
		g, err := backendtest.Acquire(ctx, lim, "acme", limitOf(&tenant), 0, time.Now())
		if err != nil || g.Remaining != 97 {
			t.Errorf("per-tenant remaining = %d, %v; want 97 (the 5 refused requests gave their permits back)", g.Remaining, err)
		}
	})
}

func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSentinel runs the store through a Sentinel failover client (the
// master found by asking the Sentinel), as a UniversalClient.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master, "main")
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName: "main", Addrs: []string{sentinel.Addr}, ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	st := newStore(t, client, redisstore.Config{Timeout: 2 * time.Second})
	ctl := newController(t, st, threePolicies()...)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme", Tokens: 10})
		if (err == nil) != (i < 2) {
			t.Fatalf("Admit %d = %v; want the third refused by the concurrency limit of 2", i, err)
		}
		if i == 2 {
			break
		}
		defer tk.Done()
	}
	if n := scriptCalls(t, master.Addr); n < 3 {
		t.Errorf("%d script calls on the master; want the decisions made there", n)
	}
}
