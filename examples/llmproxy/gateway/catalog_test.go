package gateway_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/weights"
)

// recordingMeter records the name and Prometheus type of every
// instrument created on it, as the exporter names them.
type recordingMeter struct {
	noop.Meter
	got map[string]string
}

// recordingProvider gives the gateway its recordingMeter.
type recordingProvider struct {
	noop.MeterProvider
	m *recordingMeter
}

func (p recordingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return p.m }

// add records an instrument: dots become underscores, the unit s adds
// _seconds, a counter _total.
func (m *recordingMeter) add(name, unit, typ string) {
	n := strings.ReplaceAll(name, ".", "_")
	if unit == "s" {
		n += "_seconds"
	}
	if typ == "counter" {
		n += "_total"
	}
	m.got[n] = typ
}

func (m *recordingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.add(name, metric.NewInt64CounterConfig(opts...).Unit(), "counter")
	return m.Meter.Int64Counter(name, opts...)
}

func (m *recordingMeter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	m.add(name, metric.NewInt64ObservableCounterConfig(opts...).Unit(), "counter")
	return m.Meter.Int64ObservableCounter(name, opts...)
}

func (m *recordingMeter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	m.add(name, metric.NewInt64UpDownCounterConfig(opts...).Unit(), "gauge")
	return m.Meter.Int64UpDownCounter(name, opts...)
}

func (m *recordingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.add(name, metric.NewFloat64HistogramConfig(opts...).Unit(), "histogram")
	return m.Meter.Float64Histogram(name, opts...)
}

func (m *recordingMeter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	m.add(name, metric.NewInt64HistogramConfig(opts...).Unit(), "histogram")
	return m.Meter.Int64Histogram(name, opts...)
}

func (m *recordingMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	m.add(name, metric.NewInt64ObservableGaugeConfig(opts...).Unit(), "gauge")
	return m.Meter.Int64ObservableGauge(name, opts...)
}

func (m *recordingMeter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	m.add(name, metric.NewFloat64ObservableGaugeConfig(opts...).Unit(), "gauge")
	return m.Meter.Float64ObservableGauge(name, opts...)
}

// The catalog lists exactly the instruments the gateway creates, with
// their exported names and types, sorted.
func TestCatalog(t *testing.T) {
	f, err := config.Parse("catalog.yaml", []byte("policies: [{name: rpm, algorithm: token_bucket, limit: 1, per: 1s}]"))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	est, _ := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	m := &recordingMeter{got: map[string]string{}}
	if _, err := gateway.New(ctl, est, f, gateway.Config{Upstream: "http://127.0.0.1:1/v1", MCP: gateway.MCP{Upstream: "http://127.0.0.1:1/mcp"}}, gateway.WithMeterProvider(recordingProvider{m: m}), gateway.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Fatal(err)
	}
	cat := gateway.Catalog()
	want := map[string]string{}
	for _, c := range cat {
		want[c.Name] = c.Type
	}
	for name, typ := range m.got {
		if want[name] != typ {
			t.Errorf("the gateway exports %s (%s); the catalog has %q", name, typ, want[name])
		}
	}
	for name := range want {
		if _, ok := m.got[name]; !ok {
			t.Errorf("the catalog lists %s, which the gateway does not create", name)
		}
	}
	if !slices.IsSortedFunc(cat, func(a, b metrics.Metric) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("the catalog is not sorted by name")
	}
}
