package budget

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/metrics"
)

// meterName is the instrumentation scope of the budget metrics.
const meterName = "github.com/sluicehq/sluice/admission/budget"

// Catalog lists the metric families a Watcher exports, under their
// Prometheus names (as metrics.NewPrometheus exposes them), sorted by
// name. Every label value comes from a closed set: policy names from the
// configuration, at most MaxThresholds thresholds per policy, the
// delivery results, and at most K tenants per policy (WithTopK).
func Catalog() []metrics.Metric {
	return []metrics.Metric{
		{Name: "admission_budget_soft", Type: "gauge", Labels: []string{"policy"},
			Help: "1 for each soft quota (never refuses, only warns): its decisions are counted as shadow ones."},
		{Name: "admission_budget_untracked_total", Type: "counter", Labels: []string{"policy"},
			Help: "Threshold crossings not warned because the policy's table of tenants was full of current entries."},
		{Name: "admission_budget_used_ratio", Type: "gauge", Labels: []string{"policy", "tenant"},
			Help: "Share of its quota a tenant past a warning threshold has used this period (last figure seen): the top K per policy."},
		{Name: "admission_budget_warnings_total", Type: "counter", Labels: []string{"policy", "threshold"},
			Help: "Warnings emitted: a tenant's usage crossed the threshold (in percent) for the first time in the period."},
		{Name: "admission_budget_webhook_deliveries_total", Type: "counter", Labels: []string{"result"},
			Help: "Webhook attempts by result: delivered, retried (an attempt failed and another follows), failed (gave up), dropped (the queue was full)."},
	}
}

// register creates the instruments of Catalog on mp, read at collection.
func (w *Watcher) register(mp metric.MeterProvider) error {
	m := mp.Meter(meterName)
	warned, err := m.Int64ObservableCounter("admission.budget.warnings",
		metric.WithDescription("Warnings emitted, by policy and threshold (percent)."))
	if err != nil {
		return err
	}
	untracked, err := m.Int64ObservableCounter("admission.budget.untracked",
		metric.WithDescription("Threshold crossings not warned: the policy's table of tenants was full."))
	if err != nil {
		return err
	}
	used, err := m.Float64ObservableGauge("admission.budget.used", metric.WithUnit("1"),
		metric.WithDescription("Share of its quota a tenant past a threshold has used this period; the top K per policy."))
	if err != nil {
		return err
	}
	soft, err := m.Int64ObservableGauge("admission.budget.soft",
		metric.WithDescription("1 for each soft quota."))
	if err != nil {
		return err
	}
	deliveries, err := m.Int64ObservableCounter("admission.budget.webhook.deliveries",
		metric.WithDescription("Webhook attempts by result: delivered, retried, failed, dropped."))
	if err != nil {
		return err
	}
	results := [...]attribute.Set{
		attribute.NewSet(attribute.String("result", "delivered")),
		attribute.NewSet(attribute.String("result", "retried")),
		attribute.NewSet(attribute.String("result", "failed")),
		attribute.NewSet(attribute.String("result", "dropped")),
	}
	w.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := w.opts.clock.Now().UnixNano()
		for name, p := range w.tab.Load().byName {
			pol := attribute.String("policy", name)
			for _, t := range p.Thresholds {
				o.ObserveInt64(warned, int64(p.st.warned[t].Load()), metric.WithAttributes(pol, attribute.String("threshold", strconv.Itoa(t))))
			}
			o.ObserveInt64(untracked, int64(p.st.untracked.Load()), metric.WithAttributes(pol))
			if p.Soft {
				o.ObserveInt64(soft, 1, metric.WithAttributes(pol))
			}
			for _, tu := range p.st.top(now, w.opts.topK) {
				o.ObserveFloat64(used, tu.ratio, metric.WithAttributes(pol, attribute.String("tenant", tu.tenant)))
			}
		}
		if h := w.opts.hook; h != nil {
			s := h.Stats()
			for i, n := range [...]uint64{s.Delivered, s.Retried, s.Failed, s.Dropped} {
				o.ObserveInt64(deliveries, int64(n), metric.WithAttributeSet(results[i]))
			}
		}
		return nil
	}, warned, untracked, used, soft, deliveries)
	return err
}

// tenantUse is one tenant's share of its quota.
type tenantUse struct {
	tenant string
	ratio  float64
}

// top returns the k tenants of the current period closest to their
// budget, dropping on the way the entries of ended periods.
func (t *tenants) top(now int64, k int) []tenantUse {
	var out []tenantUse
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		s.sweep(now)
		for name, e := range s.m {
			if e.limit <= 0 {
				continue
			}
			if name == "" {
				name = metrics.NoTenant // a global quota
			}
			u := tenantUse{name, float64(e.used) / float64(e.limit)}
			if len(out) < k {
				out = append(out, u)
				continue
			}
			low := 0
			for j := range out {
				if out[j].ratio < out[low].ratio {
					low = j
				}
			}
			if u.ratio > out[low].ratio {
				out[low] = u
			}
		}
		s.mu.Unlock()
	}
	return out
}
