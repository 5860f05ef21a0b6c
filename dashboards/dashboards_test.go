package dashboards_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/dashboards"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/metrics"
)

var update = flag.Bool("update", false, "rewrite the generated dashboard JSON files")

// TestGenerated checks the committed JSON is what the code generates.
func TestGenerated(t *testing.T) {
	for _, d := range dashboards.All() {
		want, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(d.File(), want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(d.File())
		if err != nil {
			t.Fatalf("%v (generate with go test ./dashboards -run TestGenerated -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: regenerate with go test ./dashboards -run TestGenerated -update", d.File())
		}
	}
}

// exported holds every series name the metrics package and the llmproxy
// gateway export.
func exported() map[string]string {
	out := map[string]string{}
	for _, m := range append(append(metrics.Catalog(), gateway.Catalog()...), budget.Catalog()...) {
		out[m.Name] = m.Type
		if m.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+s] = "counter" // cumulative: only inside rate or increase
			}
		}
	}
	return out
}

var (
	ident    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	rangeSel = regexp.MustCompile(`\[([^\]]*)\]`)
	rateCall = regexp.MustCompile(`\b(rate|irate|increase)\(\s*$`)
	wantUIDs = []string{"sluice-overview", "sluice-rollout", "sluice-tenant", "sluice-llm", "sluice-provider"}
	byClause = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)
	bareAgg  = regexp.MustCompile(`\b(sum|max|min|avg|count|topk|bottomk|group)\s*\(`)
	svcSel   = `job=~"$job",instance=~"$instance"`
)

// TestLint enforces the rules every dashboard follows.
func TestLint(t *testing.T) {
	metricsExported := exported()
	all := dashboards.All()
	if len(all) != len(wantUIDs) {
		t.Fatalf("%d dashboards; want %d", len(all), len(wantUIDs))
	}
	for i, d := range all {
		if d.UID != wantUIDs[i] {
			t.Errorf("dashboard %d: uid %q; want the stable %q", i, d.UID, wantUIDs[i])
		}
		vars := d.Templating.List
		if len(vars) < 3 || vars[0].Name != "datasource" || vars[0].Type != "datasource" || vars[0].Query != "prometheus" {
			t.Fatalf("%s: the first variable must be the Prometheus datasource variable", d.UID)
		}
		for i, name := range []string{"job", "instance"} {
			v := vars[1+i]
			if v.Name != name || !v.Multi || !v.IncludeAll || v.AllValue != ".*" || !strings.HasSuffix(v.Query, ", "+name+")") {
				t.Errorf("%s: variable %d is %+v; want %s, multi-select over the %s label with All (.*) as default", d.UID, 1+i, v, name, name)
			}
		}
		if q := vars[2].Query; !strings.Contains(q, `job=~"$job"`) {
			t.Errorf("%s: the instances are not those of the chosen jobs: %s", d.UID, q)
		}
		for _, v := range vars[1:] {
			if v.Type == "datasource" {
				continue
			}
			if v.Datasource != dashboards.Datasource {
				t.Errorf("%s: variable %s does not use the datasource variable", d.UID, v.Name)
			}
			checkMetrics(t, d.UID+" variable "+v.Name, v.Query, metricsExported)
			if v.Name != "job" && v.Name != "instance" {
				checkSelectors(t, d.UID+" variable "+v.Name, v.Query, metricsExported)
			}
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			where := d.UID + " panel " + p.Title
			if ids[p.ID] {
				t.Errorf("%s: duplicate id %d", where, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				if p.Title == "" || len(p.Targets) > 0 || p.GridPos.W != 24 {
					t.Errorf("%s: a row has a title, spans the grid and has no query", where)
				}
				continue
			}
			if p.Description == "" {
				t.Errorf("%s: no description", where)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: no unit", where)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource is not the datasource variable", where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: query %s: datasource is not the datasource variable", where, tg.RefID)
				}
				lintExpr(t, where, tg, metricsExported)
				checkSelectors(t, where, tg.Expr, metricsExported)
				checkKeepsJob(t, where, tg.Expr)
			}
		}
	}
}

func lintExpr(t *testing.T, where string, tg dashboards.Target, exp map[string]string) {
	t.Helper()
	for _, m := range rangeSel.FindAllStringSubmatch(tg.Expr, -1) {
		switch {
		case m[1] == "$__rate_interval":
		case m[1] == "$__range" && tg.Instant:
		default:
			t.Errorf("%s: range [%s] in %q; use $__rate_interval ($__range in instant queries)", where, m[1], tg.Expr)
		}
	}
	if strings.Contains(tg.Expr, "rate(") && strings.Contains(tg.Expr, "[$__range]") && !strings.Contains(tg.Expr, "increase(") {
		t.Errorf("%s: rate over $__range in %q; rates use $__rate_interval", where, tg.Expr)
	}
	for _, loc := range ident.FindAllStringIndex(tg.Expr, -1) {
		name := tg.Expr[loc[0]:loc[1]]
		if exp[name] == "counter" && !rateCall.MatchString(tg.Expr[:loc[0]]) {
			t.Errorf("%s: counter %s outside rate() or increase() in %q", where, name, tg.Expr)
		}
	}
	checkMetrics(t, where, tg.Expr, exp)
}

// checkMetrics fails for any admission_ or llmproxy_ metric that is not
// exported.
func checkMetrics(t *testing.T, where, expr string, exp map[string]string) {
	t.Helper()
	for _, name := range ident.FindAllString(expr, -1) {
		if (strings.HasPrefix(name, "admission_") || strings.HasPrefix(name, "llmproxy_")) && !strings.Contains(name, ":") {
			if _, ok := exp[name]; !ok {
				t.Errorf("%s: %s is not exported by the metrics package or the gateway", where, name)
			}
		}
	}
}

// checkSelectors fails for any exported metric expr reads without the
// job and instance variables' selector.
func checkSelectors(t *testing.T, where, expr string, exp map[string]string) {
	t.Helper()
	for _, loc := range ident.FindAllStringIndex(expr, -1) {
		if _, ok := exp[expr[loc[0]:loc[1]]]; !ok {
			continue
		}
		rest := expr[loc[1]:]
		end := strings.IndexByte(rest, '}')
		if !strings.HasPrefix(rest, "{") || end < 0 || !strings.Contains(rest[:end], svcSel) {
			t.Errorf("%s: %s without the selector %s in %q", where, expr[loc[0]:loc[1]], svcSel, expr)
		}
	}
}

// checkKeepsJob fails for an aggregation or a vector matching of expr
// that drops the job label: two services on one Prometheus would mix.
func checkKeepsJob(t *testing.T, where, expr string) {
	t.Helper()
	for _, m := range byClause.FindAllStringSubmatch(expr, -1) {
		if m[1] == "without" || m[1] == "ignoring" || !slices.Contains(strings.Split(strings.ReplaceAll(m[2], " ", ""), ","), "job") {
			t.Errorf("%s: %q drops job in %q", where, m[0], expr)
		}
	}
	// An aggregation without by keeps no label at all.
	for _, loc := range bareAgg.FindAllStringIndex(expr, -1) {
		if !strings.HasPrefix(expr[loc[0]:], "topk(") {
			t.Errorf("%s: aggregation without by (job, ...) at %q in %q", where, expr[loc[0]:loc[1]], expr)
		}
	}
}

// TestGenericDashboards checks the dashboards every service fills read no
// metric only an LLM service or the gateway exports.
func TestGenericDashboards(t *testing.T) {
	for _, d := range dashboards.Generic() {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				for _, llm := range []string{"llmproxy_", "admission_budget_", "admission_estimate_accuracy", `unit="tokens"`, `unit="cost"`} {
					if strings.Contains(tg.Expr, llm) {
						t.Errorf("%s panel %s reads %s, which a service counting requests does not export: put it on Sluice / LLM or Provider", d.UID, p.Title, llm)
					}
				}
			}
		}
	}
}

// TestExemplarTraceLink checks the Overview's queue wait panel fetches
// exemplars and links their trace_id to the traces variable's datasource.
func TestExemplarTraceLink(t *testing.T) {
	d := dashboards.Overview()
	var tracesVar bool
	for _, v := range d.Templating.List {
		tracesVar = tracesVar || v.Name == "traces" && v.Type == "datasource" && v.Query == "tempo"
	}
	if !tracesVar {
		t.Errorf("%s: no traces datasource variable", d.UID)
	}
	for _, p := range d.Panels {
		if p.Title != "Queue wait p50 / p99" {
			continue
		}
		if !p.Targets[0].Exemplar {
			t.Errorf("%s: target A does not ask for exemplars", p.Title)
		}
		link, _ := json.Marshal(p.FieldConfig.Overrides)
		for _, want := range []string{`"options":"trace_id"`, `"datasourceUid":"${traces}"`, `"query":"${__value.raw}"`} {
			if !strings.Contains(string(link), want) {
				t.Errorf("%s: overrides %s lack %s", p.Title, link, want)
			}
		}
		return
	}
	t.Errorf("%s: no queue wait panel", d.UID)
}
