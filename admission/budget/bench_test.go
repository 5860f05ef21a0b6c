package budget_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/shadow"
)

// The Watcher's cost per decision, next to its peer on the same path,
// the metrics Observer: below every threshold (the common case), and for
// tenants past a threshold already warned (a lock, a lookup, a clock
// read). Neither allocates.
func BenchmarkDecision(b *testing.B) {
	w, err := budget.New(budget.Config{Policies: []budget.Policy{{Name: "q", Thresholds: []int{50, 80, 95}, Period: limits.PeriodDay}}},
		budget.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	mo, err := metrics.New()
	if err != nil {
		b.Fatal(err)
	}
	tenants := make([]string, 1024)
	for i := range tenants {
		tenants[i] = fmt.Sprint("tenant-", i)
		w.Decision(decision("q", tenants[i], 850, 1000, admission.Admitted)) // warned once, before the loop
	}
	for _, bc := range []struct {
		name string
		obs  admission.Observer
		used int64
	}{
		{"watcher/below", w, 100},
		{"watcher/above", w, 900},
		{"metrics-observer", mo, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ds := make([]*admission.Decision, len(tenants))
				for i := range ds {
					ds[i] = decision("q", tenants[i], bc.used, 1000, admission.Admitted)
				}
				i := 0
				for pb.Next() {
					bc.obs.Decision(ds[i%len(ds)])
					i++
				}
			})
		})
	}
}

// A whole admission and settlement of a request under a daily token
// quota, with the metrics Observer alone and with the Watcher beside it
// (tenants below their thresholds, the common case).
func BenchmarkAdmit(b *testing.B) {
	for _, withWatcher := range []bool{false, true} {
		name := "metrics"
		if withWatcher {
			name = "metrics+watcher"
		}
		b.Run(name, func(b *testing.B) {
			mo, err := metrics.New()
			if err != nil {
				b.Fatal(err)
			}
			var obs admission.Observer = mo
			if withWatcher {
				w, err := budget.New(budget.Config{Policies: []budget.Policy{{Name: "daily", Thresholds: []int{50, 80, 95}, Period: limits.PeriodDay}}},
					budget.WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				obs = shadow.Join(mo, w)
			}
			ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
				Name: "daily", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
				Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: limits.MaxAmount,
			}}}, admission.WithObserver(obs))
			if err != nil {
				b.Fatal(err)
			}
			tenants := make([]string, 1024)
			for i := range tenants {
				tenants[i] = fmt.Sprint("tenant-", i)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: tenants[i%len(tenants)], Tokens: 100})
					if err == nil {
						tk.Done()
					}
					i++
				}
			})
		})
	}
}
