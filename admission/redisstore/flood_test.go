package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/redisstore"
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

// TestTenantFlood admits one request for each of 100,000 distinct tenants
// and reports the Redis memory each partition costs; the keys then expire
// by themselves.
func TestTenantFlood(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	prefix := "flood:"
	st := newStore(t, client, redisstore.Config{Prefix: prefix, Timeout: 5 * time.Second, IdleGrace: 100 * time.Millisecond})
	p := admission.Policy{Name: "rps", Key: []admission.KeyPart{admission.KeyTenant}, Algorithm: admission.TokenBucket, Limit: 10, Per: time.Second}
	lim, err := st.Limiter(&p)
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(&p)
	const tenants = 100_000
	before := usedMemory(t, srv.Addr)
	var next atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= tenants {
					return
				}
				if _, err := lim.Acquire(ctx, "tenant-"+strconv.FormatInt(i, 10), l, 1, time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if next.Load() < tenants {
		t.Fatalf("only %d tenants in 60s", next.Load())
	}
	after := usedMemory(t, srv.Addr)
	n, _ := client.DBSize(ctx).Result()
	var sample int64
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("%s{tenant-%d}:rps:tb:tenant-%d", prefix, i*997, i*997)
		u, err := client.MemoryUsage(ctx, key).Result()
		if err == nil {
			sample += u
		}
	}
	perPartition := float64(after-before) / float64(tenants)
	t.Logf("%d tenants: %d keys, used_memory +%d bytes = %.0f bytes per partition; MEMORY USAGE of a partition key %d bytes",
		tenants, n, after-before, perPartition, sample/100)
	if n > tenants || perPartition > 256 {
		t.Errorf("%d keys, %.0f bytes per partition; want at most one key and 256 bytes per partition", n, perPartition)
	}
	// The buckets are full again after 100ms: every key expires.
	wait := time.Now().Add(10 * time.Second)
	for time.Now().Before(wait) {
		if n, _ = client.DBSize(ctx).Result(); n < tenants/100 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n >= tenants/100 {
		t.Errorf("%d keys left 10s after the flood; want them expired", n)
	}
}
