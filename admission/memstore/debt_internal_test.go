package memstore

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// FuzzDebtBound drives the in-memory limiter of every algorithm with
// random acquisitions and adjustments, extreme ones included, and checks
// the partition's state after each call: a token bucket's level within
// [-capacity, capacity], a count (window, sliding log, quota) within
// [0, limit] and a sliding log's total equal to its entries, and every
// finite retry-after within the horizon.
func FuzzDebtBound(f *testing.F) {
	f.Add(uint64(1), uint64(1), uint16(500))
	f.Add(uint64(42), uint64(7), uint16(2000))
	f.Fuzz(func(t *testing.T, s1, s2 uint64, n uint16) {
		checkDebtBound(t, rand.New(rand.NewPCG(s1, s2)), int(n%3000))
	})
}

func TestDebtBound(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		checkDebtBound(t, rand.New(rand.NewPCG(seed, 99)), 2000)
	}
}

func checkDebtBound(t *testing.T, rng *rand.Rand, steps int) {
	s := time.Second
	for _, p := range []limits.Policy{
		{Name: "tb", Algorithm: limits.TokenBucket, Limit: 7, Per: 3 * s, Burst: 12},
		{Name: "tbbig", Algorithm: limits.TokenBucket, Limit: limits.MaxAmount, Per: time.Hour, Burst: limits.MaxAmount},
		{Name: "fw", Algorithm: limits.FixedWindow, Limit: 15, Per: 2 * s},
		{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 15, Per: 2 * s},
		{Name: "swbig", Algorithm: limits.SlidingWindow, Limit: limits.MaxAmount, Per: 2 * s},
		{Name: "sl", Algorithm: limits.SlidingLog, Limit: 15, Per: 2 * s},
		{Name: "qf", Algorithm: limits.Quota, Limit: 40, Period: limits.PeriodFixed, Per: 5 * s},
		{Name: "qm", Algorithm: limits.Quota, Limit: limits.MaxAmount, Period: limits.PeriodMonth},
	} {
		l := p.Base()
		ml := newMemLimiter(&p)
		ctx := context.Background()
		amount := func() int64 {
			switch rng.IntN(8) {
			case 0:
				return limits.MaxAmount
			case 1:
				return rng.Int64N(limits.MaxAmount + 1)
			}
			return rng.Int64N(l.Capacity() + 1)
		}
		now := time.Unix(0, 1_700_000_000e9+rng.Int64N(1e18))
		var grants []backend.Grant
		for i := 0; i < steps; i++ {
			now = now.Add(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
			if len(grants) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(grants))
				var delta int64
				switch rng.IntN(6) {
				case 0:
					delta = math.MaxInt64
				case 1:
					delta = math.MinInt64 + 1
				case 2:
					delta = -grants[j].Taken
				default:
					delta = amount() - grants[j].Taken
				}
				_ = ml.Adjust(ctx, "k", &l, &grants[j], delta, now)
				if grants[j].Remaining < 0 || grants[j].Remaining > l.Capacity() {
					t.Fatalf("%s op %d: Adjust(%d) remaining = %d", p.Name, i, delta, grants[j].Remaining)
				}
			} else {
				var g backend.Grant
				_ = ml.Acquire(ctx, "k", &l, amount(), now, &g)
				if g.RetryAfter != limits.Never && g.RetryAfter > l.Horizon(now) {
					t.Fatalf("%s op %d: RetryAfter = %v; horizon %v", p.Name, i, g.RetryAfter, l.Horizon(now))
				}
				if g.OK {
					grants = append(grants, g)
					if len(grants) > 20 {
						grants = grants[1:]
					}
				}
			}
			c, mu := ml.lock("k", &l, now.UnixNano(), false)
			if c == nil {
				continue
			}
			a, b := c.a, c.b
			var sum int64
			if c.x != nil {
				for k := 0; k < c.x.log.size; k++ {
					sum += c.x.log.at(k).cost
				}
			}
			mu.Unlock()
			capacity, limit := float64(l.Capacity()), float64(l.Amount)
			switch {
			case p.Algorithm == limits.TokenBucket && (a < -capacity || a > capacity):
				t.Fatalf("%s op %d: level %v outside [-%v, %v]", p.Name, i, a, capacity, capacity)
			case p.Algorithm != limits.TokenBucket && (a < 0 || a > limit || b < 0 || b > limit):
				t.Fatalf("%s op %d: counts %v, %v outside [0, %v]", p.Name, i, a, b, limit)
			case p.Algorithm == limits.SlidingLog && float64(sum) != a:
				t.Fatalf("%s op %d: total %v; entries sum to %d", p.Name, i, a, sum)
			}
		}
	}
}
