// Package metrics exports an admission.Controller's decisions as
// OpenTelemetry metrics in the "admission." namespace, with bounded label
// sets, and serves them to Prometheus.
//
// Names follow the conventions of ASP.NET Core's rate-limiting metrics
// (aspnetcore.rate_limiting.*: one decisions counter with a closed result
// enum, time-in-queue and lease-duration histograms in seconds, queued and
// active gauges) and the OpenTelemetry GenAI conventions for tokens.
// Catalog lists every metric under its final Prometheus name.
//
// Labels come from closed sets (policy names from configuration, the
// admission enums, a bounded model family) with one exception, the tenant,
// which is bounded by a heavy-hitter sketch per policy: the top K tenants
// by refused cost by name, everyone else as "__other__". The SDK's
// cardinality limit (NewPrometheus sets it explicitly) is the hard stop
// behind these bounds; SeriesBound gives the resulting maximum.
//
// The request path costs one atomic addition per decision: counts and
// costs live in precomputed cells read by observable counters when
// Prometheus scrapes. Only queue waits, lease durations and estimate
// accuracy are recorded synchronously, with prebuilt attribute sets.
//
// Prometheus: NewPrometheus returns the provider and an http.Handler.
// OTLP: build an sdkmetric.MeterProvider with an OTLP exporter's reader
// (go.opentelemetry.io/otel/exporters/otlp/otlpmetric/...) and
// sdkmetric.WithCardinalityLimit, and pass it with WithMeterProvider.
//
// The metrics table, the series bound and the dashboards and alerts built
// on these metrics are in docs/metrics.md in the repository.
package metrics
