package directory_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/directory"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestInstallKeepsOnlyValidEntries installs random directories, many
// entries bad in one way or another: whatever was refused, what is
// installed validates against the policies, and every valid entry of the
// input is installed.
func TestInstallKeepsOnlyValidEntries(t *testing.T) {
	d := newDir(t)
	f, err := config.Parse("p.yaml", []byte("policies:\n  - {name: rpm, key: [tenant], algorithm: fixed_window, limit: 5, per: 1m}\n  - {name: c.x, key: [tenant], algorithm: concurrency, limit: 4}\ndirectory: {source: postgres}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "a.b", "b", "anonymous", "x\x01", ""}
	pols := []string{"rpm", "c.x", "nope"}
	override := func() limits.Override {
		return limits.Override{Limit: rng.Int64N(20) - 2, Burst: rng.Int64N(3) * rng.Int64N(2), Per: time.Duration(rng.IntN(3)) * time.Minute}
	}
	for round := range 300 {
		data := &directory.Data{Plans: limits.Plans{Plans: map[string]map[string]limits.Override{}, Tenants: map[string]limits.TenantPlan{}}}
		for range rng.IntN(4) {
			os := map[string]limits.Override{}
			for range rng.IntN(3) {
				os[pols[rng.IntN(len(pols))]] = override()
			}
			data.Plans.Plans[names[rng.IntN(3)]] = os
		}
		if rng.IntN(2) == 0 {
			data.Plans.Default = names[rng.IntN(3)]
		}
		for i := range rng.IntN(6) {
			tp := limits.TenantPlan{Plan: names[rng.IntN(3)]}
			if rng.IntN(2) == 0 {
				tp.Plan = ""
			}
			if rng.IntN(2) == 0 {
				tp.Overrides = map[string]limits.Override{pols[rng.IntN(len(pols))]: override()}
			}
			data.Plans.Tenants[fmt.Sprintf("%s%d", names[rng.IntN(len(names))], i%2)] = tp
		}
		before := data.Clone()
		ierr := d.Install(data)
		got := d.Data()
		if es := f.CheckPlans("db", &got.Plans); len(es) > 0 {
			t.Fatalf("round %d: the installed directory does not validate: %v\ninput: %+v", round, es, before.Plans)
		}
		for name, tp := range before.Plans.Tenants {
			one := limits.Plans{Default: got.Plans.Default, Plans: got.Plans.Plans, Tenants: map[string]limits.TenantPlan{name: tp}}
			if len(f.CheckPlans("db", &one)) == 0 {
				if _, ok := got.Plans.Tenants[name]; !ok {
					t.Fatalf("round %d: valid tenant %q (%+v) left out; Install: %v\ninstalled: %+v", round, name, tp, ierr, got.Plans)
				}
			}
		}
	}
}
