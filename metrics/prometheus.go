package metrics

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
)

// DefaultCardinalityLimit is the hard stop NewPrometheus sets on every
// instrument (sdkmetric.WithCardinalityLimit): past it, new attribute sets
// are folded into one series labelled otel_metric_overflow="true", which
// the AdmissionMetricCardinalityOverflow alert reports. The bounded labels
// keep real use far below it: see the series bound in docs/metrics.md.
const DefaultCardinalityLimit = 2000

// Prometheus is a meter provider whose metrics are served in the Prometheus
// exposition format.
type Prometheus struct {
	// Provider holds the instruments; pass it to New with WithMeterProvider
	// and shut it down when done.
	Provider *sdkmetric.MeterProvider
	// Registry is the client_golang registry the exporter registered
	// with; register other collectors on it to serve them together.
	Registry *prometheus.Registry
	// Handler serves Registry at a scrape endpoint (conventionally /metrics).
	Handler http.Handler
}

// NewPrometheus returns a meter provider exporting through the
// OpenTelemetry Prometheus exporter into a new client_golang registry, and
// the http.Handler that serves it. cardinalityLimit is the per-instrument
// hard stop; zero means DefaultCardinalityLimit. Further provider options
// (a resource, views) are appended.
//
// The handler serves the OpenMetrics format to a scraper that asks for it
// (Prometheus does), with exemplars: the provider keeps the trace_based
// exemplar filter, so a histogram measurement made under a sampled span
// (the queue wait, recorded in the request's context) carries the trace
// and span ids a Prometheus started with --enable-feature=exemplar-storage
// keeps and a Grafana data link opens.
//
// To push to an OpenTelemetry collector instead, build an
// sdkmetric.MeterProvider with an OTLP exporter's periodic reader and
// sdkmetric.WithCardinalityLimit, and pass it to New with
// WithMeterProvider: the observer does not care which reader collects.
func NewPrometheus(cardinalityLimit int, opts ...sdkmetric.Option) (*Prometheus, error) {
	if cardinalityLimit == 0 {
		cardinalityLimit = DefaultCardinalityLimit
	}
	if cardinalityLimit < 0 {
		return nil, fmt.Errorf("metrics: cardinality limit must be >= 0, got %d", cardinalityLimit)
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	all := append([]sdkmetric.Option{
		sdkmetric.WithReader(exp), sdkmetric.WithCardinalityLimit(cardinalityLimit),
		sdkmetric.WithExemplarFilter(exemplar.TraceBasedFilter),
	}, opts...)
	return &Prometheus{
		Provider: sdkmetric.NewMeterProvider(all...),
		Registry: reg,
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}),
	}, nil
}

// ModelFamily maps a model name to a small, fixed set of families for the
// model_family label: "gpt-4o", "gpt-4.1", "gpt-4", "gpt-3.5", "o-series",
// "embedding", "claude", "gemini", "llama", "mistral", "none" for no model, and
// "other".
func ModelFamily(model string) string {
	m := strings.ToLower(model)
	switch {
	case m == "":
		return "none"
	case strings.Contains(m, "embedding"):
		return "embedding"
	case strings.HasPrefix(m, "gpt-4o"):
		return "gpt-4o"
	case strings.HasPrefix(m, "gpt-4.1"):
		return "gpt-4.1"
	case strings.HasPrefix(m, "gpt-4"):
		return "gpt-4"
	case strings.HasPrefix(m, "gpt-3.5"):
		return "gpt-3.5"
	case len(m) > 1 && m[0] == 'o' && m[1] >= '0' && m[1] <= '9':
		return "o-series"
	case strings.HasPrefix(m, "claude"):
		return "claude"
	case strings.HasPrefix(m, "gemini"):
		return "gemini"
	case strings.Contains(m, "llama"):
		return "llama"
	case strings.Contains(m, "mistral"), strings.Contains(m, "mixtral"):
		return "mistral"
	}
	return "other"
}
