package main

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission"
)

// telemetry is the proxy's metrics: the admission observer and the
// gateway's own instruments on one meter provider, served at /metrics in
// the Prometheus exposition format.
//
// Interim: until package metrics lands, the observer here counts decisions
// and reports in-flight work and queue depth under the names package
// metrics exports (admission_decisions_total, admission_inflight,
// admission_queue_depth).
type telemetry struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	observer *interimObserver
}

func newTelemetry(cardinalityLimit, _ int) (*telemetry, error) {
	if cardinalityLimit <= 0 {
		cardinalityLimit = 2000
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	t := &telemetry{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithCardinalityLimit(cardinalityLimit)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		observer: &interimObserver{counts: map[decisionKey]int64{}},
	}
	m := t.provider.Meter("github.com/sluicehq/sluice/examples/llmproxy")
	decisions, err1 := m.Int64ObservableCounter("admission.decisions", metric.WithUnit("{decision}"))
	inflight, err2 := m.Int64ObservableGauge("admission.inflight", metric.WithUnit("{cost}"))
	depth, err3 := m.Int64ObservableGauge("admission.queue.depth", metric.WithUnit("{request}"))
	for _, e := range []error{err1, err2, err3} {
		if e != nil {
			return nil, e
		}
	}
	o := t.observer
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		o.mu.Lock()
		for k, n := range o.counts {
			obs.ObserveInt64(decisions, n, metric.WithAttributes(
				attribute.String("policy", k.policy), attribute.String("mode", k.mode.String()),
				attribute.String("decision", k.outcome.String()), attribute.String("reason", k.reason.String())))
		}
		ctl := o.ctl
		o.mu.Unlock()
		if ctl != nil {
			for _, s := range ctl.Stats() {
				obs.ObserveInt64(inflight, s.InFlight, metric.WithAttributes(attribute.String("policy", s.Name)))
				obs.ObserveInt64(depth, int64(s.Queued), metric.WithAttributes(attribute.String("policy", s.Name)))
			}
		}
		return nil
	}, decisions, inflight, depth)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (t *telemetry) watch(ctl *admission.Controller) {
	t.observer.mu.Lock()
	t.observer.ctl = ctl
	t.observer.mu.Unlock()
}

func (t *telemetry) meter() metric.Meter {
	return t.provider.Meter("github.com/sluicehq/sluice/examples/llmproxy")
}

func (t *telemetry) close() { _ = t.provider.Shutdown(context.Background()) }

type decisionKey struct {
	policy  string
	mode    admission.Mode
	outcome admission.Outcome
	reason  admission.Reason
}

// interimObserver counts decisions per policy, mode, outcome and reason.
type interimObserver struct {
	admission.NopObserver
	mu     sync.Mutex
	counts map[decisionKey]int64
	ctl    *admission.Controller
}

func (o *interimObserver) Decision(d admission.Decision) {
	o.mu.Lock()
	o.counts[decisionKey{d.Policy, d.Mode, d.Outcome, d.Reason}]++
	o.mu.Unlock()
}
