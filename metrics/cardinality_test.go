package metrics_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

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

// TestHostileTenantLabels sends refusals of tenants whose names a caller
// may choose (a custom identity function reading a header) and checks the
// scrape still answers, every tenant label value is short, valid UTF-8
// without control characters, distinct tenants keep distinct values, and
// a tenant named like the overflow bucket never adds to it. One case per
// attack class.
func TestHostileTenantLabels(t *testing.T) {
	long := strings.Repeat("t", 1<<20)
	for _, tc := range []struct {
		name    string
		tenants []string
	}{
		{"invalid UTF-8", []string{"\xff\xfe", "acme\xc3"}},
		{"control characters", []string{"a\x00b", "a\rb", "a\x1b[31mb", "a\u0085b"}},
		{"very long", []string{long + "1", long + "2"}},
		{"reserved names", []string{metrics.Other, metrics.NoTenant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, prom := newProm(t)
			st := admission.Status{Policy: "p", Unit: limits.UnitRequests, Algorithm: limits.TokenBucket, Limit: 10}
			refuse := func(tenant string, cost int64) {
				o.Decision(&admission.Decision{Status: st, Outcome: admission.Rejected, Reason: admission.ReasonRate, Tenant: tenant, Cost: cost})
			}
			// Enough ordinary tenants to fill the sketch, so that Other
			// holds some of them; the hostile ones are the heaviest.
			for i := range 10 * metrics.DefaultSketchFactor * metrics.DefaultTopK {
				refuse("plain-"+strconv.Itoa(i), 1)
			}
			for _, tenant := range tc.tenants {
				refuse(tenant, 1000)
			}
			fams := gather(t, prom)
			values := map[string]float64{}
			for _, m := range fams["admission_tenant_decisions_total"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" {
						values[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
			named := 0
			for v := range values {
				if !utf8.ValidString(v) || len(v) > metrics.MaxTenantLabel {
					t.Errorf("tenant label %.40q: want valid UTF-8 of at most %d bytes", v, metrics.MaxTenantLabel)
				}
				for _, r := range v {
					if unicode.IsControl(r) {
						t.Errorf("tenant label %q holds the control character %U", v, r)
					}
				}
				if !strings.HasPrefix(v, "plain-") && v != metrics.Other {
					named++
				}
			}
			if named != len(tc.tenants) {
				t.Errorf("%d hostile tenant values in %v; want %d, one per tenant", named, slices.Collect(maps.Keys(values)), len(tc.tenants))
			}
			// Other counts ordinary tenants only: each refused once.
			if got := values[metrics.Other]; got != float64(10*metrics.DefaultSketchFactor*metrics.DefaultTopK-(metrics.DefaultTopK-len(tc.tenants))) {
				t.Errorf("%s = %v; want the ordinary tenants outside the top K only", metrics.Other, got)
			}
		})
	}
}

// TestUtilizationSurvivesScrapes: a tenant's partition reaches 90% of its
// limit; two Prometheus servers scraping the same replica (the usual HA
// pair), or an operator's look at /metrics between two scrapes, each read
// the peak: reading the gauge does not reset it. The peak goes back to 0
// once UtilizationWindow passes twice without the tenant near its limit.
func TestUtilizationSurvivesScrapes(t *testing.T) {
	clk := admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o, prom := newProm(t, metrics.WithClock(clk))
	st := admission.Status{Policy: "p", Unit: limits.UnitRequests, Algorithm: limits.TokenBucket, Limit: 10, Remaining: 1}
	o.Decision(&admission.Decision{Status: st, Outcome: admission.WouldReject, Reason: admission.ReasonRate, Tenant: "acme", Cost: 1})
	util := func() float64 {
		for _, m := range gather(t, prom)["admission_tenant_utilization_ratio"].GetMetric() {
			return m.GetGauge().GetValue()
		}
		return -1
	}
	for i, step := range []struct {
		advance time.Duration
		want    float64
	}{
		{0, 0.9},
		{0, 0.9}, // the second scraper
		{metrics.UtilizationWindow, 0.9},
		{metrics.UtilizationWindow, 0},
	} {
		clk.Advance(step.advance)
		if got := util(); got != step.want {
			t.Errorf("scrape %d: admission_tenant_utilization_ratio = %v; want %v", i, got, step.want)
		}
	}
}
