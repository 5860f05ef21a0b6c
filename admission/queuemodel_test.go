package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestQueueModel drives a tenant's weighted concurrency cap with a queue,
// under a global cap of requests, through random operations on a fake
// clock: requests that wait, settlements, cancelled waiters, second
// settlements of settled tickets, the clock's advance, and reloads that
// raise or lower either cap, a plan's and a tenant's override. After each
// operation, once every goroutine has settled (synctest.Wait), it checks:
// a step that served a waiter or admitted a request left no more in
// flight than the caps in force (work admitted before a lowering may
// remain, but nothing is admitted over it), Stats reports the cost in
// flight and the waiters exactly, and when every ticket is done and every
// waiter gone nothing is in flight.
func TestQueueModel(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { queueModel(t, seed, 400) })
		})
	}
}

type queueResult struct {
	id     int
	tenant string
	cost   int64
	tk     admission.Ticket
	err    error
}

// admitAsync starts request id, of tenant for cost tokens, on c: its
// cancellation goes in cancels, its outcome on results.
func admitAsync(c *admission.Controller, id int, tenant string, cost int64, cancels map[int]context.CancelFunc, results chan<- queueResult) {
	ctx, cancel := context.WithCancel(context.Background())
	cancels[id] = cancel
	go func() {
		tk, err := c.Admit(ctx, admission.Request{Tenant: tenant, Tokens: cost})
		results <- queueResult{id: id, tenant: tenant, cost: cost, tk: tk, err: err}
	}()
}

func queueModel(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x9e11e))
	clock := admissiontest.NewClock(backendtest.Epoch)
	global, conc, pro := int64(6), int64(4), int64(0)
	tenants := []string{"a", "b", "c"}
	own := map[string]int64{} // tenant overrides
	onPro := map[string]bool{"b": true}
	config := func() admission.Config {
		plans := limits.Plans{Default: "free", Plans: map[string]map[string]limits.Override{"free": {}, "pro": {}}, Tenants: map[string]limits.TenantPlan{}}
		if pro > 0 {
			plans.Plans["pro"]["tenant"] = limits.Override{Limit: pro}
		}
		for _, tn := range tenants {
			tp := limits.TenantPlan{Plan: "free"}
			if onPro[tn] {
				tp.Plan = "pro"
			}
			if own[tn] > 0 {
				tp.Overrides = map[string]limits.Override{"tenant": {Limit: own[tn]}}
			}
			plans.Tenants[tn] = tp
		}
		return admission.Config{Plans: plans, Policies: []admission.Policy{
			{Name: "global", Key: []limits.KeyPart{limits.KeyGlobal}, Algorithm: limits.Concurrency, Limit: global},
			{Name: "tenant", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: conc,
				Queue: limits.Queue{Size: 16, Timeout: 30 * time.Second}},
		}}
	}
	capOf := func(tenant string) int64 {
		c := conc
		if onPro[tenant] && pro > 0 {
			c = pro
		}
		if own[tenant] > 0 {
			c = own[tenant]
		}
		return c
	}
	c, err := admission.New(config(), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	results := make(chan queueResult, 1024)
	cancels := map[int]context.CancelFunc{} // waiting requests
	defer func() {
		// A failed run ends its waiters, so that the bubble can end.
		for _, cancel := range cancels {
			cancel()
		}
	}()
	type liveTicket struct {
		tenant string
		cost   int64
		tk     admission.Ticket
	}
	var live []liveTicket
	var settled []admission.Ticket
	var served, refused int
	step := 0
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d at %v: %s", seed, step, clock.Now().Sub(backendtest.Epoch), fmt.Sprintf(format, args...))
	}
	inflight := func(tenant string) (n int64) {
		for _, l := range live {
			if tenant == "" || l.tenant == tenant {
				n += l.cost
			}
		}
		return n
	}
	// drain takes the answers that came since the last step, and checks
	// the caps in force for the tenants served.
	drain := func() {
		got := map[string]bool{}
		for {
			select {
			case r := <-results:
				delete(cancels, r.id)
				if r.err != nil {
					var rej *admission.Rejection
					if !errors.As(r.err, &rej) && !errors.Is(r.err, context.Canceled) && !errors.Is(r.err, admission.ErrQueueTimeout) {
						fatalf("%s's request of %d: %v", r.tenant, r.cost, r.err)
					}
					refused++
					continue
				}
				served++
				got[r.tenant] = true
				live = append(live, liveTicket{r.tenant, r.cost, r.tk})
				continue
			default:
			}
			break
		}
		for tenant := range got {
			if n := inflight(tenant); n > capOf(tenant) {
				fatalf("%s served with %d in flight under a cap of %d", tenant, n, capOf(tenant))
			}
		}
		if n := int64(len(live)); len(got) > 0 && n > global {
			fatalf("a request served with %d in flight under a global cap of %d", n, global)
		}
		st := inFlight(c)
		if st["tenant"] != inflight("") || st["global"] != int64(len(live)) {
			fatalf("Stats in flight %v; want tenant %d, global %d", st, inflight(""), len(live))
		}
		if q := queuedOn(c, "tenant"); q != len(cancels) {
			fatalf("Stats queued %d; want %d waiting", q, len(cancels))
		}
	}
	reload := func() {
		if err := c.SetConfig(config()); err != nil {
			fatalf("SetConfig: %v", err)
		}
	}
	nextID := 0
	for step = range ops {
		switch k := rng.IntN(20); {
		case k < 7:
			tenant := tenants[rng.IntN(len(tenants))]
			cost := rng.Int64N(4)
			admitAsync(c, nextID, tenant, cost, cancels, results)
			nextID++
		case k < 12 && len(live) > 0:
			i := rng.IntN(len(live))
			l := live[i]
			live = append(live[:i], live[i+1:]...)
			switch rng.IntN(3) {
			case 0:
				l.tk.Done()
			case 1:
				l.tk.Settle(admission.Usage{Tokens: rng.Int64N(3 * (l.cost + 1)), TokensKnown: true})
			default:
				l.tk.Refund()
			}
			settled = append(settled, l.tk)
		case k < 13 && len(settled) > 0:
			settled[rng.IntN(len(settled))].Done()
		case k < 14 && len(cancels) > 0:
			for _, cancel := range cancels {
				cancel()
				break
			}
		case k < 15:
			global = 1 + rng.Int64N(10)
			reload()
		case k < 16:
			conc = 1 + rng.Int64N(8)
			reload()
		case k < 17:
			pro = rng.Int64N(8)
			reload()
		case k < 18:
			tenant := tenants[rng.IntN(len(tenants))]
			own[tenant] = rng.Int64N(6)
			onPro[tenant] = rng.IntN(2) == 0
			tp := config().Plans.Tenants[tenant]
			if err := c.SetTenant(tenant, &tp); err != nil {
				fatalf("SetTenant: %v", err)
			}
		default:
			clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
		synctest.Wait()
		drain()
	}
	for _, cancel := range cancels {
		cancel()
	}
	synctest.Wait()
	drain()
	for _, l := range live {
		l.tk.Done()
	}
	live = nil
	synctest.Wait()
	drain()
	if st := inFlight(c); st["tenant"] != 0 || st["global"] != 0 {
		t.Fatalf("seed %d: every ticket done, Stats in flight %v", seed, st)
	}
	if served == 0 || refused == 0 {
		t.Fatalf("seed %d: %d served, %d refused: the traffic does not exercise the caps", seed, served, refused)
	}
}

// TestRateQueueModel sends weighted requests that wait in a rate
// policy's queue (the shaper) for each algorithm that queues, with
// settlements below and above the estimate, refunds, cancelled waiters
// and the clock's advance, interleaved with reloads raising and lowering
// the limit (and a token bucket's burst) and a tenant's override. Within
// each stretch of a tenant's admissions under one limit, the cost
// admitted (at once or from the queue) keeps the policy's promise plus
// what was refunded meanwhile: Burst + rate·d in any interval of length d
// for a token bucket, Limit in any aligned window for a fixed window and
// a sliding window counter, Limit in any rolling window for a sliding log.
func TestRateQueueModel(t *testing.T) {
	algs := []limits.Algorithm{limits.TokenBucket, limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog}
	for _, alg := range algs {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%v/seed=%d", alg, seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { rateQueueModel(t, alg, seed, 400) })
			})
		}
	}
}

// rateEvent is a cost admitted (> 0) or refunded at most (< 0) at an
// instant.
type rateEvent struct {
	at   time.Time
	cost int64
}

func rateQueueModel(t *testing.T, alg limits.Algorithm, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x5a4e))
	clock := admissiontest.NewClock(backendtest.Epoch)
	per := 10 * time.Second
	limit, burst := int64(30), int64(0)
	tenants := []string{"a", "b"}
	own := map[string]int64{}
	policy := func() admission.Policy {
		return admission.Policy{Name: "p", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: alg, Limit: limit, Burst: burst, Per: per,
			Queue: limits.Queue{Size: 8, Timeout: 30 * time.Second}}
	}
	config := func() admission.Config {
		pl := limits.Plans{Tenants: map[string]limits.TenantPlan{}}
		for tn, l := range own {
			if l > 0 {
				pl.Tenants[tn] = limits.TenantPlan{Overrides: map[string]limits.Override{"p": {Limit: l}}}
			}
		}
		return admission.Config{Policies: []admission.Policy{policy()}, Plans: pl}
	}
	limitOf := func(tenant string) limits.Limit {
		p := policy()
		l := p.Base()
		if own[tenant] > 0 {
			l = limits.Override{Limit: own[tenant]}.Apply(l)
		}
		return l
	}
	c, err := admission.New(config(), admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	results := make(chan queueResult, 1024)
	cancels := map[int]context.CancelFunc{}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	type liveTicket struct {
		tenant string
		cost   int64
		tk     admission.Ticket
	}
	var live []liveTicket
	type stretch struct {
		lim    limits.Limit
		events []rateEvent
	}
	hist := map[string]*stretch{}
	var served, refused int
	step := 0
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%v seed %d step %d at %v: %s", alg, seed, step, clock.Now().Sub(backendtest.Epoch), fmt.Sprintf(format, args...))
	}
	check := func(tenant string, s *stretch) {
		now := clock.Now()
		l := s.lim
		sum := func(from time.Time, incl bool) (n int64) {
			for _, ev := range s.events {
				if ev.at.After(from) || incl && ev.at.Equal(from) {
					n += ev.cost
				}
			}
			return n
		}
		switch alg {
		case limits.TokenBucket:
			perNs, _ := l.Rates()
			for _, ev := range s.events {
				if ev.cost <= 0 {
					continue
				}
				got, bound := sum(ev.at, true), float64(l.Capacity())+perNs*float64(now.Sub(ev.at))
				if float64(got) > bound*(1+1e-9)+1e-6 {
					fatalf("%s: %d admitted from %v under %+v; at most %.3f", tenant, got, ev.at.Sub(backendtest.Epoch), l, bound)
				}
			}
		case limits.SlidingLog:
			if got := sum(now.Add(-per), false); got > l.Amount {
				fatalf("%s: %d admitted in the last %v under %+v", tenant, got, per, l)
			}
		default:
			if got := sum(now.Truncate(per), true); got > l.Amount {
				fatalf("%s: %d admitted in the window from %v under %+v", tenant, got, now.Truncate(per).Sub(backendtest.Epoch), l)
			}
		}
	}
	refunded := func(tenant string, n int64) {
		if s := hist[tenant]; s != nil && n > 0 {
			s.events = append(s.events, rateEvent{clock.Now(), -n})
		}
	}
	drain := func() {
		for {
			select {
			case r := <-results:
				delete(cancels, r.id)
				if r.err != nil {
					var rej *admission.Rejection
					if !errors.As(r.err, &rej) && !errors.Is(r.err, context.Canceled) {
						fatalf("%s's request of %d: %v", r.tenant, r.cost, r.err)
					}
					refused++
					continue
				}
				served++
				live = append(live, liveTicket{r.tenant, r.cost, r.tk})
				lim := limitOf(r.tenant)
				s := hist[r.tenant]
				if s == nil || s.lim != lim {
					s = &stretch{lim: lim}
					hist[r.tenant] = s
				}
				s.events = append(s.events, rateEvent{clock.Now(), r.cost})
				check(r.tenant, s)
				continue
			default:
			}
			return
		}
	}
	nextID := 0
	for step = range ops {
		switch k := rng.IntN(20); {
		case k < 8:
			tenant := tenants[rng.IntN(len(tenants))]
			cost := rng.Int64N(20)
			admitAsync(c, nextID, tenant, cost, cancels, results)
			nextID++
		case k < 12 && len(live) > 0:
			i := rng.IntN(len(live))
			l := live[i]
			live = append(live[:i], live[i+1:]...)
			switch rng.IntN(3) {
			case 0:
				actual := rng.Int64N(3 * (l.cost + 1))
				l.tk.Settle(admission.Usage{Tokens: actual, TokensKnown: true})
				refunded(l.tenant, l.cost-actual)
			case 1:
				l.tk.Refund()
				refunded(l.tenant, l.cost)
			default:
				l.tk.Done()
			}
		case k < 13 && len(cancels) > 0:
			for _, cancel := range cancels {
				cancel()
				break
			}
		case k < 15:
			if alg == limits.TokenBucket && rng.IntN(2) == 0 {
				burst = []int64{0, 5, 40, 90}[rng.IntN(4)]
			} else {
				limit = 1 + rng.Int64N(60)
			}
			if err := c.SetConfig(config()); err != nil {
				fatalf("SetConfig: %v", err)
			}
		case k < 16:
			tenant := tenants[rng.IntN(len(tenants))]
			own[tenant] = rng.Int64N(60)
			tp := config().Plans.Tenants[tenant]
			if err := c.SetTenant(tenant, &tp); err != nil {
				fatalf("SetTenant: %v", err)
			}
		default:
			// One due function at a time, so that a waiter served is
			// counted at the instant it was.
			to := clock.Now().Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
			for clock.Step(to) {
				synctest.Wait()
				drain()
			}
		}
		synctest.Wait()
		drain()
	}
	for _, cancel := range cancels {
		cancel()
	}
	synctest.Wait()
	drain()
	for _, l := range live {
		l.tk.Done()
	}
	if served == 0 || refused == 0 {
		t.Fatalf("%d served, %d refused: the traffic does not exercise the limit", served, refused)
	}
}
