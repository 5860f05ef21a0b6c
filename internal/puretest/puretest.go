// Package puretest checks that reading a controller's state changes none
// of its decisions: a random trace of admissions, settlements, refunds and
// charges over tenants of different plans and overrides is run twice on
// fresh stores, once as is and once with reads (Controller.Stats,
// Ticket.Statuses, Ticket.WouldReject) interleaved at random, and every
// decision, settlement and lease expiry the observer sees must be the
// same. Controller.Remaining is among the reads, for the tenants of the
// trace and one it never names. The in-memory and Redis stores' tests run it.
package puretest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// Config returns the configuration the traces run under, every policy on
// the store registered as store: a request rate, a token rate, a cap on
// requests in flight, windows and a quota, with a pro plan above the
// policies' own limits, and tenants with their own overrides above and
// below them.
func Config(store string) admission.Config {
	tenant := []limits.KeyPart{limits.KeyTenant}
	tokens := limits.UnitTokens
	policies := []admission.Policy{
		{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 5, Per: time.Minute},
		{Name: "tpm", Key: tenant, Unit: tokens, Algorithm: limits.TokenBucket, Limit: 4000, Per: time.Minute},
		{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 2, MaxHold: 20 * time.Second},
		{Name: "tp10m", Key: tenant, Unit: tokens, Algorithm: limits.FixedWindow, Limit: 20_000, Per: 10 * time.Minute},
		{Name: "sw", Key: tenant, Algorithm: limits.SlidingWindow, Limit: 40, Per: 2 * time.Minute},
		{Name: "slog", Key: tenant, Unit: tokens, Algorithm: limits.SlidingLog, Limit: 6000, Per: 90 * time.Second},
		{Name: "hourly", Key: tenant, Unit: tokens, Algorithm: limits.Quota, Limit: 25_000, Per: time.Hour},
		{Name: "shadow-rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 3, Per: time.Minute, Mode: limits.Shadow},
	}
	for i := range policies {
		policies[i].Store = store
	}
	return admission.Config{Policies: policies, Plans: limits.Plans{
		Plans: map[string]map[string]limits.Override{"pro": {
			"rpm": {Limit: 600}, "tpm": {Limit: 40_000}, "inflight": {Limit: 6}, "tp10m": {Limit: 200_000},
			"sw": {Limit: 400}, "slog": {Limit: 60_000}, "hourly": {Limit: 600_000}, "shadow-rpm": {Limit: 60},
		}},
		Tenants: map[string]limits.TenantPlan{
			"acme":    {Plan: "pro"},
			"initech": {Overrides: map[string]limits.Override{"rpm": {Limit: 2}, "tpm": {Limit: 1000}, "inflight": {Limit: 1}}},
			"hooli":   {Plan: "pro", Overrides: map[string]limits.Override{"rpm": {Limit: 30}}},
		},
	}}
}

// tenants are those of Config, and one on the policies' own limits.
var tenants = []string{"acme", "initech", "hooli", "globex"}

// Run runs seed's trace of ops operations twice against stores from
// newStore (a fresh one per run, registered as "s"), without and with
// reads interleaved, and fails t when the two runs differ in any decision,
// settlement or lease expiry. It also fails when the trace admits nothing
// or rejects nothing: such a trace checks nothing.
func Run(t *testing.T, newStore func(t *testing.T) backend.Store, seed uint64, ops int) {
	t.Helper()
	plain := trace(t, newStore(t), seed, ops, false)
	read := trace(t, newStore(t), seed, ops, true)
	if !strings.Contains(plain, "admitted") || !strings.Contains(plain, "rejected") {
		t.Fatalf("seed %d: the trace admits or rejects nothing; it checks nothing:\n%s", seed, plain)
	}
	if plain == read {
		return
	}
	a, b := strings.Split(plain, "\n"), strings.Split(read, "\n")
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			t.Fatalf("seed %d: event %d with reads interleaved:\n\t%s\nwant (without reads):\n\t%s", seed, i, b[i], a[i])
		}
	}
	t.Fatalf("seed %d: %d events with reads interleaved; want %d", seed, len(b), len(a))
}

// trace runs seed's operations on a new controller over st and returns
// what its observer saw, one event a line.
func trace(t *testing.T, st backend.Store, seed uint64, ops int, reads bool) string {
	clock := admissiontest.NewClock(backendtest.Epoch)
	log := &recorder{}
	ctl, err := admission.New(Config("s"), admission.WithClock(clock), admission.WithObserver(log), admission.WithStore("s", st))
	if err != nil {
		t.Fatal(err)
	}
	// The lease keeper is stopped, as in a process that renews nothing:
	// an abandoned ticket's leases then expire MaxHold after it was
	// admitted, at an instant the trace fixes (the keeper would renew
	// them until the garbage collector found the ticket).
	ctl.Close()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	// The reads draw from their own source: the trace is the same with
	// and without them.
	readRng := rand.New(rand.NewPCG(seed, 0x7ead))
	ctx := context.Background()
	var live []admission.Ticket
	var statuses, left []admission.Status
	var names []string
	for i := range ops {
		if reads && readRng.IntN(3) == 0 {
			// What a scrape, a status page, a response's headers or a
			// "what is left" query read.
			_ = ctl.Stats()
			who := append(tenants[:len(tenants):len(tenants)], "stranger")[readRng.IntN(len(tenants)+1)]
			var err error
			if left, err = ctl.Remaining(ctx, admission.Request{Tenant: who}, left[:0]); err != nil {
				t.Fatalf("Remaining(%s): %v", who, err)
			}
			if len(live) > 0 {
				tk := live[readRng.IntN(len(live))]
				statuses = tk.Statuses(statuses[:0])
				names = tk.WouldReject(names[:0])
			}
		}
		clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		log.add("op %d at %v", i, clock.Now().Sub(backendtest.Epoch))
		switch k := rng.IntN(10); {
		case k < 5 || len(live) == 0:
			r := admission.Request{Tenant: tenants[rng.IntN(len(tenants))], Tokens: 1 + rng.Int64N(1500)}
			tk, err := ctl.TryAdmit(ctx, r)
			var rej *admission.Rejection
			switch {
			case errors.As(err, &rej):
				log.add("rejected %s by %s", r.Tenant, rej.Error())
			case err != nil:
				t.Fatal(err)
			default:
				live = append(live, tk)
			}
		default:
			j := rng.IntN(len(live))
			tk := live[j]
			switch k {
			case 5:
				tk.Settle(admission.Usage{Tokens: rng.Int64N(3000), TokensKnown: true})
			case 6:
				tk.Refund()
			case 7:
				// A rejection here tells the caller to cut the work
				// off: a figure of the trace.
				log.add("charged: %v", tk.Charge(admission.Usage{Tokens: rng.Int64N(2000), TokensKnown: true}))
				continue
			case 8:
				tk.Done()
			default:
				// Abandoned: its leases expire after MaxHold.
			}
			live = append(live[:j], live[j+1:]...)
		}
	}
	return log.String()
}

// recorder writes every event it observes as a line.
type recorder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.b, format+"\n", args...)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.String()
}

// Decision implements admission.Observer.
func (r *recorder) Decision(d *admission.Decision) {
	r.add("%s %s %s cost=%d limit=%d remaining=%d reset=%v retry=%v reason=%s rolledback=%v",
		strings.ToLower(d.Outcome.String()), d.Tenant, d.Policy, d.Cost, d.Limit, d.Remaining, d.Reset, d.RetryAfter, d.Reason, d.RolledBack)
}

// Settled implements admission.Observer.
func (r *recorder) Settled(s admission.Settlement) {
	r.add("settled %s %s estimated=%d actual=%d limit=%d remaining=%d", s.Tenant, s.Policy, s.Estimated, s.Actual, s.Limit, s.Remaining)
}

// LeaseExpired implements admission.Observer.
func (r *recorder) LeaseExpired(policy string, n int) { r.add("expired %s %d", policy, n) }

// PartitionsEvicted implements admission.Observer.
func (r *recorder) PartitionsEvicted(policy string, n int) { r.add("evicted %s %d", policy, n) }

// StoreError implements admission.Observer.
func (r *recorder) StoreError(e admission.StoreEvent) { r.add("store error %s: %v", e.Policy, e.Err) }
