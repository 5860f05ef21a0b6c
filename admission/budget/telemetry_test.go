package budget_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
)

// TestCatalogMatchesExposition checks the metrics Prometheus scrapes are
// the Catalog's, with its labels, and the figures they carry: warnings by
// threshold, the top K tenants' used ratio, the soft quota marked.
func TestCatalogMatchesExposition(t *testing.T) {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	clk := admissiontest.NewClock(t0)
	r := newReceiver(t)
	h := newWebhook(t, r, nil)
	w, err := budget.New(budget.Config{Policies: []budget.Policy{
		{Name: "q", Thresholds: []int{50, 80}, Period: limits.PeriodDay, MaxTenants: 16},
		{Name: "soft", Thresholds: []int{100}, Soft: true, Period: limits.PeriodDay},
	}}, budget.WithClock(clk), budget.WithLogger(quiet), budget.WithMeterProvider(prom.Provider), budget.WithTopK(3), budget.WithWebhook(h))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 40 { // 40 tenants past 50%, 16 remembered at most, 3 reported
		w.Decision(decision("q", fmt.Sprint("t", i), int64(500+i), 1000, admission.Admitted))
	}
	w.Decision(decision("soft", "acme", 1000, 1000, admission.WouldReject))
	waitStats(t, h, "delivery", func(s budget.WebhookStats) bool { return s.Delivered > 0 })
	fams, err := prom.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{} // family: its series, as label=value lists
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "admission_budget_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()] = append(got[f.GetName()], fmt.Sprintf("%s %g", strings.Join(ls, ","), v))
		}
		if typ := strings.ToLower(f.GetType().String()); !slices.ContainsFunc(budget.Catalog(), func(m metrics.Metric) bool { return m.Name == f.GetName() && m.Type == typ }) {
			t.Errorf("%s (%s) is not in the catalog", f.GetName(), typ)
		}
	}
	for _, m := range budget.Catalog() {
		series := got[m.Name]
		if len(series) == 0 {
			t.Errorf("catalog lists %s; the exporter does not produce it", m.Name)
		}
		for _, s := range series {
			var names []string
			for _, kv := range strings.Split(strings.Fields(s)[0], ",") {
				names = append(names, strings.SplitN(kv, "=", 2)[0])
			}
			if !slices.Equal(names, m.Labels) {
				t.Errorf("%s: series %s; want labels %v", m.Name, s, m.Labels)
			}
		}
	}
	used := got["admission_budget_used_ratio"]
	slices.Sort(used)
	if len(used) != 4 || used[3] != "policy=soft,tenant=acme 1" {
		t.Errorf("used ratio series %v; want 3 of q and acme at 1 on soft", used)
	}
	for _, want := range []string{"policy=q,threshold=80 0", "policy=soft,threshold=100 1"} {
		if !slices.Contains(got["admission_budget_warnings_total"], want) {
			t.Errorf("warnings %v; want %q", got["admission_budget_warnings_total"], want)
		}
	}
	// The 40 crossings of 50%: warned while there was room (a shard holds
	// 1 of the 16), counted as untracked after.
	var warned, untracked int
	for _, s := range got["admission_budget_warnings_total"] {
		fmt.Sscanf(s, "policy=q,threshold=50 %d", &warned)
	}
	for _, s := range got["admission_budget_untracked_total"] {
		fmt.Sscanf(s, "policy=q %d", &untracked)
	}
	if warned+untracked != 40 || warned > 16 || warned < 4 {
		t.Errorf("q: %d warned and %d untracked; want 40 in all, at most 16 warned", warned, untracked)
	}
	if s := got["admission_budget_soft"]; !slices.Equal(s, []string{"policy=soft 1"}) {
		t.Errorf("soft %v; want only the soft policy", s)
	}
}

// TestDocsTable checks the table of the budget metrics in docs/budgets.md
// is the Catalog's.
func TestDocsTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/budgets.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range budget.Catalog() {
		row := fmt.Sprintf("| `%s` | %s | %s | %s |\n", m.Name, m.Type, "`"+strings.Join(m.Labels, "`, `")+"`", m.Help)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/budgets.md lacks the row\n%s", row)
		}
	}
}
