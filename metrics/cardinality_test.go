package metrics_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
)

// TestCardinality drives 100,000 distinct tenants through a controller
// with an enforcing and a shadow policy and checks the exposition: at most
// K+1 tenant values per policy, and a total series count under
// SeriesBound.
func TestCardinality(t *testing.T) {
	const tenants = 100_000
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o, prom := newProm(t, metrics.WithClock(clk))
	cfg := admission.Config{Policies: []admission.Policy{
		{Name: "tenant-rpm", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.TokenBucket,
			Limit: 1, Per: time.Minute, MaxPartitions: 200_000},
		{Name: "tenant-tpm-shadow", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
			Algorithm: limits.FixedWindow, Limit: 150, Per: time.Minute, Mode: limits.Shadow, MaxPartitions: 200_000},
	}}
	c, err := admission.New(cfg, admission.WithClock(clk), admission.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	o.Watch(c)
	ctx := context.Background()
	for i := range tenants {
		r := admission.Request{Tenant: "tenant-" + strconv.Itoa(i), Tokens: 100, Model: "gpt-4o"}
		for range 2 { // the second request is rejected and would be rejected
			if tk, err := c.TryAdmit(ctx, r); err == nil {
				tk.Settle(admission.Usage{Tokens: 90})
			}
		}
	}
	fams := gather(t, prom)
	series := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				series += len(m.GetHistogram().GetBucket()) + 3
			default:
				series++
			}
		}
	}
	perPolicy := map[string]map[string]bool{}
	for _, name := range []string{"admission_tenant_decisions_total", "admission_tenant_cost_total", "admission_tenant_utilization_ratio"} {
		for _, m := range fams[name].GetMetric() {
			var policy, tenant string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "policy":
					policy = l.GetValue()
				case "tenant":
					tenant = l.GetValue()
				}
			}
			if perPolicy[policy] == nil {
				perPolicy[policy] = map[string]bool{}
			}
			perPolicy[policy][tenant] = true
		}
	}
	if len(perPolicy) != 2 {
		t.Errorf("tenant metrics for %d policies; want 2", len(perPolicy))
	}
	for p, ts := range perPolicy {
		if len(ts) > metrics.DefaultTopK+1 {
			t.Errorf("policy %s: %d tenant values; want at most %d", p, len(ts), metrics.DefaultTopK+1)
		}
		if !ts[metrics.Other] {
			t.Errorf("policy %s: no %s tenant", p, metrics.Other)
		}
	}
	bound := metrics.SeriesBound(2, metrics.DefaultTopK, 1, 0)
	t.Logf("%d tenants: %d series (bound %d)", tenants, series, bound)
	if series > bound {
		t.Errorf("%d series; want at most %d", series, bound)
	}
}
