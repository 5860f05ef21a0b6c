package alerts_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/alerts"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/internal/mdcheck"
	"github.com/sluicehq/sluice/internal/promtest"
	"github.com/sluicehq/sluice/metrics"
)

func TestPromtoolCheckRules(t *testing.T) {
	out := promtest.Promtool(t, ".", "check", "rules", "rules.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	out := promtest.Promtool(t, ".", "test", "rules", "tests/alerts_test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

func rules(t *testing.T) []alerts.Rule {
	t.Helper()
	rs, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestEveryAlertTested checks the promtool tests hold, for every alert, a
// case where it fires and a case where it stays quiet.
func TestEveryAlertTested(t *testing.T) {
	b, err := os.ReadFile("tests/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range rules(t) {
		if r.Alert == "" {
			continue
		}
		if !fires[r.Alert] {
			t.Errorf("alert %s: no promtool test where it fires", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("alert %s: no promtool test where it stays quiet", r.Alert)
		}
	}
}

// TestAlertsDocumented checks each alert's annotations, severity and
// runbook entry (a "## <alert>" heading of RUNBOOK.md).
func TestAlertsDocumented(t *testing.T) {
	runbook, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules(t) {
		if r.Alert == "" {
			continue
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: needs summary and description annotations", r.Alert)
		}
		if !strings.Contains(r.Annotations["description"], "$value") {
			t.Errorf("alert %s: description does not show the query value ($value)", r.Alert)
		}
		if !slices.Contains([]string{"page", "ticket", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("alert %s: severity %q; want page, ticket, warning or info", r.Alert, r.Labels["severity"])
		}
		if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
			t.Errorf("alert %s: no runbook entry (## %s) in RUNBOOK.md", r.Alert, r.Alert)
		}
	}
}

// runbookBase is the prefix of every runbook_url: RUNBOOK.md as GitHub
// renders it. RUNBOOK.md tells operators how to replace it.
const runbookBase = "https://github.com/sluicehq/sluice/blob/main/alerts/RUNBOOK.md#"

// TestRunbookURLs checks every alert has a runbook_url annotation made of
// runbookBase and an anchor that RUNBOOK.md has, by GitHub's anchor rules,
// and that only alerts have one.
func TestRunbookURLs(t *testing.T) {
	runbook, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := mdcheck.Anchors(runbook)
	for _, r := range rules(t) {
		url, ok := r.Annotations["runbook_url"]
		if r.Alert == "" {
			if ok {
				t.Errorf("recording rule %s has a runbook_url", r.Record)
			}
			continue
		}
		anchor, found := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: no runbook_url annotation", r.Alert)
		case !found:
			t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
		case !anchors[anchor]:
			t.Errorf("alert %s: runbook_url %q: RUNBOOK.md has no heading with anchor #%s", r.Alert, url, anchor)
		case anchor != mdcheck.Slug(r.Alert):
			t.Errorf("alert %s: runbook_url %q points at #%s; want #%s, its own entry", r.Alert, url, anchor, mdcheck.Slug(r.Alert))
		}
	}
}

// TestRulesUseExportedMetrics checks every admission_ metric a rule reads
// is one the metrics package exports, and every llmproxy_ metric one the
// llmproxy gateway exports.
func TestRulesUseExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	for _, m := range append(append(metrics.Catalog(), gateway.Catalog()...), budget.Catalog()...) {
		exported[m.Name] = true
		if m.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[m.Name+s] = true
			}
		}
	}
	ident := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	for _, r := range rules(t) {
		for _, m := range ident.FindAllString(r.Expr, -1) {
			if !strings.HasPrefix(m, "admission_") && !strings.HasPrefix(m, "llmproxy_") || strings.Contains(m, ":") || m == "admission_" {
				continue // not a metric, or a recording rule's name
			}
			if !exported[m] {
				t.Errorf("rule %s%s reads %s, which neither the metrics package nor the gateway exports", r.Record, r.Alert, m)
			}
		}
	}
}

// TestRulesKeepJob checks every aggregation and every vector matching of
// a rule keeps the job label, so that two services scraped by one
// Prometheus are never summed together and each alert fires per job.
func TestRulesKeepJob(t *testing.T) {
	agg := regexp.MustCompile(`\b(sum|max|min|avg|count|topk|bottomk|quantile|group|stddev|stdvar|count_values)\s*(\(|by\s*\(([^)]*)\)|without\s*\()`)
	on := regexp.MustCompile(`\b(on|ignoring)\s*\(([^)]*)\)`)
	for _, r := range rules(t) {
		name := r.Record + r.Alert
		for _, m := range agg.FindAllStringSubmatch(r.Expr, -1) {
			if !strings.HasPrefix(m[2], "by") || !slices.Contains(labelList(m[3]), "job") {
				t.Errorf("rule %s: %q does not keep job in %q", name, m[0], r.Expr)
			}
		}
		for _, m := range on.FindAllStringSubmatch(r.Expr, -1) {
			if m[1] != "on" || !slices.Contains(labelList(m[2]), "job") {
				t.Errorf("rule %s: %q does not match on job in %q", name, m[0], r.Expr)
			}
		}
	}
}

func labelList(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}
