package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestLonePolicySameAsGeneral: a set of one rate policy that every request
// meets is decided the short way (no matching or evaluation loops); a set
// with a second policy that no request meets is decided the general way.
// Random traffic (over the limit, hostile amounts, shadow mode, the
// all-shadow switch, a tenant's plan, settlements with usage, refunds)
// gets the same answers, statuses and observer events from both, with and
// without an observer.
func TestLonePolicySameAsGeneral(t *testing.T) {
	for _, alg := range []limits.Algorithm{limits.TokenBucket, limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog, limits.Quota} {
		for _, mode := range []limits.Mode{limits.Enforce, limits.Shadow} {
			for _, observed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/observed=%v", alg, mode, observed), func(t *testing.T) {
					lonePolicySameAsGeneral(t, alg, mode, observed)
				})
			}
		}
	}
}

func lonePolicySameAsGeneral(t *testing.T, alg limits.Algorithm, mode limits.Mode, observed bool) {
	p := admission.Policy{
		Name: "tpm", Key: tenantKey, Unit: limits.UnitTokens, Algorithm: alg, Mode: mode,
		Limit: 100, Per: time.Second,
	}
	if alg == limits.Quota {
		p.Period, p.Per = limits.PeriodFixed, time.Minute
	}
	never := admission.Policy{
		Name: "never", Key: tenantKey, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Hour,
		Match: limits.Match{Operations: []string{"never"}},
	}
	plans := limits.Plans{
		Plans:   map[string]map[string]limits.Override{"big": {"tpm": {Limit: 300}}},
		Tenants: map[string]limits.TenantPlan{"b": {Plan: "big"}},
	}
	clock := admissiontest.NewClock(backendtest.Epoch)
	build := func(policies ...admission.Policy) (*admission.Controller, *recorder) {
		opts := []admission.Option{admission.WithClock(clock)}
		rec := &recorder{}
		if observed {
			opts = append(opts, admission.WithObserver(rec))
		}
		c, err := admission.New(admission.Config{Policies: policies, Plans: plans}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c, rec
	}
	lone, loneRec := build(p)
	general, generalRec := build(p, never)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, uint64(alg.String()[0])))
	var open [2][]admission.Ticket
	amounts := []int64{0, 1, 7, 40, 99, 100, 101, 300, limits.MaxAmount, limits.MaxAmount + 1, -1}
	for i := range 3000 {
		clock.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
		switch rng.IntN(20) {
		case 0:
			on := rng.IntN(2) == 0
			lone.SetAllShadow(on)
			general.SetAllShadow(on)
			continue
		case 1, 2, 3:
			if len(open[0]) == 0 {
				continue
			}
			j := rng.IntN(len(open[0]))
			u := admission.Usage{Tokens: rng.Int64N(200)}
			refund := rng.IntN(4) == 0
			for k := range open {
				tk := open[k][j]
				open[k] = append(open[k][:j], open[k][j+1:]...)
				if refund {
					tk.Refund()
				} else {
					tk.Settle(u)
				}
			}
			continue
		}
		r := admission.Request{Tenant: []string{"a", "b", "c"}[rng.IntN(3)], Tokens: amounts[rng.IntN(len(amounts))]}
		var errs [2]error
		var st [2][]admission.Status
		keep := rng.IntN(2) == 0
		for k, c := range []*admission.Controller{lone, general} {
			tk, err := c.TryAdmit(ctx, r)
			errs[k] = err
			if err == nil {
				st[k] = tk.Statuses(nil)
				if keep {
					open[k] = append(open[k], tk)
				} else {
					tk.Done()
				}
			} else {
				var rej *admission.Rejection
				if errors.As(err, &rej) {
					st[k] = rej.Statuses
				}
			}
		}
		// The general set's second policy never applies: it adds nothing
		// to the statuses.
		if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !reflect.DeepEqual(st[0], st[1]) {
			t.Fatalf("request %d %+v: short way %v %+v; general way %v %+v", i, r, errs[0], st[0], errs[1], st[1])
		}
		if len(open[0]) != len(open[1]) {
			t.Fatalf("request %d: %d and %d tickets open", i, len(open[0]), len(open[1]))
		}
	}
	for k := range open {
		for _, tk := range open[k] {
			tk.Done()
		}
	}
	if observed {
		a, b := loneRec, generalRec
		if len(a.decisions) == 0 || len(a.settled) == 0 || !reflect.DeepEqual(a.decisions, b.decisions) || !reflect.DeepEqual(a.settled, b.settled) {
			t.Errorf("observer events differ: %d decisions and %d settlements the short way, %d and %d the general way",
				len(a.decisions), len(a.settled), len(b.decisions), len(b.settled))
		}
	}
}
