package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/redistest"
)

func usedMemory(t *testing.T, addr string) int64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}

// TestTenantFlood admits one request for each of 100,000 distinct tenants,
// with the store's own script, keys and arguments sent in pipelines of 1000
// (the admission path itself sends them one by one), and reports the Redis
// memory a partition costs and the expiry that bounds its life.
func TestTenantFlood(t *testing.T) {
	srv := redistest.Start(t)
	// How long the flood takes is not what the test measures: no read
	// timeout, and a store timeout no call on a loaded machine reaches.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1})
	defer client.Close()
	const prefix = "flood:"
	st, err := New(client, Config{Prefix: prefix, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The flood itself is on the token bucket; the other layouts are
	// measured on fewer partitions to keep the test short.
	policies := []struct {
		p       admission.Policy
		tenants int
		life    time.Duration // neutral after at most this long
	}{
		{admission.Policy{Name: "rph", Algorithm: limits.TokenBucket, Limit: 100, Per: time.Hour}, 100_000, time.Hour},
		{admission.Policy{Name: "fixed", Algorithm: limits.FixedWindow, Limit: 100, Per: time.Hour}, 10_000, time.Hour},
		{admission.Policy{Name: "win", Algorithm: limits.SlidingWindow, Limit: 100, Per: time.Hour}, 10_000, 2 * time.Hour},
		{admission.Policy{Name: "log", Algorithm: limits.SlidingLog, Limit: 100, Per: time.Hour}, 10_000, time.Hour},
		{admission.Policy{Name: "inflight", Algorithm: limits.Concurrency, Limit: 10, MaxHold: time.Hour}, 10_000, time.Hour},
	}
	ctx := context.Background()
	for _, tc := range policies {
		p, tenants := tc.p, tc.tenants
		lim, _ := st.Limiter(&p)
		l := lim.(*limiter)
		limit := limits.Limit{Algorithm: p.Algorithm, Amount: p.Limit, Burst: p.Limit, Per: p.Per, MaxHold: p.MaxHold}
		if _, err := backendtest.Acquire(ctx, lim, "warm-up", &limit, 1, time.Now()); err != nil {
			t.Fatal(err)
		}
		before := usedMemory(t, srv.Addr)
		keysBefore, _ := client.DBSize(ctx).Result()
		// The instant of each thousand tenants' calls, which names a fixed
		// window's keys.
		nows := make([]int64, 0, tenants/1000)
		for i := 0; i < tenants; i += 1000 {
			pipe := client.Pipeline()
			now := time.Now().UnixNano()
			nows = append(nows, now)
			var calls []*call
			for j := i; j < i+1000; j++ {
				op := []backend.Op{{Limiter: l, Key: "tenant-" + strconv.Itoa(j), Limit: limit, N: 1}}
				// The store's own call (acquire), sent in a pipeline.
				var kb [1]byte
				c := st.acquireCall(op, now)
				calls = append(calls, c)
				pipe.Do(ctx, c.command("evalsha", acquireScripts.get(scriptKey(kb[:0], op, false)).sha)...)
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			for k, c := range cmds {
				r, _ := c.(*redis.Cmd).Text()
				op := []backend.Op{{Limiter: l, Limit: limit, N: 1}}
				admitted := grants(op, r) == nil && op[0].Grant.OK
				if !admitted {
					t.Fatalf("%s: reply %d %q; want an admission", p.Name, k, r)
				}
			}
			for _, c := range calls {
				st.putCall(c)
			}
		}
		after := usedMemory(t, srv.Addr)
		keys, _ := client.DBSize(ctx).Result()
		var usage, maxTTL int64
		for i := 0; i < 100; i++ {
			c := &call{}
			j := i*(tenants/100) + i%7
			l.putKeys(c, "tenant-"+strconv.Itoa(j), &limit, nows[j/1000])
			c.flushKeys()
			for _, k := range c.keys {
				u, err := client.MemoryUsage(ctx, k).Result()
				if err != nil {
					t.Fatalf("MEMORY USAGE %s: %v", k, err)
				}
				usage += u
				ttl, _ := client.PTTL(ctx, k).Result()
				maxTTL = max(maxTTL, ttl.Milliseconds())
			}
		}
		perPartition := float64(after-before) / float64(tenants)
		t.Logf("%s (%s): %d partitions, %d keys, used_memory +%.1f MB = %.0f bytes per partition; MEMORY USAGE %d bytes per partition; keys expire within %v",
			p.Name, p.Algorithm, tenants, keys-keysBefore, float64(after-before)/1e6, perPartition, usage/100, time.Duration(maxTTL)*time.Millisecond)
		if perPartition > 512 {
			t.Errorf("%s: %.0f bytes per partition; want at most 512", p.Name, perPartition)
		}
		// Every key lives at most until its state is neutral plus the grace.
		if bound := tc.life + DefaultIdleGrace; time.Duration(maxTTL)*time.Millisecond > bound {
			t.Errorf("%s: a key expires in %vms; want within %v", p.Name, maxTTL, bound)
		}
		if err := client.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
