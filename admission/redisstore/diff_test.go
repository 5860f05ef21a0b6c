package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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
	"github.com/sluicehq/sluice/internal/redistest"
)

// diffPolicy is a policy replayed on both stores, with the longest step
// between two calls.
type diffPolicy struct {
	p     admission.Policy
	maxDt time.Duration
}

// diffPolicies returns a policy of every algorithm (and every quota period)
// with small limits.
func diffPolicies() []diffPolicy {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		ny = time.FixedZone("UTC-5", -5*3600)
	}
	s := time.Second
	return []diffPolicy{
		{admission.Policy{Name: "tb", Algorithm: limits.TokenBucket, Limit: 7, Per: 3 * s, Burst: 12}, 700 * time.Millisecond},
		{admission.Policy{Name: "tb3", Algorithm: limits.TokenBucket, Limit: 3, Per: s}, 300 * time.Millisecond},
		{admission.Policy{Name: "fw", Algorithm: limits.FixedWindow, Limit: 15, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "sw", Algorithm: limits.SlidingWindow, Limit: 15, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "sl", Algorithm: limits.SlidingLog, Limit: 15, Per: 2 * s}, 400 * time.Millisecond},
		{admission.Policy{Name: "cc", Algorithm: limits.Concurrency, Limit: 9, MaxHold: 3 * s}, 500 * time.Millisecond},
		{admission.Policy{Name: "qf", Algorithm: limits.Quota, Limit: 40, Period: limits.PeriodFixed, Per: 5 * s}, time.Second},
		{admission.Policy{Name: "qd", Algorithm: limits.Quota, Limit: 40, Period: limits.PeriodDay, Location: ny}, 3 * time.Hour},
		{admission.Policy{Name: "qm", Algorithm: limits.Quota, Limit: 40, Period: limits.PeriodMonth, Location: ny}, 4 * 24 * time.Hour},
	}
}

// diffTraffic chooses the amounts of a replay: the cost of an acquisition
// under limit l, and the delta of an adjustment of a grant holding taken.
type diffTraffic struct {
	cost  func(rng *rand.Rand, l *limits.Limit) int64
	delta func(rng *rand.Rand, taken int64) int64
}

// TestSameFiguresAsMemory replays random weighted traffic (acquisitions,
// refunds, overrun charges, releases, lease renewals and expiries, period
// changes) on the in-memory store and on Redis side by side, and requires every grant
// to carry the same figures. The client sends every settle call twice, as
// a client retrying after a lost reply does: each must still apply once.
func TestSameFiguresAsMemory(t *testing.T) {
	sameFigures(t, diffPolicies(), diffTraffic{
		cost: func(rng *rand.Rand, l *limits.Limit) int64 {
			if rng.IntN(20) == 0 {
				return l.Amount + 1 + rng.Int64N(3)
			}
			return rng.Int64N(6)
		},
		delta: func(rng *rand.Rand, taken int64) int64 { return rng.Int64N(taken+4) - taken },
	})
}

// TestSameFiguresExtreme replays hostile traffic on both stores: costs up
// to MaxAmount, overruns and refunds of any size (beyond the amounts the
// controller passes, to the extremes of int64), limits as large as
// MaxAmount. Every figure must be the same as in memory, so the debt
// bound holds in Redis as it does in memory, and no retry-after may exceed
// the policy's horizon.
func TestSameFiguresExtreme(t *testing.T) {
	policies := diffPolicies()
	s := time.Second
	policies = append(policies,
		diffPolicy{admission.Policy{Name: "tbmax", Algorithm: limits.TokenBucket, Limit: limits.MaxAmount, Per: time.Hour, Burst: limits.MaxAmount}, 700 * time.Millisecond},
		diffPolicy{admission.Policy{Name: "tbslow", Algorithm: limits.TokenBucket, Limit: 1, Per: time.Hour, Burst: limits.MaxAmount}, 10 * time.Minute},
		diffPolicy{admission.Policy{Name: "fwmax", Algorithm: limits.FixedWindow, Limit: limits.MaxAmount, Per: 2 * s}, 400 * time.Millisecond},
		diffPolicy{admission.Policy{Name: "swmax", Algorithm: limits.SlidingWindow, Limit: limits.MaxAmount, Per: 2 * s}, 400 * time.Millisecond},
		diffPolicy{admission.Policy{Name: "qmax", Algorithm: limits.Quota, Limit: limits.MaxAmount, Period: limits.PeriodFixed, Per: 5 * s}, time.Second},
	)
	sameFigures(t, policies, diffTraffic{
		cost: func(rng *rand.Rand, l *limits.Limit) int64 {
			switch rng.IntN(10) {
			case 0:
				return limits.MaxAmount
			case 1:
				return rng.Int64N(limits.MaxAmount + 1)
			case 2:
				return l.Capacity()
			}
			return rng.Int64N(min(l.Capacity(), 6) + 1)
		},
		delta: func(rng *rand.Rand, taken int64) int64 {
			// An extreme delta leaves the grant's Taken anywhere in int64,
			// in memory and Redis alike.
			taken = min(max(taken, 0), limits.MaxAmount)
			switch rng.IntN(8) {
			case 0:
				return limits.MaxAmount
			case 1:
				return -limits.MaxAmount
			case 2:
				return math.MaxInt64
			case 3:
				return math.MinInt64 + 1
			case 4:
				return rng.Int64N(limits.MaxAmount+1) - taken
			}
			return rng.Int64N(taken+4) - taken
		},
	})
}

// sameFigures replays traffic on the policies in memory, on Redis one call
// per policy, and on Redis in two-policy batches, and compares every grant.
func sameFigures(t *testing.T, policies []diffPolicy, tr diffTraffic) {
	srv := redistest.Start(t)
	client, repeats := newRepeatingClient(t, srv.Addr)
	stores := callerTimeStores(client)
	ctx := context.Background()
	for _, tc := range policies {
		t.Run(tc.p.Name, func(t *testing.T) {
			p := tc.p
			mem, _ := memstore.Store{}.Limiter(&p)
			red, err := stores(t).Limiter(&p)
			if err != nil {
				t.Fatal(err)
			}
			// bat evaluates each acquisition in a two-policy batch, next
			// to a companion policy taking nothing.
			batStore := stores(t)
			bat, _ := batStore.Limiter(&p)
			cp := admission.Policy{Name: "companion", Algorithm: limits.FixedWindow, Limit: 1 << 40, Per: time.Hour}
			comp, _ := batStore.Limiter(&cp)
			cl := cp.Base()
			l := p.Base()
			rng := rand.New(rand.NewPCG(7, uint64(len(p.Name))))
			type pair struct {
				key     string
				m, r, b backend.Grant
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
					if p.Algorithm == limits.Concurrency && rng.IntN(2) == 0 {
						em := mem.(backend.Renewer).Renew(ctx, o.key, &l, &o.m, now)
						er := red.(backend.Renewer).Renew(ctx, o.key, &l, &o.r, now)
						eb := bat.(backend.Renewer).Renew(ctx, o.key, &l, &o.b, now)
						if em != nil || er != nil || eb != nil {
							t.Fatalf("op %d: Renew = %v, %v, %v", i, em, er, eb)
						}
						m, r, b := renewed(o.m), renewed(o.r), renewed(o.b)
						if m != r || m != b {
							t.Fatalf("op %d at %v: Renew(%s):\n redis  %s\n batch  %s\n memory %s", i, now.Sub(backendtest.Epoch), o.key, r, b, m)
						}
						continue
					}
					if p.Algorithm == limits.Concurrency {
						em := mem.Release(ctx, o.key, &l, &o.m, now)
						er := red.Release(ctx, o.key, &l, &o.r, now)
						eb := bat.Release(ctx, o.key, &l, &o.b, now)
						if em != nil || er != nil || eb != nil {
							t.Fatalf("op %d: Release = %v, %v, %v", i, em, er, eb)
						}
						open = append(open[:j], open[j+1:]...)
						continue
					}
					delta := tr.delta(rng, o.m.Taken)
					em := mem.Adjust(ctx, o.key, &l, &o.m, delta, now)
					er := red.Adjust(ctx, o.key, &l, &o.r, delta, now)
					eb := bat.Adjust(ctx, o.key, &l, &o.b, delta, now)
					if em != nil || er != nil || eb != nil {
						t.Fatalf("op %d: Adjust = %v, %v, %v", i, em, er, eb)
					}
					if o.m.Taken != o.r.Taken || o.m.Remaining != o.r.Remaining || o.b.Remaining != o.m.Remaining {
						t.Fatalf("op %d at %v: Adjust(%s, %d): redis taken=%d remaining=%d; memory taken=%d remaining=%d",
							i, now.Sub(backendtest.Epoch), o.key, delta, o.r.Taken, o.r.Remaining, o.m.Taken, o.m.Remaining)
					}
				default:
					n := tr.cost(rng, &l)
					gm, em := backendtest.Acquire(ctx, mem, key, &l, n, now)
					gr, er := backendtest.Acquire(ctx, red, key, &l, n, now)
					if em != nil || er != nil {
						t.Fatalf("op %d: Acquire = %v, %v", i, em, er)
					}
					ops := []backend.Op{{Limiter: bat, Key: key, Limit: l, N: n}, {Limiter: comp, Key: "other", Limit: cl}}
					if err := batStore.(backend.Batcher).AcquireBatch(ctx, ops, now); err != nil {
						t.Fatalf("op %d: AcquireBatch: %v", i, err)
					}
					if gb := ops[0].Grant; figures(gb) != figures(gm) {
						t.Fatalf("op %d at %v: AcquireBatch(%s, %d) =\n redis  %s\n memory %s", i, now.Sub(backendtest.Epoch), key, n, figures(gb), figures(gm))
					}
					if figures(gm) != figures(gr) {
						t.Fatalf("op %d at %v: Acquire(%s, %d) =\n redis  %s\n memory %s", i, now.Sub(backendtest.Epoch), key, n, figures(gr), figures(gm))
					}
					if p.Algorithm == limits.Quota && gm.Stamp != gr.Stamp {
						t.Fatalf("op %d: quota stamp = %d; want the period start %d", i, gr.Stamp, gm.Stamp)
					}
					if h := l.Horizon(now); gm.RetryAfter != limits.Never && gm.RetryAfter > h {
						t.Fatalf("op %d: Acquire(%s, %d) retry = %v; want within the horizon %v", i, key, n, gm.RetryAfter, h)
					}
					if gm.OK {
						open = append(open, pair{key, gm, gr, ops[0].Grant})
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

// renewed is what a renewal reports.
func renewed(g backend.Grant) string {
	return fmt.Sprintf("held=%v remaining=%d expired=%d", g.Stamp != 0, g.Remaining, g.Expired)
}

func figures(g backend.Grant) string {
	return fmt.Sprintf("ok=%v taken=%d limit=%d remaining=%d reset=%v retry=%v expired=%d",
		g.OK, g.Taken, g.Limit, g.Remaining, g.Reset, g.RetryAfter, g.Expired)
}

// TestLongLivedScores keeps sliding-log entries and leases alive for
// months, past the point where their sorted-set scores are moved to a new
// base, renews leases across it, and compares every figure with the
// in-memory limiter.
func TestLongLivedScores(t *testing.T) {
	srv := redistest.Start(t)
	stores := callerTimeStores(newClient(t, srv.Addr))
	day := 24 * time.Hour
	ctx := context.Background()
	for _, p := range []admission.Policy{
		{Name: "sl", Algorithm: limits.SlidingLog, Limit: 10, Per: 100 * day},
		{Name: "cc", Algorithm: limits.Concurrency, Limit: 10, MaxHold: 100 * day},
	} {
		mem, _ := memstore.Store{}.Limiter(&p)
		red, _ := stores(t).Limiter(&p)
		l := p.Base()
		var gms, grs []backend.Grant
		for i := 0; i < 12; i++ {
			now := backendtest.Epoch.Add(time.Duration(i) * 20 * day)
			gm, _ := backendtest.Acquire(ctx, mem, "k", &l, 3, now)
			gr, err := backendtest.Acquire(ctx, red, "k", &l, 3, now)
			if err != nil {
				t.Fatal(err)
			}
			if figures(gm) != figures(gr) {
				t.Fatalf("%s day %d: Acquire =\n redis  %s\n memory %s", p.Name, i*20, figures(gr), figures(gm))
			}
			gms, grs = append(gms, gm), append(grs, gr)
			if p.Algorithm == limits.Concurrency && i%4 == 1 {
				// Renew a lease taken before a rebase: it outlives the
				// rebase, and its expiry moves with the base.
				j := i - 1
				_ = mem.(backend.Renewer).Renew(ctx, "k", &l, &gms[j], now)
				if err := red.(backend.Renewer).Renew(ctx, "k", &l, &grs[j], now); err != nil {
					t.Fatal(err)
				}
				if renewed(gms[j]) != renewed(grs[j]) {
					t.Fatalf("day %d: Renew =\n redis  %s\n memory %s", i*20, renewed(grs[j]), renewed(gms[j]))
				}
			}
			if i%3 == 2 {
				// Give back an older grant, taken before a rebase.
				j := i - 2
				if p.Algorithm == limits.Concurrency {
					_ = mem.Release(ctx, "k", &l, &gms[j], now)
					_ = red.Release(ctx, "k", &l, &grs[j], now)
				} else {
					_ = mem.Adjust(ctx, "k", &l, &gms[j], -1, now)
					_ = red.Adjust(ctx, "k", &l, &grs[j], -1, now)
					if gms[j].Remaining != grs[j].Remaining {
						t.Fatalf("%s day %d: Adjust remaining = %d; want %d", p.Name, i*20, grs[j].Remaining, gms[j].Remaining)
					}
				}
			}
		}
	}
}

// TestControllerSameAsMemory runs one hostile workload through two
// controllers, one on the in-memory store and one on Redis (batches of
// token buckets and concurrency limits, and of every algorithm):
// estimates of any size, negative and out-of-range ones included, usages
// of any size settled in random order, charges while the work runs, and a
// shadow policy. Every answer must be
// the same: the same rejections with the same retry-after, the same
// figures for every policy, within the horizon of each.
func TestControllerSameAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	client, _ := newRepeatingClient(t, srv.Addr)
	// Refill rates that are powers of two per nanosecond keep every bucket
	// level exact, so rolling back a partial admission (in memory) and
	// taking nothing (in a Redis batch) leave the very same level.
	per := time.Duration(1 << 30)
	all := []admission.Policy{
		{Name: "tpm", Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 64, Per: per, Burst: 96},
		{Name: "rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket, Limit: 32, Per: per},
		{Name: "inflight", Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 300, MaxHold: time.Minute},
	}
	batch := limits.Match{Operations: []string{"batch"}}
	s := time.Second
	all = append(all,
		admission.Policy{Name: "fw", Match: batch, Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 150, Per: 2 * s},
		admission.Policy{Name: "sw", Match: batch, Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 150, Per: 2 * s, Mode: limits.Shadow},
		admission.Policy{Name: "sl", Match: batch, Unit: limits.UnitTokens, Algorithm: limits.SlidingLog, Limit: 150, Per: 2 * s},
		admission.Policy{Name: "quota", Match: batch, Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 2000, Period: limits.PeriodFixed, Per: time.Minute},
	)
	clock := admissiontest.NewClock(backendtest.Epoch)
	mem, red := twins(t, client, clock, all)
	byPolicy := map[string]limits.Limit{}
	for _, p := range all {
		byPolicy[p.Name] = p.Base()
	}
	rng := rand.New(rand.NewPCG(12, 1))
	amount := func(typical int64) int64 {
		switch rng.IntN(14) {
		case 0:
			return math.MaxInt64
		case 1:
			return -1 - rng.Int64N(1e18)
		case 2:
			return limits.MaxAmount
		case 3:
			return rng.Int64N(limits.MaxAmount + 1)
		}
		return rng.Int64N(typical + 1)
	}
	answer := func(tk admission.Ticket, err error) string {
		var rej *admission.Rejection
		switch {
		case errors.As(err, &rej):
			if rej.RetryAfter != limits.Never && rej.Reason == admission.ReasonRate {
				if h := byPolicy[rej.Policy].Horizon(clock.Now()); rej.RetryAfter > h {
					t.Fatalf("%s advises %v; horizon %v", rej.Policy, rej.RetryAfter, h)
				}
			}
			// Only the refusing policy's figures: a batch evaluates the
			// policies after it too, one by one evaluation does not.
			return fmt.Sprintf("rejected by %s (%v) retry=%v %+v", rej.Policy, rej.Reason, rej.RetryAfter, rej.Status)
		case errors.Is(err, admission.ErrInvalidCost):
			return "invalid cost"
		case err != nil:
			t.Fatalf("admit: %v", err)
		}
		return fmt.Sprintf("admitted %+v would reject %v", tk.Statuses(nil), tk.WouldReject(nil))
	}
	ctx := context.Background()
	type pair struct{ m, r admission.Ticket }
	var open []pair
	outcomes := map[string]int{}
	for i := 0; i < 1500; i++ {
		clock.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		if len(open) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(open))
			u := admission.Usage{Tokens: amount(120), TokensKnown: rng.IntN(4) > 0}
			if rng.IntN(3) == 0 {
				em, er := open[j].m.Charge(u), open[j].r.Charge(u)
				if fmt.Sprint(em) != fmt.Sprint(er) {
					t.Fatalf("step %d: Charge(%d) = %v on Redis; %v in memory", i, u.Tokens, er, em)
				}
				if sm, sr := open[j].m.Statuses(nil), open[j].r.Statuses(nil); fmt.Sprint(sm) != fmt.Sprint(sr) {
					t.Fatalf("step %d: after Charge(%d):\n redis  %+v\n memory %+v", i, u.Tokens, sr, sm)
				}
				continue
			}
			open[j].m.Settle(u)
			open[j].r.Settle(u)
			open = append(open[:j], open[j+1:]...)
			continue
		}
		r := admission.Request{
			Tenant:    []string{"acme", "initech"}[rng.IntN(2)],
			Operation: []string{"chat", "batch"}[rng.IntN(2)],
			Tokens:    amount(60),
		}
		tm, em := mem.TryAdmit(ctx, r)
		tr, er := red.TryAdmit(ctx, r)
		am, ar := answer(tm, em), answer(tr, er)
		if am != ar {
			t.Fatalf("step %d at %v: TryAdmit(%s, %s, tokens=%d) =\n redis  %s\n memory %s", i, clock.Now().Sub(backendtest.Epoch), r.Tenant, r.Operation, r.Tokens, ar, am)
		}
		outcomes[strings.SplitN(am, " ", 2)[0]]++
		if em == nil {
			open = append(open, pair{tm, tr})
		}
	}
	for _, p := range open {
		p.m.Done()
		p.r.Done()
	}
	if outcomes["admitted"] == 0 || outcomes["rejected"] == 0 || outcomes["invalid"] == 0 {
		t.Fatalf("outcomes %v: the workload does not exercise the limits", outcomes)
	}
}

// twins returns two controllers of the policies on clock: one on the
// in-memory store, one with every policy on a Redis store of its own
// prefix (caller time, so that both read the same clock).
func twins(t *testing.T, client *redis.Client, clock admission.Clock, policies []admission.Policy) (mem, red *admission.Controller) {
	t.Helper()
	mem, err := admission.New(admission.Config{Policies: policies}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	st, err := redisstore.New(client, redisstore.Config{Prefix: uniquePrefix(), CallerTime: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	onRedis := slices.Clone(policies)
	for i := range onRedis {
		onRedis[i].Store = "redis"
	}
	red, err = admission.New(admission.Config{Policies: onRedis}, admission.WithClock(clock), admission.WithStore("redis", st))
	if err != nil {
		t.Fatal(err)
	}
	return mem, red
}
