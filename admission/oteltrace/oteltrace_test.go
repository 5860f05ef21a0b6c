package oteltrace_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/oteltrace"
	"github.com/sluicehq/sluice/shadow"
)

// receiver is an OTLP/HTTP trace receiver: it decodes the collector's
// protobuf export requests and keeps their spans.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.Value
		switch {
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		default:
			m[kv.Key] = strings.Trim(v.String(), " ")
		}
	}
	return m
}

// TestRejectedRequestSpanOverOTLP: a plain net/http service behind the
// httpadmit middleware, its server span started by otelhttp from the
// caller's traceparent and exported by NewTracerProvider to an OTLP/HTTP
// receiver named by OTEL_EXPORTER_OTLP_ENDPOINT. The rejected request's
// span, in the caller's trace, carries the decision event with the
// policy, mode, outcome, reason, retry-after, cost and tenant; and the
// decision log's line carries the same trace and span ids.
func TestRejectedRequestSpanOverOTLP(t *testing.T) {
	rc := &receiver{}
	otlp := httptest.NewServer(rc)
	defer otlp.Close()
	t.Setenv(oteltrace.TracesEndpointEnv, "")
	t.Setenv(oteltrace.EndpointEnv, otlp.URL)
	tp, where, err := oteltrace.NewTracerProvider(context.Background(), "")
	if err != nil || tp == nil {
		t.Fatalf("NewTracerProvider = %v, %q, %v; want a provider", tp, where, err)
	}
	if where != "$"+oteltrace.EndpointEnv {
		t.Errorf("where = %q; want $%s", where, oteltrace.EndpointEnv)
	}

	var logs bytes.Buffer
	var logMu sync.Mutex
	dlog, err := shadow.NewLog(shadow.LogConfig{RejectSample: 1},
		shadow.WithLogger(slog.New(oteltrace.LogHandler(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil)))))
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "shadow-rpm", Mode: limits.Shadow, Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour},
		{Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: 1, Per: time.Hour},
	}}, admission.WithObserver(shadow.Join(oteltrace.Observer{}, dlog)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	mw, err := httpadmit.New(ctl, httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
		Keys: map[apikey.Hash]httpadmit.Identity{apikey.Sum("sk-acme"): {Tenant: "acme"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	app := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv := httptest.NewServer(otelhttp.NewHandler(app, "items",
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.TraceContext{})))
	defer srv.Close()

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var codes []int
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/items", nil)
		req.Header.Set("Authorization", "Bearer sk-acme")
		req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests {
		t.Fatalf("status codes = %v; want [200 429]", codes)
	}
	if err := tp.Shutdown(context.Background()); err != nil { // flushes the batch
		t.Fatal(err)
	}

	rc.mu.Lock()
	spans := rc.spans
	rc.mu.Unlock()
	var rejected *tracepb.Span
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == "http.response.status_code" && kv.Value.GetIntValue() == http.StatusTooManyRequests {
				rejected = s
			}
		}
	}
	if rejected == nil {
		t.Fatalf("no span of the rejected request among %d exported spans", len(spans))
	}
	if got := hexID(rejected.TraceId); got != traceID {
		t.Errorf("rejected span's trace id = %s; want the caller's %s", got, traceID)
	}
	byPolicy := map[string]map[string]string{}
	for _, e := range rejected.Events {
		if e.Name == oteltrace.EventName {
			a := attrs(e.Attributes)
			byPolicy[a["sluice.policy"]] = a
		}
	}
	want := map[string]map[string]string{
		"per-tenant": {"sluice.mode": "enforce", "sluice.outcome": "rejected", "sluice.reason": "rate", "sluice.tenant": "acme"},
		"shadow-rpm": {"sluice.mode": "shadow", "sluice.outcome": "would_reject", "sluice.reason": "rate", "sluice.tenant": "acme"},
	}
	for policy, w := range want {
		got, ok := byPolicy[policy]
		if !ok {
			t.Errorf("no decision event of %s on the rejected span; events: %v", policy, byPolicy)
			continue
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("event of %s: %s = %q; want %q", policy, k, got[k], v)
			}
		}
		for _, k := range []string{"sluice.cost.estimated", "sluice.queue.wait", "sluice.retry_after", "sluice.limit", "sluice.remaining"} {
			if _, ok := got[k]; !ok {
				t.Errorf("event of %s: no %s", policy, k)
			}
		}
	}

	logMu.Lock()
	defer logMu.Unlock()
	span := hexID(rejected.SpanId)
	if !strings.Contains(logs.String(), `"trace_id":"`+traceID+`","span_id":"`+span+`"`) {
		t.Errorf("decision log has no line with trace_id %s and span_id %s:\n%s", traceID, span, logs.String())
	}
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestUnrecordedDecisionAllocatesNothing: without a span, or under one a
// sampler dropped, the observer costs no allocation.
func TestUnrecordedDecisionAllocatesNothing(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	for _, c := range []context.Context{nil, context.Background(), ctx} {
		d := &admission.Decision{Outcome: admission.Rejected, Reason: admission.ReasonRate, Tenant: "acme", Context: c}
		if n := testing.AllocsPerRun(100, func() { oteltrace.Observer{}.Decision(d) }); n != 0 {
			t.Errorf("Decision with context %v: %v allocations; want 0", c, n)
		}
	}
}

// TestHostileRequestKeepsTraceExport: behind the generic middleware
// (no routes: the operation is the method and the path the client sent)
// of a service that starts its own server spans, one request whose path decodes to invalid UTF-8 and one with a very
// long path are decided under sampled server spans, next to an ordinary
// request. The OTLP export carries the three spans, in one batch, with
// every decision attribute valid UTF-8 of at most oteltrace.MaxValue
// bytes: one hostile request neither drops the batch of every other
// request's spans (protobuf refuses invalid UTF-8) nor bloats it.
func TestHostileRequestKeepsTraceExport(t *testing.T) {
	rc := &receiver{}
	otlp := httptest.NewServer(rc)
	defer otlp.Close()
	tp, _, err := oteltrace.NewTracerProvider(context.Background(), otlp.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "global", Algorithm: limits.FixedWindow, Limit: 100, Per: time.Hour},
	}}, admission.WithObserver(oteltrace.Observer{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	mw, err := httpadmit.New(ctl)
	if err != nil {
		t.Fatal(err)
	}
	app := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	// The service starts its server spans itself, as the gateway does,
	// and records nothing of the path on them.
	tracer := tp.Tracer("service")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), "request")
		defer span.End()
		app.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer srv.Close()
	paths := []string{"/ok", "/%FF%FE", "/" + strings.Repeat("a", 32<<10)}
	for _, p := range paths {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %.20s: %d; want 200", p, resp.StatusCode)
		}
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.spans) != len(paths) {
		t.Fatalf("%d spans exported; want %d, one per request", len(rc.spans), len(paths))
	}
	for _, s := range rc.spans {
		for _, e := range s.Events {
			for k, v := range attrs(e.Attributes) {
				if !utf8.ValidString(v) || len(v) > oteltrace.MaxValue {
					t.Errorf("event attribute %s = %.40q (%d bytes); want valid UTF-8 of at most %d bytes", k, v, len(v), oteltrace.MaxValue)
				}
			}
		}
	}
}
