package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/metrics"
)

// BenchmarkObserverDecision records one admitted decision (its count and
// its cost) through the real observer on a real SDK meter provider, called
// through the admission.Observer interface as the controller calls it.
func BenchmarkObserverDecision(b *testing.B) {
	benchDecision(b, admission.Decision{
		Status: admission.Status{Policy: "tokens-per-minute", Mode: limits.Enforce, Unit: limits.UnitTokens,
			Algorithm: limits.TokenBucket, Limit: 100000, Remaining: 50000},
		Outcome: admission.Admitted, Tenant: "tenant-7", Operation: "chat", Model: "gpt-4o", Cost: 1200,
	})
}

// BenchmarkObserverRefusal records one refused decision: its count, the
// tenant's refusal in the top-K sketch and its retry hint in the
// histogram that carries refusals' exemplars.
func BenchmarkObserverRefusal(b *testing.B) {
	benchDecision(b, admission.Decision{
		Status: admission.Status{Policy: "tokens-per-minute", Mode: limits.Enforce, Unit: limits.UnitTokens,
			Algorithm: limits.TokenBucket, Limit: 100000, Remaining: 0},
		Outcome: admission.Rejected, Reason: admission.ReasonRate, Tenant: "tenant-7", Operation: "chat", Model: "gpt-4o",
		Cost: 1200, RetryAfter: 2 * time.Second,
	})
}

// benchDecision records d again and again through a Prometheus-backed
// observer, called through the interface as the controller calls it.
func benchDecision(b *testing.B, d admission.Decision) {
	prom, err := metrics.NewPrometheus(0)
	if err != nil {
		b.Fatal(err)
	}
	defer prom.Provider.Shutdown(context.Background())
	o, err := metrics.New(metrics.WithMeterProvider(prom.Provider))
	if err != nil {
		b.Fatal(err)
	}
	var obs admission.Observer = o
	obs.Decision(&d) // the first decision of a policy creates its cells
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		obs.Decision(&d)
	}
}

// BenchmarkPeerOTelCounterAdd is the peer: an OpenTelemetry SDK counter Add
// with a prebuilt 3-attribute set.
func BenchmarkPeerOTelCounterAdd(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	c, err := mp.Meter("peer").Int64Counter("decisions")
	if err != nil {
		b.Fatal(err)
	}
	opt := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("policy", "tokens-per-minute"), attribute.String("mode", "enforce"),
		attribute.String("decision", "admitted")))}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.Add(ctx, 1, opt...)
	}
}

// BenchmarkPeerPromCounterInc is the peer: a prometheus/client_golang
// counter child (labels resolved once) Inc.
func BenchmarkPeerPromCounterInc(b *testing.B) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decisions_total", Help: "peer"},
		[]string{"policy", "mode", "decision"})
	child := vec.WithLabelValues("tokens-per-minute", "enforce", "admitted")
	b.ReportAllocs()
	for b.Loop() {
		child.Inc()
	}
}
