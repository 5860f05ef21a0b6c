// Package alerts holds Sluice's Prometheus rules: recording rules for
// rejection and shadow would-reject ratios and per-tenant rejections, and
// the alerts every deployment should start from (rejection burn rate, the
// shadow rollout gate, throttled tenants, store failover and errors, queue
// saturation and wait, estimate drift, full partition tables, metric
// cardinality overflow, and llmproxy's provider budget running out). Load
// rules.yml into Prometheus as it is. The runbook is RUNBOOK.md, one entry
// per alert; each alert's runbook_url annotation links to its entry on
// GitHub (RUNBOOK.md says how to point it at your own copy).
//
// Every aggregation and vector matching keeps the job label (and instance
// where the figure is one replica's), so that two services scraped by one
// Prometheus are never summed together and each alert fires per job; the
// recording rules keep their policy-level names.
//
// Every alert has promtool unit tests in tests/, which go test runs with
// the real promtool.
package alerts

import (
	_ "embed"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// RulesYAML is rules.yml, the Prometheus rule file.
//
//go:embed rules.yml
var RulesYAML []byte

// A Rule is one recording or alerting rule.
type Rule struct {
	// Group is the name of the rule's group.
	Group string
	// Record is the series a recording rule writes; Alert the name of an
	// alerting rule. One of them is set.
	Record string `yaml:"record"`
	Alert  string `yaml:"alert"`
	// Expr is the PromQL expression.
	Expr string `yaml:"expr"`
	// For is how long an alert's condition must hold before it fires.
	For string `yaml:"for"`
	// Labels and Annotations are an alert's (severity; summary and
	// description).
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Rules returns the rules of RulesYAML in file order.
func Rules() ([]Rule, error) {
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []Rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(RulesYAML, &f); err != nil {
		return nil, fmt.Errorf("alerts: rules.yml: %w", err)
	}
	var out []Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			out = append(out, r)
		}
	}
	return out, nil
}
