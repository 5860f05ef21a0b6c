package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLeanBatchSameFiguresAsMemory replays random weighted traffic on the
// in-memory store and on batches of token buckets and concurrency limits
// (the lean scripts), next to a companion token bucket, and requires every
// grant and every settlement to carry the in-memory figures.
func TestLeanBatchSameFiguresAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	stores := callerTimeStores(newClient(t, srv.Addr))
	s := time.Second
	policies := []struct {
		p     admission.Policy
		maxDt time.Duration
	}{
		{admission.Policy{Name: "tb", Algorithm: admission.TokenBucket, Limit: 7, Per: 3 * s, Burst: 12}, 700 * time.Millisecond},
		{admission.Policy{Name: "tb3", Algorithm: admission.TokenBucket, Limit: 3, Per: s}, 300 * time.Millisecond},
		{admission.Policy{Name: "cc", Algorithm: admission.Concurrency, Limit: 9, MaxHold: 3 * s}, 500 * time.Millisecond},
	}
	ctx := context.Background()
	for _, tc := range policies {
		t.Run(tc.p.Name, func(t *testing.T) {
			p := tc.p
			mem, _ := admission.MemoryStore{}.Limiter(&p)
			st := stores(t)
			bat, err := st.Limiter(&p)
			if err != nil {
				t.Fatal(err)
			}
			b := st.(admission.Batcher)
			cp := admission.Policy{Name: "companion", Algorithm: admission.TokenBucket, Limit: 1 << 40, Per: time.Hour}
			comp, _ := st.Limiter(&cp)
			cl := admissiontest.LimitOf(&cp)
			l := admissiontest.LimitOf(&p)
			rng := rand.New(rand.NewPCG(11, uint64(len(p.Name))))
			type pair struct {
				key  string
				m, b admission.Grant
			}
			var open []pair
			now := admissiontest.Epoch.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
			for i := 0; i < 600; i++ {
				now = now.Add(time.Duration(rng.Int64N(int64(tc.maxDt))))
				key := fmt.Sprintf("k%d", rng.IntN(2))
				switch op := rng.IntN(10); {
				case op < 3 && len(open) > 0:
					j := rng.IntN(len(open))
					o := &open[j]
					ops := []admission.Op{{Limiter: bat, Key: o.key, Limit: l, Grant: o.b}, {Limiter: comp, Key: o.key, Limit: cl, N: 1}}
					var delta int64
					if p.Algorithm == admission.Concurrency {
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
					if p.Algorithm == admission.Concurrency {
						open = append(open[:j], open[j+1:]...)
						continue
					}
					o.b = ops[0].Grant
					if o.m.Taken != o.b.Taken || o.m.Remaining != o.b.Remaining {
						t.Fatalf("op %d at %v: SettleBatch(%s, %d): redis taken=%d remaining=%d; memory taken=%d remaining=%d",
							i, now.Sub(admissiontest.Epoch), o.key, delta, o.b.Taken, o.b.Remaining, o.m.Taken, o.m.Remaining)
					}
				default:
					n := rng.Int64N(6)
					if rng.IntN(20) == 0 {
						n = p.Limit + 1 + rng.Int64N(3)
					}
					gm, err := admissiontest.Acquire(ctx, mem, key, &l, n, now)
					if err != nil {
						t.Fatal(err)
					}
					ops := []admission.Op{{Limiter: comp, Key: key, Limit: cl, N: 1}, {Limiter: bat, Key: key, Limit: l, N: n}}
					if err := b.AcquireBatch(ctx, ops, now); err != nil {
						t.Fatalf("op %d: AcquireBatch: %v", i, err)
					}
					if gb := ops[1].Grant; figures(gb) != figures(gm) {
						t.Fatalf("op %d at %v: AcquireBatch(%s, %d) =\n redis  %s\n memory %s", i, now.Sub(admissiontest.Epoch), key, n, figures(gb), figures(gm))
					}
					if gm.OK {
						open = append(open, pair{key, gm, ops[1].Grant})
						if len(open) > 30 {
							open = open[1:]
						}
					}
				}
			}
		})
	}
}
