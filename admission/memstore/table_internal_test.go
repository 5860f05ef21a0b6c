package memstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestLookupsRaceTableChanges: acquisitions on one key, which take no
// shard lock, stay exact while other callers fill the table with keys
// that sweeps drop, so that the key's shard grows, is rebuilt and has
// partitions dropped and reused under the lookups. The bucket, never
// refilled (every acquisition on it is at one instant), admits exactly its
// capacity, whatever the races; the table never holds more than its bound.
func TestLookupsRaceTableChanges(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	p := limits.Policy{Name: "p", Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Hour,
		MaxPartitions: 300, IdleTimeout: time.Millisecond}
	l := newMemLimiter(&p)
	lim := p.Base()
	ctx := context.Background()
	const hot, floods = 8, 20000
	var admitted, tries, flooded atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var g0 backend.Grant
	if err := l.Acquire(ctx, "hot", &lim, 0, t0, &g0); err != nil || !g0.OK {
		t.Fatalf("Acquire(hot, 0) = %+v, %v; want admitted", g0, err)
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := t0
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Nothing taken: each partition is neutral at once, and
				// dropped by the next sweep.
				now = now.Add(time.Millisecond)
				var g backend.Grant
				_ = l.Acquire(ctx, "flood-"+strconv.Itoa(w)+"-"+strconv.Itoa(i%2000), &lim, 0, now, &g)
				flooded.Add(1)
			}
		}()
	}
	var hw sync.WaitGroup
	for range hot {
		hw.Add(1)
		go func() {
			defer hw.Done()
			// Until the flood has gone through the table many times.
			for flooded.Load() < floods || tries.Load() < 2000 {
				tries.Add(1)
				var g backend.Grant
				if err := l.Acquire(ctx, "hot", &lim, 1, t0, &g); err != nil {
					t.Error(err)
					return
				}
				if g.Overflow {
					t.Error("the hot key went to the overflow partition")
					return
				}
				if g.OK {
					admitted.Add(1)
				}
			}
		}()
	}
	hw.Wait()
	close(stop)
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("admitted %d of %d tries on one bucket of 1000; want exactly 1000", got, tries.Load())
	}
	if s := l.Stats(&lim, t0); s.Partitions > 300 || s.Evicted == 0 {
		t.Errorf("stats %+v; want at most 300 partitions and some evicted", s)
	}
}
