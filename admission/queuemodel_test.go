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
			ctx, cancel := context.WithCancel(context.Background())
			id := nextID
			nextID++
			cancels[id] = cancel
			go func() {
				tk, err := c.Admit(ctx, admission.Request{Tenant: tenant, Tokens: cost})
				results <- queueResult{id: id, tenant: tenant, cost: cost, tk: tk, err: err}
			}()
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
