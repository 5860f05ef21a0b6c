package oteltrace

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission/config"
)

// The variables that name an OTLP receiver for traces. Either one turns
// the export on without an endpoint flag; the exporter reads them (and the
// other OTEL_EXPORTER_OTLP_* variables: headers, timeout, compression,
// certificates) itself, and the SDK reads OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
const (
	EndpointEnv       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	TracesEndpointEnv = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// NewTracerProvider returns a tracer provider that batches spans to the
// OTLP/HTTP receiver endpoint names (the --otlp-traces flag of the
// commands, next to the metrics push's --otlp-endpoint), and where, a
// description of the receiver for a start-up banner that shows no
// credentials. Precedence, most first: endpoint (a URL without a path gets
// /v1/traces), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT.
// With none of them it returns nil, "" and no error: nothing is exported,
// and the caller keeps the global no-op provider. The endpoint replaces
// only the URL: the other OTEL_* variables still apply. Shut the provider
// down at exit to flush the last spans.
func NewTracerProvider(ctx context.Context, endpoint string, opts ...sdktrace.TracerProviderOption) (tp *sdktrace.TracerProvider, where string, err error) {
	var eopts []otlptracehttp.Option
	switch {
	case endpoint != "":
		u, err := endpointURL(endpoint)
		if err != nil {
			return nil, "", err
		}
		where = config.RedactURL(u.String())
		eopts = append(eopts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv(TracesEndpointEnv) != "":
		where = "$" + TracesEndpointEnv
	case os.Getenv(EndpointEnv) != "":
		where = "$" + EndpointEnv
	default:
		return nil, "", nil
	}
	// New only builds the client: nothing is sent until the first batch.
	exp, err := otlptracehttp.New(ctx, eopts...)
	if err != nil {
		return nil, "", fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, "", fmt.Errorf("otlp trace resource: %w", err)
	}
	all := append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}, opts...)
	return sdktrace.NewTracerProvider(all...), where, nil
}

// endpointURL checks the endpoint flag (the exporter would silently fall
// back to localhost on a bad URL) and gives a URL without a path the
// receivers' usual /v1/traces.
func endpointURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp-traces: %q is not an http:// or https:// URL", config.RedactURL(s))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u, nil
}
