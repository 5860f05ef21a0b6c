// Package oteltrace records Sluice's admission decisions on OpenTelemetry
// traces: it is the tracing adapter of package admission, as httpadmit is
// its net/http adapter, named after what it adapts to (OpenTelemetry
// traces) so that a reader looking for "where do the spans come from"
// finds it next to the other adapters.
//
// # Events, not child spans
//
// Each policy's verdict on a request is one span event, named
// "sluice.admission.decision", on the span active in the request's
// context (the server span otelhttp or the gateway started). An event,
// not a child span, because a decision is an instant in the request's
// life: the only duration it has, the queue wait, is an attribute of it;
// a child span per policy would multiply the spans a backend stores by
// the number of policies for no extra information, and a rejected
// request's server span already shows where its time went. The events
// keep the order the controller evaluated the policies in.
//
// The attributes of an event: sluice.policy, sluice.mode (shadow,
// enforce), sluice.outcome (admitted, rejected, would_reject, ...),
// sluice.reason, sluice.unit, sluice.cost.estimated (the request's cost in
// the policy's unit), sluice.queue.wait (seconds), sluice.retry_after
// (seconds, on refusals), sluice.limit and sluice.remaining, sluice.rolled_back
// when another policy's refusal gave the permits back, and the request's
// sluice.tenant, sluice.operation and sluice.model, each valid UTF-8 of
// at most MaxValue bytes (Value). The tenant is allowed on a span (one
// request, one trace), never on a metric.
//
// Nothing is recorded, and nothing allocated, when the span is not
// recording (no span, or a sampler that dropped it).
//
// # Wiring
//
// Give the controller the Observer, joined with the others
// (shadow.Join), serve requests under a server span (otelhttp.NewHandler),
// export the spans with NewTracerProvider (OTLP/HTTP configured by the
// standard OTEL_* variables), and wrap the logger's handler in
// LogHandler so that the decision log's lines carry trace_id and span_id.
package oteltrace

import (
	"context"
	"log/slog"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// EventName is the name of the span event of one policy's decision.
const EventName = "sluice.admission.decision"

// The attribute keys of a decision event.
const (
	KeyPolicy     = attribute.Key("sluice.policy")
	KeyMode       = attribute.Key("sluice.mode")
	KeyOutcome    = attribute.Key("sluice.outcome")
	KeyReason     = attribute.Key("sluice.reason")
	KeyUnit       = attribute.Key("sluice.unit")
	KeyCost       = attribute.Key("sluice.cost.estimated")
	KeyQueueWait  = attribute.Key("sluice.queue.wait")
	KeyRetryAfter = attribute.Key("sluice.retry_after")
	KeyLimit      = attribute.Key("sluice.limit")
	KeyRemaining  = attribute.Key("sluice.remaining")
	KeyRolledBack = attribute.Key("sluice.rolled_back")
	KeyTenant     = attribute.Key("sluice.tenant")
	KeyOperation  = attribute.Key("sluice.operation")
	KeyModel      = attribute.Key("sluice.model")
)

// maxAttrs is the most attributes a decision event has.
const maxAttrs = 14

// Observer records each decision on the recording span of its request's
// context (admission.Decision.Context). It is an admission.Observer; join
// it with the metrics observer and the decision log (shadow.Join).
type Observer struct {
	admission.NopObserver
}

var _ admission.Observer = Observer{}

// Decision adds the decision's event to the span of d.Context when that
// span is recording.
func (Observer) Decision(d *admission.Decision) {
	if d.Context == nil {
		return
	}
	span := trace.SpanFromContext(d.Context)
	if !span.IsRecording() {
		return
	}
	var buf [maxAttrs]attribute.KeyValue
	span.AddEvent(EventName, trace.WithAttributes(Attributes(buf[:0], d)...))
}

// Attributes appends the attributes of d's event to dst and returns the
// extended slice.
func Attributes(dst []attribute.KeyValue, d *admission.Decision) []attribute.KeyValue {
	dst = append(dst,
		KeyPolicy.String(d.Policy),
		KeyMode.String(d.Mode.String()),
		KeyOutcome.String(d.Outcome.String()),
		KeyReason.String(d.Reason.String()),
		KeyUnit.String(string(d.Unit)),
		KeyCost.Int64(d.Cost),
		KeyQueueWait.Float64(d.QueueWait.Seconds()),
	)
	if d.RetryAfter != 0 && d.RetryAfter != limits.Never {
		dst = append(dst, KeyRetryAfter.Float64(d.RetryAfter.Seconds()))
	}
	if d.Limit != 0 {
		dst = append(dst, KeyLimit.Int64(d.Limit), KeyRemaining.Int64(d.Remaining))
	}
	if d.RolledBack {
		dst = append(dst, KeyRolledBack.Bool(true))
	}
	return append(dst, KeyTenant.String(Value(d.Tenant)), KeyOperation.String(Value(d.Operation)), KeyModel.String(Value(d.Model)))
}

// MaxValue bounds the length in bytes of the string attributes a decision
// event takes from the request (tenant, operation, model).
const MaxValue = 256

// Value returns s as a decision event records it: s itself when it is
// valid UTF-8 of at most MaxValue bytes (without allocating), else with
// each invalid byte sequence replaced by U+FFFD and cut at a character
// boundary to MaxValue bytes ending in "...". A span exporter's protobuf
// encoding refuses invalid UTF-8 and with it the whole batch of spans, so
// that one request naming an operation "GET /%FF" would otherwise drop
// every other request's spans exported with it.
func Value(s string) string {
	if len(s) <= MaxValue && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxValue {
		return s
	}
	const ellipsis = "..."
	cut := MaxValue - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// LogHandler returns a handler that adds trace_id and span_id to every
// record logged with a context holding a valid span context, and passes
// the record to h. The decision log (shadow.Log) logs with the request's
// context, so its lines join the request's trace.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

// Handle adds the ids of ctx's span, if any, and passes r on.
func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the derived handler.
func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

// WithGroup keeps the wrapper around the derived handler.
func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.Handler.WithGroup(name)}
}
