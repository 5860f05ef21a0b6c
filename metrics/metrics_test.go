package metrics_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
)

var update = flag.Bool("update", false, "rewrite the metrics table of docs/metrics.md")

// newProm returns an observer exporting to a fresh Prometheus registry.
func newProm(t testing.TB, opts ...metrics.Option) (*metrics.Observer, *metrics.Prometheus) {
	t.Helper()
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Provider.Shutdown(context.Background()) })
	o, err := metrics.New(append([]metrics.Option{metrics.WithMeterProvider(prom.Provider)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return o, prom
}

func gather(t testing.TB, prom *metrics.Prometheus) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := prom.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// exercise sends every kind of event the observer handles.
func exercise(o *metrics.Observer) {
	st := admission.Status{Policy: "conc", Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 10, Remaining: 2}
	for i := range 64 {
		o.Decision(&admission.Decision{Status: st, Outcome: admission.Admitted, Tenant: "a", Cost: 3, QueueWait: time.Millisecond})
		o.Decision(&admission.Decision{Status: st, Outcome: admission.WouldReject, Reason: admission.ReasonRate, Tenant: "b" + strconv.Itoa(i%3), Cost: 3})
	}
	o.Decision(&admission.Decision{Status: st, Outcome: admission.Rejected, Reason: admission.ReasonRate, Tenant: "a", Cost: 3})
	o.Decision(&admission.Decision{Status: st, Outcome: admission.Admitted, Tenant: "a", Cost: 3, RolledBack: true})
	o.Settled(admission.Settlement{Policy: "conc", Unit: limits.UnitTokens, Estimated: 10, Actual: 12, Model: "gpt-4o", Admitted: time.Now()})
	o.LeaseExpired("conc", 1)
	o.PartitionsEvicted("conc", 1)
	o.StoreError(admission.StoreEvent{Policy: "conc", Store: "redis", Err: errors.New("timeout"), Action: limits.FailOpenMode})
	o.StoreCall(backend.Call{Store: "redis", Op: "batch", Policies: 2, Duration: 300 * time.Microsecond})
	o.StoreCall(backend.Call{Store: "redis", Op: "batch", Policies: 2, Duration: 50 * time.Millisecond, Err: errors.New("timeout")})
	o.StoreCall(backend.Call{Store: "redis", Op: "acquire", Err: errors.New("breaker open")}) // no latency: not recorded
	o.CountReload(nil)
}

func TestCatalogMatchesExposition(t *testing.T) {
	o, prom := newProm(t, metrics.WithTopK(2))
	exercise(o)
	c, err := admission.New(admission.Config{Policies: []admission.Policy{{Name: "conc", Algorithm: limits.Concurrency, Limit: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	o.Watch(c)
	got := gather(t, prom)
	delete(got, "target_info")
	for _, m := range metrics.Catalog() {
		f, ok := got[m.Name]
		if !ok {
			t.Errorf("catalog lists %s; the exporter does not produce it", m.Name)
			continue
		}
		delete(got, m.Name)
		if typ := strings.ToLower(f.GetType().String()); typ != m.Type {
			t.Errorf("%s: type %s; catalog says %s", m.Name, typ, m.Type)
		}
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() != "le" {
					labels[l.GetName()] = true
				}
			}
		}
		want := slices.Clone(m.Labels)
		slices.Sort(want)
		var have []string
		for l := range labels {
			have = append(have, l)
		}
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("%s: labels %v; catalog says %v", m.Name, have, want)
		}
	}
	for name := range got {
		t.Errorf("the exporter produces %s; the catalog does not list it", name)
	}
}

// TestDocsMetricsTable checks the metrics table of docs/metrics.md is the
// catalog's; -update rewrites it.
func TestDocsMetricsTable(t *testing.T) {
	const path = "../docs/metrics.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- metrics:begin -->\n", "<!-- metrics:end -->"
	i, j := strings.Index(string(b), begin), strings.Index(string(b), end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q markers", path, begin, end)
	}
	section := string(b[i+len(begin) : j])
	table := metrics.MarkdownTable()
	if *update {
		intro := "Every metric below is exported by `metrics.Observer` through `metrics.NewPrometheus`; " +
			"names are final Prometheus names. The table is checked against the exporter's output by " +
			"`go test ./metrics -run TestDocsMetricsTable` (`-update` rewrites it).\n\n"
		section = intro + table
		out := string(b[:i+len(begin)]) + section + string(b[j:])
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(section, table) {
		t.Errorf("%s: the metrics table is stale; run go test ./metrics -run TestDocsMetricsTable -update\nwant:\n%s", path, table)
	}
}

func TestStoreCallLatency(t *testing.T) {
	o, prom := newProm(t)
	exercise(o)
	fams := gather(t, prom)
	got := map[string]uint64{}
	for _, m := range fams["admission_store_duration_seconds"].GetMetric() {
		var k []string
		for _, l := range m.GetLabel() {
			k = append(k, l.GetName()+"="+l.GetValue())
		}
		got[strings.Join(k, ",")] = m.GetHistogram().GetSampleCount()
	}
	want := map[string]uint64{
		"op=batch,outcome=ok,store=redis":    1,
		"op=batch,outcome=error,store=redis": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("admission_store_duration_seconds counts = %v; want %v", got, want)
	}
}

func TestDecisionCounts(t *testing.T) {
	o, prom := newProm(t)
	exercise(o)
	fams := gather(t, prom)
	sum := func(name string, match map[string]string) float64 {
		var total float64
	next:
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := match[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			total += m.GetCounter().GetValue()
		}
		return total
	}
	tests := []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"admission_decisions_total", map[string]string{"decision": "admitted"}, 65},
		{"admission_cost_total", map[string]string{"decision": "admitted"}, 64 * 3},
		{"admission_decisions_total", map[string]string{"decision": "would_reject", "reason": "rate"}, 64},
		{"admission_tenant_decisions_total", map[string]string{"tenant": "__none__", "decision": "admitted"}, 1},
		{"admission_tenant_cost_total", map[string]string{"tenant": "__none__", "decision": "admitted"}, 12},
		{"admission_tenant_decisions_total", map[string]string{"decision": "would_reject"}, 64},
		{"admission_rollbacks_total", nil, 1},
		{"admission_store_errors_total", map[string]string{"action": "open"}, 1},
	}
	for _, tt := range tests {
		if got := sum(tt.name, tt.match); got != tt.want {
			t.Errorf("sum(%s%v) = %v; want %v", tt.name, tt.match, got, tt.want)
		}
	}
}

// appliedErr is a reload error of a file applied without a part of it,
// as reload.PartialError says.
type appliedErr struct{}

func (appliedErr) Error() string { return "applied without its directory section" }
func (appliedErr) Applied() bool { return true }

// TestReloadResults: a reload applied whole, one applied without a part
// (an error that says it was applied, wrapped or not) and one refused are
// counted apart.
func TestReloadResults(t *testing.T) {
	o, prom := newProm(t)
	o.CountReload(nil)
	o.CountReload(appliedErr{})
	o.CountReload(fmt.Errorf("policy.yaml: %w", appliedErr{}))
	o.CountReload(errors.New("policies[0].limit: must be > 0"))
	got := map[string]float64{}
	for _, m := range gather(t, prom)["admission_reloads_total"].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if want := map[string]float64{"ok": 1, "partial": 2, "rejected": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("admission_reloads_total by result = %v; want %v", got, want)
	}
}

// TestTopKBound sends many tenants and checks the exposition keeps K+1
// tenant values per policy with the heaviest one first in its counts.
func TestTopKBound(t *testing.T) {
	const k = 5
	o, prom := newProm(t, metrics.WithTopK(k))
	st := admission.Status{Policy: "rpm", Unit: limits.UnitRequests, Limit: 10}
	for i := range 20_000 {
		tenant := "t" + strconv.Itoa(i)
		if i%4 == 0 {
			tenant = "noisy"
		}
		o.Decision(&admission.Decision{Status: st, Outcome: admission.Rejected, Reason: admission.ReasonRate, Tenant: tenant, Cost: 1})
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
	if len(values) > k+1 {
		t.Errorf("%d tenant values; want at most %d", len(values), k+1)
	}
	if values["noisy"] != 5000 {
		t.Errorf("noisy = %v; want 5000", values["noisy"])
	}
	var total float64
	for _, v := range values {
		total += v
	}
	if total != 20_000 {
		t.Errorf("sum over tenants = %v; want 20000", total)
	}
}

// TestConcurrentDecisions checks the cells under concurrent use: every
// decision and every unit of cost is counted once.
func TestConcurrentDecisions(t *testing.T) {
	o, prom := newProm(t)
	st := admission.Status{Policy: "tpm", Unit: limits.UnitTokens, Limit: 1000}
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				o.Decision(&admission.Decision{Status: st, Outcome: admission.Admitted, Tenant: fmt.Sprint(w, i%50), Cost: 7})
			}
		})
	}
	// Collect while writing: totals never go backwards.
	var last float64
	for range 5 {
		for _, m := range gather(t, prom)["admission_cost_total"].GetMetric() {
			v := m.GetCounter().GetValue()
			if v < last {
				t.Fatalf("cost went back from %v to %v", last, v)
			}
			last = v
		}
	}
	wg.Wait()
	fams := gather(t, prom)
	if got := fams["admission_decisions_total"].GetMetric()[0].GetCounter().GetValue(); got != workers*each {
		t.Errorf("decisions = %v; want %d", got, workers*each)
	}
	if got := fams["admission_cost_total"].GetMetric()[0].GetCounter().GetValue(); got != 7*workers*each {
		t.Errorf("cost = %v; want %d", got, 7*workers*each)
	}
}

func TestModelFamily(t *testing.T) {
	for _, tt := range []struct{ model, want string }{
		{"gpt-4o-mini", "gpt-4o"}, {"gpt-4.1-nano", "gpt-4.1"}, {"gpt-4-turbo", "gpt-4"},
		{"gpt-3.5-turbo", "gpt-3.5"}, {"o3-mini", "o-series"}, {"text-embedding-3-small", "embedding"},
		{"claude-3-5-sonnet", "claude"}, {"Meta-Llama-3-70B", "llama"}, {"", "none"}, {"my-model", "other"},
	} {
		if got := metrics.ModelFamily(tt.model); got != tt.want {
			t.Errorf("ModelFamily(%q) = %q; want %q", tt.model, got, tt.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := metrics.New(metrics.WithTopK(0), metrics.WithMaxPolicies(0)); err == nil ||
		!strings.Contains(err.Error(), "top K") || !strings.Contains(err.Error(), "max policies") {
		t.Errorf("New(WithTopK(0), WithMaxPolicies(0)) = %v; want both problems", err)
	}
	if _, err := metrics.NewPrometheus(-1); err == nil {
		t.Error("NewPrometheus(-1) = nil error; want one")
	}
}

// TestPolicyNamedBeforeDecision: a store error can name a policy before
// any decision describes it; the policy's unit still comes out right.
func TestPolicyNamedBeforeDecision(t *testing.T) {
	o, prom := newProm(t)
	o.StoreError(admission.StoreEvent{Policy: "conc", Store: "redis", Err: errors.New("down"), Action: limits.FailOpenMode})
	st := admission.Status{Policy: "conc", Unit: limits.UnitTokens, Algorithm: limits.Concurrency, Limit: 10}
	o.Decision(&admission.Decision{Status: st, Outcome: admission.FailOpen, Reason: admission.ReasonStoreUnavailable, Cost: 5})
	o.Settled(admission.Settlement{Policy: "conc", Unit: limits.UnitTokens, Estimated: 5, Actual: 5, Admitted: time.Now()})
	fams := gather(t, prom)
	for _, l := range fams["admission_cost_total"].GetMetric()[0].GetLabel() {
		if l.GetName() == "unit" && l.GetValue() != "tokens" {
			t.Errorf("unit label = %q; want tokens", l.GetValue())
		}
	}
	if fams["admission_lease_duration_seconds"] == nil {
		t.Error("no lease duration recorded for a concurrency policy first named by a store error")
	}
}

// TestOptionsShapeOutput: WithModelFamily names the accuracy histogram's
// families, WithSource feeds the gauges from construction on, and
// WithSketchCapacity must hold at least the top K.
func TestOptionsShapeOutput(t *testing.T) {
	o, prom := newProm(t, metrics.WithModelFamily(func(m string) string { return "fam-" + m[:2] }))
	o.Settled(admission.Settlement{Policy: "tpm", Unit: limits.UnitTokens, Estimated: 10, Actual: 9, Model: "xyz-1", Admitted: time.Now()})
	var fams []string
	for _, m := range gather(t, prom)["admission_estimate_accuracy"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "model_family" {
				fams = append(fams, l.GetValue())
			}
		}
	}
	if !slices.Equal(fams, []string{"fam-xy"}) {
		t.Errorf("model_family labels = %v; want [fam-xy] from the custom function", fams)
	}

	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{Name: "inflight", Algorithm: limits.Concurrency, Limit: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	_, prom = newProm(t, metrics.WithSource(ctl))
	if g := gather(t, prom)["admission_limit"]; g == nil || len(g.GetMetric()) != 1 || g.GetMetric()[0].GetGauge().GetValue() != 4 {
		t.Errorf("admission_limit = %v; want one gauge of 4 from the source given at construction", g)
	}

	if _, err := metrics.New(metrics.WithTopK(10), metrics.WithSketchCapacity(5)); err == nil {
		t.Error("New(WithTopK(10), WithSketchCapacity(5)) = nil error; want the sketch too small for K")
	}
	if _, err := metrics.New(metrics.WithTopK(10), metrics.WithSketchCapacity(50)); err != nil {
		t.Errorf("New(WithTopK(10), WithSketchCapacity(50)) = %v; want it accepted", err)
	}
}

// TestDocsFigures checks the series bounds docs/metrics.md quotes, written
// there as "`SeriesBound(p, k, f, s)` is N", and its "7K + 6 tenant
// series" per policy.
func TestDocsFigures(t *testing.T) {
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	quoted := regexp.MustCompile("`SeriesBound\\((\\d+), (\\d+), (\\d+), (\\d+)\\)`(?: is|,) ([0-9,]+)")
	ms := quoted.FindAllStringSubmatch(doc, -1)
	if len(ms) < 2 {
		t.Fatalf("docs/metrics.md quotes %d series bounds; want the two of its series bound paragraph", len(ms))
	}
	for _, m := range ms {
		var args [4]int
		for i := range args {
			args[i], _ = strconv.Atoi(m[i+1])
		}
		want, _ := strconv.Atoi(strings.ReplaceAll(m[5], ",", ""))
		if got := metrics.SeriesBound(args[0], args[1], args[2], args[3]); got != want {
			t.Errorf("docs/metrics.md: SeriesBound(%d, %d, %d, %d) = %d; the text says %d", args[0], args[1], args[2], args[3], got, want)
		}
	}
	if !strings.Contains(doc, "7K + 6 tenant series") {
		t.Fatal(`docs/metrics.md no longer says "7K + 6 tenant series": update this test`)
	}
	for k := 1; k <= 50; k++ {
		if d := metrics.SeriesBound(1, k+1, 0, 0) - metrics.SeriesBound(1, k, 0, 0); d != 7 {
			t.Errorf("SeriesBound grows by %d series per top-K tenant at K = %d; docs/metrics.md says 7K + 6", d, k)
		}
	}
}
