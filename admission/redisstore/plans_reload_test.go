package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// planLimits are the limits each plan gives each policy of planConfig.
var planLimits = map[string]map[string]int64{
	"free": {"rpm": 60, "tpm": 40_000, "inflight": 4, "hourly": 1000, "candidate": 20_000},
	"pro":  {"rpm": 600, "tpm": 400_000, "inflight": 16, "hourly": 5000, "candidate": 200_000},
}

// planConfig returns generation gen of a configuration whose plans never
// change what they give (acme is on pro, globex on free), while the rest
// changes: from one even generation to the next the policies' order and a
// candidate policy added, flipped from shadow to enforce and removed;
// from an even generation to the odd one after it, only the name acme's
// plan goes by.
func planConfig(store string, gen int) admission.Config {
	shape := gen / 2
	tenant := []limits.KeyPart{limits.KeyTenant}
	policies := []admission.Policy{
		{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 60, Per: time.Minute},
		{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 40_000, Per: time.Minute},
		{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 4, MaxHold: time.Hour},
		{Name: "hourly", Key: tenant, Algorithm: limits.FixedWindow, Limit: 1000, Per: time.Hour},
	}
	if shape%3 != 0 {
		mode := limits.Shadow
		if shape%3 == 2 {
			mode = limits.Enforce
		}
		policies = append(policies, admission.Policy{
			Name: "candidate", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket,
			Limit: 20_000, Per: time.Minute, Mode: mode,
		})
	}
	if shape%2 == 1 {
		slices.Reverse(policies)
	}
	for i := range policies {
		policies[i].Store = store
	}
	overrides := func(plan string) map[string]limits.Override {
		o := map[string]limits.Override{}
		for _, p := range policies {
			if plan != "free" {
				o[p.Name] = limits.Override{Limit: planLimits[plan][p.Name]}
			}
		}
		return o
	}
	// acme's plan is called pro or premium: the same limits under another
	// name.
	acmePlan := "pro"
	if gen%2 == 1 {
		acmePlan = "premium"
	}
	return admission.Config{Policies: policies, Plans: limits.Plans{
		Default: "free",
		Plans:   map[string]map[string]limits.Override{"free": overrides("free"), acmePlan: overrides("pro")},
		Tenants: map[string]limits.TenantPlan{"acme": {Plan: acmePlan}, "globex": {Plan: "free"}},
	}}
}

// TestPlanReloadKeepsTenantLimits reloads policies and plans (SetConfig and
// SetPlans, one after the other, as fast as they go) while two tenants on
// different plans send staged requests, in memory and on Redis, with the
// clock stopped so that nothing refills. Every figure an admission or a
// rejection reports is its tenant's own plan's, and at the end each
// partition holds exactly what its tenant's admissions took: no request
// was ever evaluated against the other plan's limits, which would have
// clamped a pro bucket to the free plan's capacity.
func TestPlanReloadKeepsTenantLimits(t *testing.T) {
	srv := redistest.Start(t)
	redis := callerTimeStores(newClient(t, srv.Addr))
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) backend.Store
	}{
		{"memory", func(*testing.T) backend.Store { return memstore.Store{} }},
		{"redis", redis},
	} {
		t.Run(tc.name, func(t *testing.T) { planReload(t, tc.store(t)) })
	}
}

func planReload(t *testing.T, st backend.Store) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, err := admission.New(planConfig("s", 0), admission.WithClock(clock), admission.WithStore("s", st))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const tokens = 100
	plan := map[string]string{"acme": "pro", "globex": "free"}
	// check reports a figure that is not the tenant's plan's.
	check := func(tenant string, sts []admission.Status) error {
		for _, s := range sts {
			if want := planLimits[plan[tenant]][s.Policy]; s.Limit != want || s.Remaining > want {
				return fmt.Errorf("%s, %s: limit %d, remaining %d; want the %s plan's limit %d",
					tenant, s.Policy, s.Limit, s.Remaining, plan[tenant], want)
			}
		}
		return nil
	}
	var admitted, rejected [2]atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	var reloads atomic.Int64
	// awaitReloads lets traffic go on only once the reloader has done n
	// reloads, so reloads and admissions interleave however the
	// goroutines are scheduled.
	awaitReloads := func(n int64) {
		for deadline := time.Now().Add(10 * time.Second); reloads.Load() < n && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	send := func(ti int, tenant string, n int) {
		r := admission.Request{Tenant: tenant}
		for i := range n {
			if i%19 == 0 {
				awaitReloads(int64(i/19 + 1))
			}
			tk, err := ctl.Begin(ctx, r)
			if err == nil {
				full := r
				full.Tokens = tokens
				err = tk.Continue(ctx, full)
			}
			var rej *admission.Rejection
			switch {
			case err == nil:
				admitted[ti].Add(1)
				if e := check(tenant, tk.Statuses(nil)); e != nil {
					fail(e)
				}
				tk.Done()
			case errors.As(err, &rej):
				rejected[ti].Add(1)
				if e := check(tenant, rej.Statuses); e != nil {
					fail(e)
				}
			default:
				fail(err)
			}
		}
	}
	var traffic sync.WaitGroup
	for g := range 6 {
		ti, tenant := g%2, []string{"acme", "globex"}[g%2]
		traffic.Add(1)
		go func() {
			defer traffic.Done()
			send(ti, tenant, 190)
		}()
	}
	stop := make(chan struct{})
	var reloader sync.WaitGroup
	reloader.Add(1)
	go func() {
		defer reloader.Done()
		for gen := 1; ; gen++ {
			select {
			case <-stop:
				return
			default:
			}
			cfg := planConfig("s", gen)
			var err error
			if gen%2 == 0 {
				err = ctl.SetConfig(cfg)
			} else {
				err = ctl.SetPlans(cfg.Plans)
			}
			if err != nil {
				fail(err)
				return
			}
			reloads.Add(1)
		}
	}()
	traffic.Wait()
	close(stop)
	reloader.Wait()
	if p := firstErr.Load(); p != nil {
		t.Fatal(*p)
	}
	// Three acme senders of 190 requests fit every pro limit; three globex
	// senders share the free plan's 60 requests a minute.
	if a, r := admitted[0].Load(), rejected[0].Load(); a != 570 || r != 0 {
		t.Errorf("acme: %d admitted, %d rejected; want 570, 0", a, r)
	}
	if a, r := admitted[1].Load(), rejected[1].Load(); a != 60 || r != 510 {
		t.Errorf("globex: %d admitted, %d rejected; want 60, 510", a, r)
	}
	// The clock has not moved: what is left is each plan's limit less what
	// the admissions took, this request's included.
	for ti, tenant := range []string{"acme", "globex"} {
		tk, err := ctl.TryAdmit(ctx, admission.Request{Tenant: tenant, Tokens: tokens})
		var rej *admission.Rejection
		var sts []admission.Status
		switch {
		case err == nil:
			sts = tk.Statuses(nil)
			defer tk.Done()
		case errors.As(err, &rej):
			sts = rej.Statuses
		default:
			t.Fatal(err)
		}
		n := admitted[ti].Load()
		lim := planLimits[plan[tenant]]
		want := map[string]int64{
			"rpm": max(0, lim["rpm"]-n-1), "tpm": lim["tpm"] - tokens*(n+1), "hourly": lim["hourly"] - n - 1, "inflight": lim["inflight"] - 1,
		}
		if err != nil {
			// Refused by rpm, the first policy: the others were not asked.
			want = map[string]int64{"rpm": 0}
		}
		for _, s := range sts {
			if w, ok := want[s.Policy]; ok && s.Remaining != w {
				t.Errorf("%s after %d admissions, %s: remaining %d; want %d", tenant, n, s.Policy, s.Remaining, w)
			}
		}
	}
	if n := reloads.Load(); n < 10 {
		t.Errorf("only %d reloads during the traffic; want at least 10", n)
	}
	t.Logf("%d reloads during %d admissions", reloads.Load(), admitted[0].Load()+admitted[1].Load())
}
