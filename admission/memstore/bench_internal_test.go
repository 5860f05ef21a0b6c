package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// BenchmarkLimiterAcquire isolates the in-memory limiter from the controller.
func BenchmarkLimiterAcquire(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchLimiter(b, n) })
	}
}

func benchLimiter(b *testing.B, nkeys int) {
	p := &limits.Policy{Name: "rpm", Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second, MaxPartitions: 20000}
	l := newMemLimiter(p)
	lim := p.Base()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		var g backend.Grant
		_ = l.Acquire(ctx, keys[i%len(keys)], &lim, 1, now, &g)
		if !g.OK {
			b.Fatal("rejected")
		}
	}
}
