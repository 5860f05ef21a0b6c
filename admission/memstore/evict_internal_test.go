package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestOverflowEvict: with OverflowEvict, a full table of partitions that
// are not neutral gives every new key a partition of its own by evicting
// those that lose the least: a flood of keys charged once each evicts its
// own, never a partition charged more nor one holding concurrency permits.
func TestOverflowEvict(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		p    limits.Policy
	}{
		{"fixed window", limits.Policy{Algorithm: limits.FixedWindow, Limit: 100, Per: 24 * time.Hour}},
		{"token bucket", limits.Policy{Algorithm: limits.TokenBucket, Limit: 100, Per: 24 * time.Hour}},
		{"concurrency", limits.Policy{Algorithm: limits.Concurrency, Limit: 100, MaxHold: time.Hour}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			p.Name, p.MaxPartitions, p.Overflow = "p", 200, limits.OverflowEvict
			l := newMemLimiter(&p)
			lim := p.Base()
			now := t0
			acquire := func(key string, n int64) backend.Grant {
				var g backend.Grant
				now = now.Add(time.Millisecond)
				if err := l.Acquire(context.Background(), key, &lim, n, now, &g); err != nil {
					t.Fatal(err)
				}
				return g
			}
			// Ten callers charged 50 each, then a flood of 2000 keys
			// charged 1 each.
			for i := range 10 {
				acquire("caller-"+strconv.Itoa(i), 50)
			}
			overflowed := 0
			for i := range 2000 {
				if acquire("flood-"+strconv.Itoa(i), 1).Overflow {
					overflowed++
				}
			}
			if c.p.Algorithm == limits.Concurrency {
				// Permits in flight are never dropped: the flood shares
				// the overflow partition once the table is full.
				if overflowed == 0 || l.count.Load() != 200 {
					t.Fatalf("concurrency: %d flood keys in the overflow, %d partitions; want some and 200", overflowed, l.count.Load())
				}
				return
			}
			if overflowed != 0 {
				t.Fatalf("%d flood keys landed in the overflow partition; want none", overflowed)
			}
			for i := range 10 {
				if g := acquire("caller-"+strconv.Itoa(i), 1); g.Remaining != 49 {
					t.Errorf("caller %d: remaining %d after the flood and one more; want 49 (its partition kept)", i, g.Remaining)
				}
			}
			if g := acquire("newcomer", 1); g.Overflow || g.Remaining != 99 {
				t.Errorf("newcomer: overflow %v, remaining %d; want its own partition with 99", g.Overflow, g.Remaining)
			}
			if n := l.count.Load(); n > 200 {
				t.Errorf("%d partitions; want at most 200", n)
			}
		})
	}
}
