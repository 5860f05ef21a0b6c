package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/admission/envoyrls"
)

// registerStats exports the server's own counters beside the controller's
// metrics: descriptors answered without a policy, and what became of the
// costs reported after the response. Their labels are a closed set.
func registerStats(reg prometheus.Registerer, srv *envoyrls.Server) error {
	counters := []struct {
		name, help, label, value string
		get                      func(envoyrls.Stats) int64
	}{
		{"rls_descriptors_total", "Descriptors answered without a policy: unknown (no rule matched), blocked (requests_per_unit 0), unlimited.", "kind", "unknown", func(s envoyrls.Stats) int64 { return s.Unknown }},
		{"rls_descriptors_total", "", "kind", "blocked", func(s envoyrls.Stats) int64 { return s.Blocked }},
		{"rls_descriptors_total", "", "kind", "unlimited", func(s envoyrls.Stats) int64 { return s.Unlimited }},
		{"rls_reported_costs_total", "Response-phase costs: reconciled (replaced their estimate), charged (on their own); untracked: estimates the reconciliation table had no room for.", "how", "reconciled", func(s envoyrls.Stats) int64 { return s.Reconciled }},
		{"rls_reported_costs_total", "", "how", "charged", func(s envoyrls.Stats) int64 { return s.Charged }},
		{"rls_reported_costs_total", "", "how", "untracked", func(s envoyrls.Stats) int64 { return s.Untracked }},
	}
	help := map[string]string{}
	for _, c := range counters {
		if c.help != "" {
			help[c.name] = c.help
		}
	}
	for _, c := range counters {
		get := c.get
		f := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: c.name, Help: help[c.name], ConstLabels: prometheus.Labels{c.label: c.value},
		}, func() float64 { return float64(get(srv.Stats())) })
		if err := reg.Register(f); err != nil {
			return err
		}
	}
	return nil
}
