package admission_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
)

// lastSettled returns the last settlement r saw, failing t when there is
// none.
func (r *recorder) lastSettled(t *testing.T) admission.Settlement {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.settled) == 0 {
		t.Fatal("no settlement reported")
	}
	return r.settled[len(r.settled)-1]
}

// quotaController returns a controller with a daily token quota of
// limit per tenant on the memory store, and its recorder.
func quotaController(t *testing.T, alg limits.Algorithm, limit int64) (*admission.Controller, *recorder, *admissiontest.Clock) {
	t.Helper()
	clk := admissiontest.NewClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))
	rec := &recorder{}
	p := admission.Policy{Name: "q", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: alg, Limit: limit}
	if alg == limits.Quota {
		p.Period = limits.PeriodDay
	} else {
		p.Per = time.Hour
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{p}}, admission.WithClock(clk), admission.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	return ctl, rec, clk
}

// TestSettlementFigures steps tickets of one tenant through a daily quota
// of 1000 tokens (and a token bucket of 1000): each step admits or settles
// a ticket, and a settlement reports the partition's Remaining after it.
func TestSettlementFigures(t *testing.T) {
	type step struct {
		admit  int64 // admit a ticket with this estimate (into slot)
		slot   int
		settle int64 // else settle slot's ticket at this actual
		charge bool  // Charge instead of Settle
		want   int64 // the settlement's Remaining
	}
	tests := []struct {
		name  string
		alg   limits.Algorithm
		steps []step
	}{{
		name: "alone, every settlement is exact",
		alg:  limits.Quota,
		steps: []step{
			{admit: 100}, {settle: 100, want: 900},
			{admit: 100}, {settle: 400, want: 500}, // an overrun of 300
			{admit: 200}, {settle: 50, want: 450}, // a refund of 150
			{admit: 100}, {settle: 100, charge: true}, {settle: 300, want: 150}, // charged in flight, then settled above
			{admit: 100}, {settle: 5000, want: 0}, // never below zero, never above the limit
		},
	}, {
		name: "concurrent tickets: others' takes ignored, others' refunds too",
		alg:  limits.Quota,
		steps: []step{
			{admit: 100, slot: 0}, {admit: 100, slot: 1}, // remaining 900, then 800
			{slot: 0, settle: 50, want: 950},  // 900 at its admission, +50 back: true figure 850
			{slot: 1, settle: 100, want: 800}, // ignores slot 0's refund: true figure 850
		},
	}, {
		name: "a bucket's debt reads as nothing left",
		alg:  limits.TokenBucket,
		steps: []step{
			{admit: 900}, {settle: 1500, want: 0},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl, rec, _ := quotaController(t, tc.alg, 1000)
			var tks [2]admission.Ticket
			for i, st := range tc.steps {
				switch {
				case st.admit > 0:
					tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "a", Tokens: st.admit})
					if err != nil {
						t.Fatalf("step %d: Admit(%d) = %v", i, st.admit, err)
					}
					tks[st.slot] = tk
				case st.charge:
					_ = tks[st.slot].Charge(admission.Usage{Tokens: st.settle, TokensKnown: true})
				default:
					tks[st.slot].Settle(admission.Usage{Tokens: st.settle, TokensKnown: true})
					s := rec.lastSettled(t)
					if s.Remaining != st.want || s.Limit != 1000 || s.Algorithm != tc.alg {
						t.Errorf("step %d: Settle(%d): Remaining %d of %d (%v); want %d of 1000 (%v)", i, st.settle, s.Remaining, s.Limit, s.Algorithm, st.want, tc.alg)
					}
					if tc.alg == limits.Quota && s.Window <= 0 {
						t.Errorf("step %d: Window = %v; want what is left of the day", i, s.Window)
					}
				}
			}
		})
	}
}

// remainingOf probes what the quota has left for tenant, with a request of
// zero tokens (which takes nothing).
func remainingOf(t *testing.T, ctl *admission.Controller, rec *recorder, tenant string) int64 {
	t.Helper()
	tk, err := ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	rec.mu.Lock()
	d := rec.decisions[len(rec.decisions)-1]
	rec.mu.Unlock()
	tk.Done()
	return d.Remaining
}

// TestPropertySettlementLowerBound runs random traffic with overruns only
// (nothing is given back) through a daily quota, several tickets open at a
// time: a settlement's Limit-Remaining never exceeds the partition's true
// use, never exceeds Limit, and equals it when the ticket was the only one
// open since its admission.
func TestPropertySettlementLowerBound(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			ctl, rec, _ := quotaController(t, limits.Quota, 200_000)
			type open struct {
				tk    admission.Ticket
				alone bool // no other ticket of the tenant admitted or settled since
			}
			byTenant := map[string][]*open{}
			exact := 0
			for range 2000 {
				tenant := fmt.Sprint("t", rng.IntN(3))
				opens := byTenant[tenant]
				if len(opens) == 0 || len(opens) < 3 && rng.IntN(2) == 0 {
					tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: tenant, Tokens: int64(1 + rng.IntN(200))})
					if err != nil {
						continue
					}
					for _, o := range opens {
						o.alone = false
					}
					byTenant[tenant] = append(opens, &open{tk: tk, alone: true})
					continue
				}
				i := rng.IntN(len(opens))
				o := opens[i]
				byTenant[tenant] = append(opens[:i:i], opens[i+1:]...)
				o.tk.Settle(admission.Usage{Tokens: int64(200 + rng.IntN(300)), TokensKnown: true}) // above any estimate
				s := rec.lastSettled(t)
				for _, other := range byTenant[tenant] {
					other.alone = false
				}
				trueRem := remainingOf(t, ctl, rec, tenant)
				used, trueUsed := s.Limit-s.Remaining, s.Limit-trueRem
				switch {
				case s.Limit != 200_000 || used < 0 || used > s.Limit:
					t.Fatalf("settlement %+v: figures outside [0, limit]", s)
				case used > trueUsed:
					t.Fatalf("settlement %+v: use %d above the true use %d", s, used, trueUsed)
				case o.alone && used != trueUsed:
					t.Fatalf("settlement %+v of the only open ticket: use %d; want the true use %d", s, used, trueUsed)
				case o.alone:
					exact++
				}
			}
			if exact < 50 {
				t.Errorf("%d settlements of a lone ticket: too few to test", exact)
			}
		})
	}
}
