package main

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/oteltrace"
)

// MaxSpanAttributeBytes bounds the value of a span attribute, unless
// OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT
// sets another bound: a client's User-Agent and path go on its server span,
// and the SDK's default keeps them whole (up to MaxHeaderBytes).
const MaxSpanAttributeBytes = 1024

// startTracing builds the tracer provider that exports spans over
// OTLP/HTTP to --otlp-traces, else to the receiver the OTEL_* variables
// name (none: no tracing, at no cost), and wraps the log's handler so
// that every line logged with a request's context, the decision log's
// among them, carries its trace_id and span_id.
func (s *server) startTracing(endpoint string) error {
	s.log = slog.New(oteltrace.LogHandler(s.log.Handler()))
	limits := sdktrace.NewSpanLimits() // OTEL_SPAN_*_LIMIT, OTEL_ATTRIBUTE_*_LIMIT
	if limits.AttributeValueLengthLimit < 0 {
		limits.AttributeValueLengthLimit = MaxSpanAttributeBytes
	}
	tp, where, err := oteltrace.NewTracerProvider(context.Background(), endpoint, sdktrace.WithRawSpanLimits(limits))
	if err != nil {
		return err
	}
	if tp != nil {
		s.traces, s.tracesTo = tp, where
	}
	return nil
}

// traceObserver returns the observer that records each admission
// decision as an event on the request's server span, or one that does
// nothing when there are no traces.
func (s *server) traceObserver() admission.Observer {
	if s.traces == nil {
		return admission.NopObserver{}
	}
	return oteltrace.Observer{}
}

// setGlobalTracing makes the proxy's tracer provider the global one, with
// the W3C trace context as the only propagation (no baggage: what a
// tenant sends in it is not forwarded), for the libraries that read the
// globals. The gateway itself is given the provider.
func (s *server) setGlobalTracing() {
	if s.traces != nil {
		otel.SetTracerProvider(s.traces)
		otel.SetTextMapPropagator(propagation.TraceContext{})
	}
}

// shutdownTracing exports the last spans within ctx and stops the
// exporter; a second call does nothing.
func (s *server) shutdownTracing(ctx context.Context) error {
	if s.traces == nil {
		return nil
	}
	return s.traces.Shutdown(ctx)
}
