package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
)

// SettledEvent is the name of the span event a request's settlement adds
// to its server span: the cost it was charged in the end, per unit
// (KeySettledTokens, KeySettledCost and one sluice.cost.settled.<unit>
// per token unit), next to the decision events of package oteltrace and
// their sluice.cost.estimated.
const SettledEvent = "sluice.admission.settled"

// The attribute keys of the settlement event.
const (
	// KeySettledTokens is the tokens the request was charged.
	KeySettledTokens = attribute.Key("sluice.cost.settled.tokens")
	// KeySettledCost is the cost, in micro-dollars, the request was
	// charged, on priced requests only.
	KeySettledCost = attribute.Key("sluice.cost.settled.cost")
)

// traceContext is the only propagation the gateway does: the W3C trace
// context (traceparent, tracestate) read from clients and written to the
// upstream. No baggage: what a tenant puts in it is not forwarded.
var traceContext propagation.TextMapPropagator = propagation.TraceContext{}

// Handler returns next (the echo server Register filled) served under a
// server span per request when WithTracerProvider is set, and next
// itself otherwise. The span continues the client's W3C traceparent; it
// is named by the matched route ("POST /v1/chat/completions"), never by
// the path the client sent, and a request no route matched by its method
// alone (HTTP for a method outside the standard ones). The probes are
// not traced. The admission decisions of the request are events on that
// span when the controller's observers include oteltrace.Observer.
func (g *Gateway) Handler(next http.Handler) http.Handler {
	tp := g.opt.tp
	if tp == nil {
		return next
	}
	return otelhttp.NewHandler(next, "llmproxy",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(traceContext),
		// The gateway's own instruments measure requests; otelhttp's
		// would be a second, unbounded set.
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/healthz" && r.URL.Path != "/readyz" }),
		otelhttp.WithSpanNameFormatter(serverSpanName))
}

// serverSpanName names a server span by the request's pattern, which the
// gateway's routes set ("METHOD route"), else by its method when it is a
// standard one: a bounded set of names either way.
func serverSpanName(_ string, r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return r.Method
	}
	return "HTTP"
}

// tracedTransport returns rt making a client span of each upstream call,
// child of the request's span, with the trace context injected into the
// outgoing request: traceparent and tracestate, nothing else.
func tracedTransport(rt http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(traceContext),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()))
}

// settledEvent adds SettledEvent with u's amounts to the span of ctx when
// it is recording.
func settledEvent(ctx context.Context, u *admission.Usage) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var buf [5]attribute.KeyValue
	attrs := buf[:0]
	if u.TokensKnown {
		attrs = append(attrs, KeySettledTokens.Int64(u.Tokens))
	}
	if u.CostKnown {
		attrs = append(attrs, KeySettledCost.Int64(u.Cost))
	}
	for _, a := range u.Units {
		attrs = append(attrs, attribute.Int64("sluice.cost.settled."+string(a.Unit), a.Amount))
	}
	span.AddEvent(SettledEvent, trace.WithAttributes(attrs...))
}
