package gateway

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The charges of running streams are exported as a counter labelled
// reason="charged", read from the count when the metrics are collected;
// counting a charge allocates nothing.
func TestChargeCounter(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var c chargeCounter
	reg, err := c.init(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { c.n.Add(1) }); n != 0 {
		t.Errorf("counting a charge: %v allocations; want 0", n)
	}
	c.n.Store(0)
	for range 3 {
		c.n.Add(1)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var got []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "llmproxy.stream.charges" {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
					t.Fatalf("llmproxy.stream.charges is %T %+v; want a cumulative monotonic sum", m.Data, m.Data)
				}
				got = sum.DataPoints
			}
		}
	}
	if len(got) != 1 || got[0].Value != 3 || !got[0].Attributes.Equals(ptr(attribute.NewSet(attribute.String("reason", "charged")))) {
		t.Errorf("llmproxy.stream.charges = %+v; want one point, 3, reason=charged", got)
	}
	// Unregistered (Gateway.Close), the counter reports nothing more.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); m.Name == "llmproxy.stream.charges" && ok && len(sum.DataPoints) > 0 {
				t.Errorf("after Unregister llmproxy.stream.charges = %+v; want no points", sum.DataPoints)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
