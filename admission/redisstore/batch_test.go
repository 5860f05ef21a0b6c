package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBatchSameFiguresAsMemory replays random weighted traffic on the
// in-memory store and on batches of each algorithm next to a companion
// token bucket that every request takes one permit of and every
// settlement charges one more, and requires every grant and every
// settlement of both to carry the in-memory figures. The client sends
// every settle call twice, as a client retrying after a lost reply does;
// with a 250ms timeout a lease settled less than MaxHold - 1s after its
// admission marks the settlement applied, later ones (and settlements
// without a lease) use a marker key, and leases that expired before their
// settlement are among them.
func TestBatchSameFiguresAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	client, repeats := newRepeatingClient(t, srv.Addr)
	stores := func(t *testing.T) backend.Store {
		s, err := redisstore.New(client, redisstore.Config{Prefix: uniquePrefix(), CallerTime: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := time.Second
	policies := []struct {
		p     admission.Policy
		maxDt time.Duration
	}{
		{admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 7, Per: 3 * s, Burst: 12}, 700 * time.Millisecond},
		{admission.Policy{Name: "tb3", Algorithm: limits.TokenBucket, Limit: 3, Per: s}, 300 * time.Millisecond},
		{admission.Policy{Name: "cc", Algorithm: limits.Concurrency, Limit: 9, MaxHold: 3 * s}, 500 * time.Millisecond},
		{admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 9, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 9, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 9, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "q", Algorithm: limits.Quota, Limit: 20, Period: limits.PeriodFixed, Per: 5 * s}, 400 * time.Millisecond},
	}
	ctx := context.Background()
	for _, tc := range policies {
		t.Run(tc.p.Name, func(t *testing.T) {
			p := tc.p
			mem, _ := memstore.Store{}.Limiter(&p)
			st := stores(t)
			bat, err := st.Limiter(&p)
			if err != nil {
				t.Fatal(err)
			}
			b := st.(backend.Batcher)
			// The companion never runs out and barely refills, so that
			// its remaining figure counts every charge.
			cp := admission.Policy{Name: "companion", Algorithm: limits.TokenBucket, Limit: 1, Per: time.Hour, Burst: 1 << 20}
			comp, _ := st.Limiter(&cp)
			memComp, _ := memstore.Store{}.Limiter(&cp)
			cl := cp.Base()
			l := p.Base()
			rng := rand.New(rand.NewPCG(11, uint64(len(p.Name))))
			type pair struct {
				key    string
				m, b   backend.Grant
				mc, bc backend.Grant // the companion's
			}
			var open []pair
			now := backendtest.Epoch.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
			for i := 0; i < 600; i++ {
				now = now.Add(time.Duration(rng.Int64N(int64(tc.maxDt))))
				key := fmt.Sprintf("k%d", rng.IntN(2))
				switch op := rng.IntN(10); {
				case op < 3 && len(open) > 0:
					j := rng.IntN(len(open))
					o := &open[j]
					ops := []backend.Op{{Limiter: bat, Key: o.key, Limit: l, Grant: o.b}, {Limiter: comp, Key: o.key, Limit: cl, N: 1, Grant: o.bc}}
					if err := memComp.Adjust(ctx, o.key, &cl, &o.mc, 1, now); err != nil {
						t.Fatal(err)
					}
					var delta int64
					if p.Algorithm == limits.Concurrency {
						ops[0].Release = true
						if err := mem.Release(ctx, o.key, &l, &o.m, now); err != nil {
							t.Fatal(err)
						}
					} else {
						delta = rng.Int64N(o.m.Taken+4) - o.m.Taken
						ops[0].N = delta
						if err := mem.Adjust(ctx, o.key, &l, &o.m, delta, now); err != nil {
							t.Fatal(err)
						}
					}
					if err := b.SettleBatch(ctx, ops, now); err != nil {
						t.Fatalf("op %d: SettleBatch: %v", i, err)
					}
					o.bc = ops[1].Grant
					if o.mc.Taken != o.bc.Taken || o.mc.Remaining != o.bc.Remaining {
						t.Fatalf("op %d at %v: SettleBatch(%s): companion taken=%d remaining=%d; memory taken=%d remaining=%d",
							i, now.Sub(backendtest.Epoch), o.key, o.bc.Taken, o.bc.Remaining, o.mc.Taken, o.mc.Remaining)
					}
					if p.Algorithm == limits.Concurrency {
						open = append(open[:j], open[j+1:]...)
						continue
					}
					o.b = ops[0].Grant
					if o.m.Taken != o.b.Taken || o.m.Remaining != o.b.Remaining {
						t.Fatalf("op %d at %v: SettleBatch(%s, %d): redis taken=%d remaining=%d; memory taken=%d remaining=%d",
							i, now.Sub(backendtest.Epoch), o.key, delta, o.b.Taken, o.b.Remaining, o.m.Taken, o.m.Remaining)
					}
				default:
					n := rng.Int64N(6)
					if rng.IntN(20) == 0 {
						n = p.Limit + 1 + rng.Int64N(3)
					}
					gm, err := backendtest.Acquire(ctx, mem, key, &l, n, now)
					if err != nil {
						t.Fatal(err)
					}
					ops := []backend.Op{{Limiter: comp, Key: key, Limit: cl, N: 1}, {Limiter: bat, Key: key, Limit: l, N: n}}
					if err := b.AcquireBatch(ctx, ops, now); err != nil {
						t.Fatalf("op %d: AcquireBatch: %v", i, err)
					}
					if gb := ops[1].Grant; figures(gb) != figures(gm) {
						t.Fatalf("op %d at %v: AcquireBatch(%s, %d) =\n redis  %s\n memory %s", i, now.Sub(backendtest.Epoch), key, n, figures(gb), figures(gm))
					}
					if gm.OK {
						gc, err := backendtest.Acquire(ctx, memComp, key, &cl, 1, now)
						if err != nil {
							t.Fatal(err)
						}
						// Reset is not compared: with a million permits
						// at one an hour, a float64 holds it to ~400ns.
						if bc := ops[0].Grant; gc.OK != bc.OK || gc.Taken != bc.Taken || gc.Remaining != bc.Remaining {
							t.Fatalf("op %d: companion =\n redis  %s\n memory %s", i, figures(bc), figures(gc))
						}
						open = append(open, pair{key, gm, ops[1].Grant, gc, ops[0].Grant})
						if len(open) > 30 {
							open = open[1:]
						}
					}
				}
			}
		})
	}
	if repeats.repeated.Load() == 0 {
		t.Fatal("no settle call was repeated")
	}
}
